"""What a run over request files shares, whether one process or a cluster's workers run it: the
prediction columns and the batch written for a chunk, the GPUs of a file, a progress bar, and the
allocator and garbage-collector settings of a long prediction.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from llmco2.api.output_columns import ASSUMPTION_COLUMNS, assumption_arrays, check_added_columns, row_grid
from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)


#: Columns added to the input columns (an input column of the same name is replaced). Energy columns
#: ``*_j`` are the GPUs' energy (J); ``server_j`` is the server's wall energy (J: GPUs + host share +
#: power-supply losses); the carbon columns (g CO2eq) are on the run's scope (``--scope``).
PREDICTION_COLUMNS = ("prefill_j", "decode_j", "total_j", "total_j_low", "total_j_high", "prefill_j_low", "prefill_j_high",
                      "decode_j_low", "decode_j_high", "server_j", "latency_s", "operational_g", "embodied_g", "total_g",
                      "extrapolated")
#: Every column a prediction adds, in order: :data:`PREDICTION_COLUMNS`, then the assumptions each row
#: used and its notes (:data:`llmco2.api.output_columns.ASSUMPTION_COLUMNS`).
OUTPUT_COLUMNS = (*PREDICTION_COLUMNS, *ASSUMPTION_COLUMNS)


def prediction_arrays(fp: Any) -> list[Any]:
    """The :data:`PREDICTION_COLUMNS` of a footprint as Arrow arrays (an unknown embodied carbon, or a
    server energy of a footprint without a scope: null)."""
    from llmco2.analytic.arrow_arrays import arrow_array

    low, high = fp.energy_low_j, fp.energy_high_j
    server = fp.server.total_j if fp.server is not None else np.full(len(fp.prefill_j), np.nan)
    cols = [fp.prefill_j, fp.decode_j, fp.total_j, fp.total_low_j, fp.total_high_j, low[:, 0], high[:, 0], low[:, 1],
            high[:, 1], server, fp.latency_s, fp.operational_g, fp.embodied_g, fp.total_g]
    out = []
    for c in cols:
        values = np.ascontiguousarray(c, dtype=np.float64)
        out.append(arrow_array(values, ~np.isnan(values)))
    out.append(arrow_array(np.asarray(fp.extrapolated, dtype=bool)))
    return out


#: Totals kept with each committed chunk, as integers (they are summed across resumed runs):
#: GPU energy and its interval ends and server energy in millijoules, carbon in micrograms CO2eq, rows without an
#: embodied figure.
TOTAL_KEYS = ("energy_mj", "energy_low_mj", "energy_high_mj", "server_mj", "operational_ug", "embodied_ug",
              "embodied_unknown")


def batch_totals(fp: Any) -> dict[str, int]:
    """The :data:`TOTAL_KEYS` of one chunk's footprint."""
    embodied = np.asarray(fp.embodied_g, dtype=np.float64)
    return {"energy_mj": int(round(float(np.sum(fp.total_j)) * 1e3)),
            "energy_low_mj": int(round(float(np.sum(fp.total_low_j)) * 1e3)),
            "energy_high_mj": int(round(float(np.sum(fp.total_high_j)) * 1e3)),
            "server_mj": int(round(float(np.sum(fp.server.total_j)) * 1e3)) if fp.server is not None else 0,
            "operational_ug": int(round(float(np.sum(fp.operational_g)) * 1e6)),
            "embodied_ug": int(round(float(np.nansum(embodied)) * 1e6)),
            "embodied_unknown": int(np.count_nonzero(np.isnan(embodied)))}


