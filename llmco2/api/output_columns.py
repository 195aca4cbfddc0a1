"""The columns a prediction adds after its energy and carbon: the assumptions each row was charged
at and its notes (``predict --requests`` outputs, the Parquet parts of ``--cluster`` runs and
:func:`llmco2.predict_frame`, all alike).

* ``grid_region``: the grid region of the row's intensity: the catalog id (``fra``) of the row's
  ``region`` cell, else of ``--region``, else the run's region (``world`` for the world average);
  with an hourly intensity file, the file's region the row was looked up in (its catalog id when
  it is a known region, else its name in lower case); empty when the intensity was given as a
  number (``--carbon-intensity``) or the intensity file names no region.
* ``intensity_g_per_kwh``: the grid intensity the row's operational carbon used (g CO2eq/kWh): the
  row's hour with an intensity file, the row's region's annual average with a region column, else
  the run's.
* ``pue``: the power usage effectiveness applied (facility over IT energy, dimensionless).
* ``notes``: in words, separated by ``"; "``, what the single ``llmco2 predict`` lists for the same
  request: what the model's architecture entry approximates, that the request does not fit its
  GPUs' memory, why the row is extrapolated (an unseen GPU, engine or architecture family, a count
  outside the trained range) and an unknown embodied carbon; empty when there is nothing to say.

The input keeps its own columns: a column named like one of these is refused (unless the input is
an earlier output, which holds every prediction column: its old columns are then replaced, as the
prediction columns are).

The grid region is named ``grid_region``, not ``region``: ``region`` is an input column (a region
name or alias per row, as the user wrote it), and the output keeps it unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.model import sequences_at_once
from llmco2.errors import InvalidInputError
from llmco2.specs import get_engine
from llmco2.specs.engines import GPU_MEMORY_UTILIZATION

#: The columns added after the prediction columns, in this order.
ASSUMPTION_COLUMNS = ("grid_region", "intensity_g_per_kwh", "pue", "notes")
#: What each one holds, in a few words (messages).
_WHAT = {"grid_region": "the grid region each row is charged at", "intensity_g_per_kwh": "the grid intensity each row used",
         "pue": "the PUE each row used", "notes": "each row's notes"}
#: The input column of per-row regions.
REGION_COLUMN = "region"


def check_added_columns(where: str, header: Sequence[str], prediction_columns: Sequence[str], field: str = "requests") -> bool:
    """Whether ``header`` holds columns the prediction adds (:data:`ASSUMPTION_COLUMNS`) that are
    to be replaced: only an earlier output (it has every one of ``prediction_columns``) may hold
    them; anywhere else such a column is the user's own and is refused, naming it, rather than
    overwritten (:class:`~llmco2.errors.InvalidInputError` on ``field``)."""
    names = [str(h).strip() for h in header]
    clash = [h for h in names if h in ASSUMPTION_COLUMNS]
    if not clash:
        return False
    if all(c in names for c in prediction_columns):
        return True
    raise InvalidInputError(f"{where} has a column named {clash[0]!r}, which predict adds ({_WHAT[clash[0]]}); rename "
                            "that column (every input column is written back unchanged)", field=field)


def hourly_fallback(regions: Sequence[str]) -> str | None:
    """The grid region of rows that name none, with an hourly intensity file of ``regions`` (as
    written): the file's one region, when it names one; else ``None``."""
    from llmco2.carbon.hourly import region_key

    return region_key(regions[0]) if len(regions) == 1 and str(regions[0]).strip() else None


def annual_fallback() -> str:
    """The grid region of rows that name none, with a region column and no ``--region``: the world."""
    from llmco2.carbon.accounting import region

    return region(None).id


def strings(texts: Sequence[str | None]) -> Any:
    """An Arrow string array of ``texts`` (``None``: null), built from buffers: ``pa.array`` and
    ``pa.scalar`` would import pandas (:mod:`llmco2.analytic.arrow_arrays`)."""
    import pyarrow as pa

    from llmco2.analytic.arrow_arrays import string_array

    values = string_array(["" if t is None else t for t in texts])
    valid = np.fromiter((t is not None for t in texts), dtype=bool, count=len(texts))
    if valid.all():
        return values
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.string(), len(texts), [bitmap, *values.buffers()[1:]], null_count=-1)


