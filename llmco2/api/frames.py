"""A table of requests: :func:`predict_frame` reads the columns of ``llmco2 predict --requests``
from a pandas DataFrame or a pyarrow Table and adds the columns that command writes, with the
same torch-free model and the same chunks.

Units: energy in J, latency in s, carbon in g CO2eq.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llmco2.analytic.request_parsing import RowDefaults
from llmco2.api.options import Assumptions, RequestOptions, with_fields
from llmco2.api.single import hourly_of
from llmco2.errors import InvalidInputError

if TYPE_CHECKING:
    from llmco2.carbon.hourly import HourlyIntensity

log = logging.getLogger(__name__)


def predict_frame(frame: Any, *, options: RequestOptions | None = None, assumptions: Assumptions | None = None,
                  **fields: Any) -> Any:
    """Predict every row of a request table and return it with the prediction columns added.

    ``frame``: a pandas DataFrame or pyarrow Table with the columns of ``llmco2 predict
    --requests`` (``model, gpu, batch_size, prompt_tokens, generated_tokens`` [, ``num_gpus,
    tensor_parallel, dtype, flash_attention, engine, region``], and ``timestamp`` [, ``region``] with
    ``intensity``). A ``region`` column charges each row at its own region's annual intensity (an
    empty cell: ``region``). The result has the same type, the input columns (a column named like a
    prediction column is replaced) and ``prefill_j, decode_j, total_j`` (J), their interval ends,
    ``server_j`` (J), ``latency_s`` (s), ``operational_g, embodied_g, total_g`` (g CO2eq),
    ``extrapolated``, then the assumptions each row used, ``grid_region``, ``intensity_g_per_kwh``
    (g CO2eq/kWh) and ``pue``, and its ``notes`` (:mod:`llmco2.api.output_columns`): the columns
    ``predict --requests`` writes for the same rows. An input column named like one of the last
    four is refused unless the table is an earlier output (it holds every prediction column). ``options``
    (:class:`~llmco2.api.options.RequestOptions`: ``engine``, ``dtype``, ``flash_attention``, ...)
    apply to rows without those columns; ``assumptions``
    (:class:`~llmco2.api.options.Assumptions`) say how energy becomes carbon; any field of either
    record may also be given by name (``region="DE"``). Errors name rows by their line in a CSV of
    the table (the header is line 1).
    """
    import pyarrow as pa

    from llmco2.analytic.request_files import CHUNK_ROWS
    from llmco2.api.chunks import OUTPUT_COLUMNS, PREDICTION_COLUMNS, prediction_arrays
    from llmco2.api.output_columns import assumption_arrays, check_added_columns
    from llmco2.carbon.assumptions import resolve_assumptions
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.prediction.loading import load_predictor
    from llmco2.specs import get_engine

    opts, assumed = with_fields(options, assumptions, fields)
    region, carbon_intensity, checkpoint = assumed.region, assumed.carbon_intensity, opts.checkpoint
    table, to_pandas = _as_table(frame)
    added = OUTPUT_COLUMNS if check_added_columns("frame", table.column_names, PREDICTION_COLUMNS, "frame") else PREDICTION_COLUMNS
    hourly = hourly_of(assumed.intensity, None, carbon_intensity)
    defaults = replace(opts.row_defaults(), engine=get_engine(opts.engine).id)
    requests = _parse(table, defaults, hourly is not None)
    assume = resolve_assumptions(_distinct_gpus(requests), **assumed.annual(), engine=defaults.engine)
    g = _frame_intensities(table, hourly, region) if hourly is not None else None
    if g is None and carbon_intensity is None and "region" in table.column_names:  # each row at its own region
        from llmco2.carbon.region_rows import row_intensities

        g = row_intensities(table.column("region").to_pylist(), region)
    regions = _grid_regions(table, hourly, region, assume) if g is not None else None
    predictor = load_predictor(checkpoint)
    parts: list[list[Any]] = []
    for lo in range(0, len(requests), CHUNK_ROWS):
        part = requests.take(slice(lo, lo + CHUNK_ROWS))
        fp = predict_footprint(part, predictor, assumptions=assume, chunk=max(len(part), 1))
        rows = None if g is None else g[lo:lo + CHUNK_ROWS]
        if rows is not None:
            from llmco2.carbon.footprint import with_hourly_carbon

            fp = with_hourly_carbon(fp, rows)
        part_regions = regions.slice(lo, len(part)) if regions is not None else _grid_regions(None, None, None, assume, len(part))
        parts.append([*prediction_arrays(fp), *assumption_arrays(fp, part, rows, part_regions)])
    keep = [n for n in table.column_names if n not in added]
    columns = [table.column(n) for n in keep] + [pa.chunked_array([p[i] for p in parts]) for i in range(len(OUTPUT_COLUMNS))]
    out = pa.Table.from_arrays(columns, names=[*keep, *OUTPUT_COLUMNS])
    if not to_pandas:
        return out
    result = frame.drop(columns=[c for c in frame.columns if c in added]).copy()
    for name in OUTPUT_COLUMNS:
        result[name] = out.column(name).to_numpy(zero_copy_only=False)
    return result


def _grid_regions(table: Any, hourly: HourlyIntensity | None, region: str | None, assume: dict[str, Any],
                  n: int | None = None) -> Any:
    """The ``grid_region`` Arrow array of the rows of ``table`` (charged by ``hourly`` or, without
    it, by their region column); without a table, ``n`` rows of the run's one grid region."""
    from llmco2.api.output_columns import annual_fallback, hourly_fallback, region_array

    if table is None:
        return region_array(None, n or 0, None, assume["grid"].get("region"))
    cells = table.column("region") if "region" in table.column_names else None
    fallback = hourly_fallback(hourly.regions) if hourly is not None else annual_fallback()
    return region_array(cells, table.num_rows, region, fallback)