def totals_record(counts: dict[str, int], rows: int, scope: str | None = None) -> dict[str, Any]:
    """The totals of a batch run in user units: rows, GPU kWh (with the sum of the 10-90% interval
    ends, a conservative range for the total), server kWh, and kg CO2eq on ``scope`` (named as
    ``scope``; the server kWh only when the run had one)."""
    from llmco2.carbon.accounting import J_PER_KWH

    kwh = 1e-3 / J_PER_KWH  # per millijoule
    op, emb = counts.get("operational_ug", 0) * 1e-9, counts.get("embodied_ug", 0) * 1e-9
    return {"rows": rows, "energy_kwh": counts.get("energy_mj", 0) * kwh,
            "energy_kwh_interval": [counts.get("energy_low_mj", 0) * kwh, counts.get("energy_high_mj", 0) * kwh],
            **({"server_energy_kwh": counts.get("server_mj", 0) * kwh, "scope": scope} if scope is not None else {}),
            "operational_kg_co2eq": op, "embodied_kg_co2eq": emb, "total_kg_co2eq": op + emb,
            "rows_without_embodied": counts.get("embodied_unknown", 0)}


def totals_line(t: dict[str, Any]) -> str:
    """One line of a batch run's totals."""
    lo, hi = t["energy_kwh_interval"]
    unknown = f" ({t['rows_without_embodied']:,} rows without an embodied figure)" if t["rows_without_embodied"] else ""
    if t.get("scope") is None:
        return (f"totals: {t['rows']:,} requests, {t['energy_kwh']:.6g} kWh (sum of the 10-90% ends: {lo:.6g}-{hi:.6g}), "
                f"{t['total_kg_co2eq']:.6g} kg CO2eq = {t['operational_kg_co2eq']:.6g} operational + "
                f"{t['embodied_kg_co2eq']:.6g} embodied{unknown}")
    return (f"totals: {t['rows']:,} requests, GPU {t['energy_kwh']:.6g} kWh (sum of the 10-90% ends: {lo:.6g}-{hi:.6g}), "
            f"server {t['server_energy_kwh']:.6g} kWh; {t['scope']} scope: "
            f"{t['total_kg_co2eq']:.6g} kg CO2eq = {t['operational_kg_co2eq']:.6g} operational + "
            f"{t['embodied_kg_co2eq']:.6g} embodied{unknown}")


def kept_columns(src: Path, header: list[str]) -> list[int]:
    """Indices of the input columns written back: all but old prediction columns, which are
    replaced (one warning names them). A column named like an assumption column
    (:data:`~llmco2.api.output_columns.ASSUMPTION_COLUMNS`) is replaced only in an earlier output
    (which holds every prediction column), else refused (:func:`~llmco2.api.output_columns.check_added_columns`)."""
    added = OUTPUT_COLUMNS if check_added_columns(str(src), header, PREDICTION_COLUMNS) else PREDICTION_COLUMNS
    return replaced_columns(src, header, added, "prediction columns", "the new predictions")


def replaced_columns(src: Path, header: list[str], added: Sequence[str], what: str, by: str) -> list[int]:
    """Indices of the input columns of ``src`` written back, every one with its own type, before the
    columns a command adds (``added``): all but those named like an added one (an earlier output's,
    ``what``), which are replaced (one warning names them, replaced ``by``)."""
    names = set(added)
    keep = [i for i, name in enumerate(header) if name not in names]
    if len(keep) < len(header):
        log.warning("%s already has %s (%s); they are replaced by %s", src, what, ", ".join(h for h in header if h in names), by)
    return keep


def prediction_batch(chunk: Any, keep: list[int], predictor: Any, assume: dict[str, Any], hourly: Any = None) -> tuple[Any, Any]:
    """``(record batch, footprint)`` of one chunk of a request file: the ``keep`` input columns
    followed by :data:`OUTPUT_COLUMNS` (energy J, latency s, carbon g CO2eq, then each row's grid
    region, intensity (g CO2eq/kWh), PUE and notes); ``hourly``: the per-row grid of the file's
    requests (``RequestHours``: each row's hour; ``RowRegions``/``ChunkRegions``: each row's region;
    anything with ``intensities(batch, first_line)`` and ``default_region``)."""
    import pyarrow as pa

    from llmco2.carbon.footprint import predict_footprint, with_hourly_carbon

    # the whole chunk at once: the model steps through it (PIPELINE_ROWS), pipelining its network
    fp = predict_footprint(chunk.table, predictor, assumptions=assume, chunk=max(len(chunk.table), 1))
    intensities, regions = row_grid(hourly, chunk.batch, chunk.first_line, assume)
    if intensities is not None:
        fp = with_hourly_carbon(fp, intensities)
    names = [chunk.header[i] for i in keep]
    inputs = [chunk.written.column(i) for i in keep]  # the file's own column types
    added = [*prediction_arrays(fp), *assumption_arrays(fp, chunk.table, intensities, regions)]
    return pa.RecordBatch.from_arrays([*inputs, *added], names=[*names, *OUTPUT_COLUMNS]), fp