def repeated(value: str | float | None, n: int) -> Any:
    """``n`` rows of one value: a string (``None``: null string) or a float."""
    from llmco2.analytic.arrow_arrays import arrow_array

    if isinstance(value, float):
        return arrow_array(np.full(n, value, dtype=np.float64))
    return strings([value]).take(arrow_array(np.zeros(n, dtype=np.int64)))


def region_array(cells: Any, n: int, default_region: str | None, fallback: str | None) -> Any:
    """The ``grid_region`` Arrow array (string) of ``n`` rows: each row's region cell (``cells``,
    an Arrow array, or ``None`` when there is no region column) as its catalog id (an unknown name
    in lower case); an empty cell takes ``default_region`` (``--region``), else ``fallback``. Each
    distinct cell is resolved once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from llmco2.analytic.arrow_arrays import string_scalar
    from llmco2.carbon.hourly import region_key

    default = region_key(default_region) if default_region is not None and str(default_region).strip() else fallback
    if cells is None:
        return repeated(default, n)
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    text = cells if pa.types.is_string(cells.type) else pc.cast(cells, pa.string())
    encoded = text.fill_null(string_scalar("")).dictionary_encode()
    labels = [region_key(v) if v.strip() else default for v in encoded.dictionary.to_pylist()]
    return strings(labels).take(encoded.indices)


def memory_note(weight_bytes: float, cache_bytes: float, gpu: Any, num_gpus: int, batch: int = 1,
                paged: bool = False) -> str:
    """The note of a request whose weights and KV cache (bytes per GPU, the cache of all ``batch``
    sequences at their full length) do not fit the memory of each of its ``num_gpus`` GPUs
    ``gpu`` (the words of the single ``llmco2 predict``); under an engine that pages its cache
    (``paged``), that the batch runs in waves of the sequences that fit (as the prediction costs
    it: :attr:`llmco2.physics.priors.PhaseInputs.at_once`); empty when it fits and runs at once."""
    at_once = float(sequences_at_once(weight_bytes, cache_bytes, gpu.memory_bytes, batch, GPU_MEMORY_UTILIZATION)) \
        if paged else float(batch)
    if at_once < batch:
        return (f"KV cache of {batch} sequences ({cache_bytes / 1e9:.2f} GB per GPU) does not fit beside the "
                f"{weight_bytes / 1e9:.1f} GB of weights in {GPU_MEMORY_UTILIZATION:.0%} of {gpu.memory_bytes / 1e9:.0f} GB "
                f"on each of {num_gpus} x {gpu.id}: the prediction runs {at_once:.0f} at a time, "
                f"{batch / at_once:.1f} waves, as the engine's paged cache would")
    if weight_bytes + cache_bytes <= gpu.memory_bytes:
        return ""
    need = weight_bytes + cache_bytes
    return (f"does not fit: needs {need / 1e9:.1f} GB per GPU ({weight_bytes / 1e9:.1f} GB weights + "
            f"{cache_bytes / 1e9:.2f} GB cache), {gpu.memory_bytes / 1e9:.0f} GB available on each of "
            f"{num_gpus} x {gpu.id}; the prediction assumes it ran")


def notes_array(fp: Any, table: Any) -> Any:
    """The ``notes`` Arrow array (string) of the footprint ``fp`` of the requests ``table`` (a
    :class:`~llmco2.analytic.table.RequestTable`): per row, in the order the single ``llmco2
    predict`` lists them, what the architecture entry approximates (joined once per distinct
    architecture), that the request does not fit its GPUs' memory or runs in waves
    (:func:`memory_note`), then the footprint's notes (why it is extrapolated, an unknown embodied
    carbon); joined with ``"; "``, empty where there are none."""
    from llmco2.analytic.arrow_arrays import string_array

    n = len(table)
    text = list(map("; ".join, fp.notes)) if len(fp.notes) == n else [""] * n
    fits = getattr(fp, "fits_in_memory", None)
    if fits is not None and fp.memory_bytes is not None:
        for i in memory_note_rows(fp.memory_bytes, np.asarray(fits, dtype=bool), table).tolist():
            weights, cache = (float(v) for v in fp.memory_bytes[i])
            kind = table.kinds[int(table.kind[i])]
            note = memory_note(weights, cache, table.gpus[int(table.gpu[i])], int(table.num_gpus[i]),
                               int(table.batch_size[i]), get_engine(kind.engine).continuous_batching)
            text[i] = f"{note}; {text[i]}" if text[i] else note
    arch_code = np.asarray(table.arch)
    for code, arch in enumerate(table.archs):
        words = "; ".join(getattr(arch, "approximations", ()) or ())
        if not words:
            continue
        for i in np.flatnonzero(arch_code == code).tolist():
            text[i] = f"{words}; {text[i]}" if text[i] else words
    return string_array(text)


def memory_note_rows(memory_bytes: NDArray[np.float64], fits: NDArray[np.bool_], table: Any) -> NDArray[np.int64]:
    """Indices of the rows of ``table`` that get a :func:`memory_note`: those whose weights and
    caches (``memory_bytes`` ``[n, 2]`` per GPU) do not fit (``fits`` false), and those whose
    engine pages its cache and holds fewer than the whole batch at once."""
    paged = np.array([get_engine(k.engine).continuous_batching for k in table.kinds], dtype=bool)[np.asarray(table.kind)]
    if not paged.any():
        return np.flatnonzero(~fits)
    memory = np.array([g.memory_bytes for g in table.gpus], dtype=np.float64)[np.asarray(table.gpu)]
    batch = np.asarray(table.batch_size, dtype=np.float64)
    at_once = sequences_at_once(memory_bytes[:, 0], memory_bytes[:, 1], memory, batch, GPU_MEMORY_UTILIZATION)
    return np.flatnonzero(~fits | (paged & (at_once < batch)))


def assumption_arrays(fp: Any, table: Any, intensities: NDArray[np.float64] | None, regions: Any) -> list[Any]:
    """The :data:`ASSUMPTION_COLUMNS` of a footprint ``fp`` of the requests ``table`` (a
    :class:`~llmco2.analytic.table.RequestTable`) as Arrow arrays: ``regions`` (from
    :func:`region_array`), the intensity of each row (g CO2eq/kWh; ``None``: the footprint's
    one grid intensity), the PUE and the notes."""
    from llmco2.analytic.arrow_arrays import arrow_array

    n = len(fp.prefill_j)
    if intensities is None:
        intensity = repeated(float(fp.assumptions["grid"]["g_co2eq_per_kwh"]), n)
    else:
        intensity = arrow_array(np.asarray(intensities, dtype=np.float64))
    pue = repeated(float(fp.assumptions["pue"]["value"]), n)
    return [regions, intensity, pue, notes_array(fp, table)]


def row_grid(source: Any, batch: Any, first_line: int, assume: dict[str, Any]) -> tuple[NDArray[np.float64] | None, Any]:
    """``(intensity of each row (g CO2eq/kWh) or None, grid_region array)`` of one chunk (an Arrow
    record batch of a request file's cells, its first row on line ``first_line``) charged by
    ``source``: the file's hourly intensities (``RequestHours``), its rows' regions (``RowRegions``,
    ``ChunkRegions``) or ``None`` (the run's one grid, ``assume["grid"]``)."""
    intensities = None if source is None else source.intensities(batch, first_line)
    n = batch.num_rows
    if intensities is None:
        return None, region_array(None, n, None, assume["grid"].get("region"))
    names = batch.schema.names
    cells = batch.column(names.index(REGION_COLUMN)) if REGION_COLUMN in names else None
    from llmco2.carbon.hourly import HourlyIntensity

    hourly = getattr(source, "intensity", None)  # RequestHours: the intensity file's hours
    fallback = hourly_fallback(hourly.regions) if isinstance(hourly, HourlyIntensity) else annual_fallback()
    return intensities, region_array(cells, n, source.default_region, fallback)