def _as_table(frame: Any) -> tuple[Any, bool]:
    """``(pyarrow Table of frame, whether frame is a pandas DataFrame)``."""
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame, False
    import pandas as pd

    if isinstance(frame, pd.DataFrame):
        if len(set(map(str, frame.columns))) != len(frame.columns):
            raise InvalidInputError("a column appears more than once; keep one", field="frame")
        try:
            return pa.Table.from_pandas(frame, preserve_index=False), True
        except (pa.ArrowException, OverflowError):  # a column Arrow cannot type: read its cells as text
            names = [str(n) for n in frame.columns]
            return pa.Table.from_arrays([_column(frame.iloc[:, i], n) for i, n in enumerate(names)], names=names), True
    raise InvalidInputError(f"must be a pandas DataFrame or a pyarrow Table, got {type(frame).__name__}", field="frame")


def _column(series: Any, name: str) -> Any:
    """The Arrow array of a DataFrame column; a column of mixed types (``'x'`` among integers) as
    the text of its cells, so that the row reader names a bad cell as it does in a request file."""
    import pyarrow as pa

    try:
        return pa.array(series, from_pandas=True)
    except (pa.ArrowException, OverflowError):
        return _text_cells(series.tolist(), name)


def _text_cells(values: list[Any], name: str) -> Any:
    """Text of each cell of column ``name`` as Arrow writes it (``64``, ``1.5``, ``true``; missing:
    null); a cell that is neither a real number nor text (bytes, a complex number, a list, any other
    object) is refused with its line in a CSV of the table."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    texts: list[str | None] = []
    floats: list[int] = []
    for line, v in enumerate(values, start=2):
        if isinstance(v, str):
            texts.append(v)
        elif isinstance(v, (bool, np.bool_)):
            texts.append("true" if v else "false")
        elif isinstance(v, numbers.Integral):
            texts.append(str(int(v)))
        elif isinstance(v, numbers.Real):
            floats.append(len(texts))
            texts.append(None)
        elif v is None or v is pd.NA or v is pd.NaT:
            texts.append(None)
        else:
            shown = repr(v)[:40].replace("\n", " ")
            raise InvalidInputError(f"frame, line {line}: {shown} is of type {type(v).__name__}; a cell must be a number "
                                    "or text", field=name)
    as_text = pc.cast(pa.array([float(values[i]) for i in floats], pa.float64(), from_pandas=True), pa.string()).to_pylist()
    for i, text in zip(floats, as_text, strict=True):
        texts[i] = text
    return pa.array(texts, pa.string())


def _parse(table: Any, defaults: RowDefaults, hourly: bool) -> Any:
    """The validated :class:`~llmco2.analytic.table.RequestTable` of an Arrow table (cells as
    text, as ``predict --requests`` reads them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from llmco2.analytic.request_files import check_header
    from llmco2.analytic.request_parsing import ARCH_COLUMNS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, Resolver, parse_chunk

    read_columns = {*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *ARCH_COLUMNS}  # counts and ids the requests are parsed from

    header = [str(n).strip() for n in table.column_names]
    check_header(Path("frame"), header)
    if hourly and "timestamp" not in header:
        raise InvalidInputError("frame has no timestamp column; an hourly intensity needs each request's time "
                                "(ISO 8601, UTC) in a timestamp column", field="intensity")
    if not table.num_rows:
        raise InvalidInputError("frame has a header but no requests", field="requests")
    cols = []
    for name, c in zip(header, table.columns, strict=True):
        if name in read_columns and (pa.types.is_duration(c.type) or pa.types.is_temporal(c.type)):
            raise InvalidInputError(f"frame's column holds {c.type} (a time or a duration); its cells must be numbers or "
                                    "text", field=name)
        try:
            text = c if pa.types.is_string(c.type) else pc.cast(c, pa.string())
        except (pa.ArrowException, OverflowError):  # a list, a struct or bytes that are not UTF-8
            raise InvalidInputError(f"frame's column holds {c.type}; its cells must be numbers or text", field=name) from None
        cols.append(pc.fill_null(text.combine_chunks(), pa.scalar("", pa.string())))
    batch = pa.RecordBatch.from_arrays(cols, names=header)
    lines = 2 + np.arange(table.num_rows, dtype=np.int64)
    try:
        return parse_chunk(header, batch, lines, Resolver(defaults), not defaults.ignore_context)
    except InvalidInputError as exc:
        raise InvalidInputError(f"frame, {exc}", field=None) from None


def _distinct_gpus(requests: Any) -> list[Any]:
    return list({g.id: g for g in requests.gpus}.values())


def _frame_intensities(table: Any, hourly: HourlyIntensity, region: str | None) -> Any:
    from llmco2.carbon.hourly import intensity_for

    regions = table.column("region").to_pylist() if "region" in table.column_names else None
    lines = 2 + np.arange(table.num_rows, dtype=np.int64)
    return intensity_for(hourly, table.column("timestamp"), regions, region, lines, "frame")