def file_gpus(path: Path) -> list[Any]:
    """The distinct GPUs of a request file (one Arrow pass over its ``gpu`` column)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from llmco2.analytic.compressed import arrow_input
    from llmco2.specs import get_gpu

    names: set[str] = set()
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            column = pq.read_table(path, columns=["gpu"]).column("gpu")
        else:
            with arrow_input(path) as source:
                column = pa_csv.read_csv(source, convert_options=pa_csv.ConvertOptions(
                    include_columns=["gpu"], column_types={"gpu": pa.string()})).column("gpu")
        names = {str(v) for v in column.unique().to_pylist() if v is not None}
    except (pa.ArrowInvalid, KeyError, OSError):
        pass  # a malformed (or damaged gzip) file is reported, with its line, when its chunk is read
    gpus = {}
    for name in names:
        try:
            gpus[name.strip()] = get_gpu(name.strip())
        except InvalidInputError:
            continue  # reported with its line when its chunk is read
    return list({g.id: g for g in gpus.values()}.values())


@contextmanager
def progress_bar(total: int | None) -> Iterator[Callable[[int], None]]:
    """A function advancing a progress bar on the terminal, shown for files of 50,000 rows or
    more (rich is imported only then), else a no-op."""
    if total is None or total < 50_000:
        yield lambda done: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("predicting"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task("predict", total=total)
        yield lambda done: bar.advance(task, done)


@contextmanager
def rare_collections() -> Iterator[None]:
    """Cyclic garbage collection made rare while predicting: the objects alive so far (modules,
    catalogs, the model) are frozen out of it, and the youngest generation is collected every
    50,000 allocations instead of 700. Prediction creates few reference cycles (its objects are
    freed by reference counting), and each collection costs a scan of every young object."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], 50_000), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


#: glibc ``mallopt`` parameters (``malloc.h``).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: While predicting, blocks up to this size come from the heap and freed memory is kept for reuse.
_HELD_BYTES = 256 * 1024 * 1024
#: Afterwards: the largest thresholds glibc's own adjustment reaches on 64-bit (mmap 32 MiB, trim
#: twice that); setting a threshold turns that adjustment off for the rest of the process.
_AFTER_MMAP_BYTES, _AFTER_TRIM_BYTES = 32 * 1024 * 1024, 64 * 1024 * 1024


@contextmanager
def reused_memory() -> Iterator[None]:
    """Freed memory kept by the allocator while predicting (glibc only; elsewhere a no-op).

    Every step allocates and frees arrays of some megabytes. By default glibc maps large blocks
    afresh and returns freed memory at the top of the heap to the kernel, so each step pays the
    kernel again to fault in and zero the same memory (on a 20,000-row file some 10,000 page
    faults, 0.05-0.1 s of system time). Peak memory is unchanged. Afterwards the thresholds are set
    to the values glibc's dynamic adjustment converges to and the heap is trimmed."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, the C library's among them
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        yield
        return
    held = bool(mallopt(_M_MMAP_THRESHOLD, _HELD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _HELD_BYTES))
    try:
        yield
    finally:
        if held:
            mallopt(_M_MMAP_THRESHOLD, _AFTER_MMAP_BYTES)
            mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM_BYTES)
            trim(0)
