"""``llmco2 predict --requests FILE --out FILE.csv``: many requests, streamed in chunks.

The file (CSV or Parquet; the output is Parquet when ``--out`` ends in ``.parquet``) is read,
predicted and written one chunk at a time (:data:`CHUNK_ROWS` rows), so memory
does not grow with the file. The output goes to a temporary file in the destination folder and
is renamed when every row is written: an interrupted run leaves no partial output.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from llmco2.errors import InvalidInputError

#: Columns added to the input columns.
PREDICTION_COLUMNS = ("prefill_j", "decode_j", "total_j", "total_j_low", "total_j_high", "prefill_j_low", "prefill_j_high",
                      "decode_j_low", "decode_j_high", "latency_s", "operational_g", "embodied_g", "total_g",
                      "extrapolated")


def prediction_arrays(fp: Any) -> list[Any]:
    """The :data:`PREDICTION_COLUMNS` of a footprint as Arrow arrays (an unknown embodied carbon: null)."""
    import pyarrow as pa

    low, high = fp.energy_low_j, fp.energy_high_j
    cols = [fp.prefill_j, fp.decode_j, fp.total_j, fp.total_low_j, fp.total_high_j, low[:, 0], high[:, 0], low[:, 1],
            high[:, 1], fp.latency_s, fp.operational_g, fp.embodied_g, fp.total_g]
    out = []
    for c in cols:
        values = np.ascontiguousarray(c, dtype=np.float64)
        nan = np.isnan(values)
        out.append(pa.array(values, mask=nan) if nan.any() else pa.array(values))
    out.append(pa.array(np.asarray(fp.extrapolated, dtype=bool)))
    return out


def _needs_quotes(columns: list[Any]) -> bool:
    """Whether any string cell holds a delimiter, quote or line break."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return any(bool(pc.any(pc.match_substring_regex(c, r'[,"\r\n]')).as_py()) for c in columns
               if pa.types.is_string(c.type) and len(c))


def _file_gpus(path: Path) -> list[Any]:
    """The distinct GPUs of a request file (one pass over its ``gpu`` column)."""
    from llmco2.specs import get_gpu

    names: set[str] = set()
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        names = {str(v) for v in pq.read_table(path, columns=["gpu"]).column("gpu").to_pylist()}
    else:
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            if "gpu" in header:
                j = header.index("gpu")
                names = {row[j] for row in reader if len(row) > j}
    gpus = {}
    for name in names:
        try:
            gpus[name.strip()] = get_gpu(name.strip())
        except InvalidInputError:
            continue  # reported with its line when its chunk is read
    return list({g.id: g for g in gpus.values()}.values())


def predict_file(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """Predict every request of ``args.requests`` into ``args.out``; summary line on stderr."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from llmco2.analytic.request_files import count_rows, iter_request_chunks
    from llmco2.carbon.footprint import predict_footprint, resolve_assumptions
    from llmco2.models.predict import load_predictor
    from llmco2.specs import get_engine

    if not args.out:
        raise InvalidInputError("--requests needs --out FILE.csv for the predictions", field="--out")
    out = Path(args.out)
    if not out.parent.exists():
        raise InvalidInputError(f"folder {str(out.parent)!r} does not exist", field="--out")
    src = Path(args.requests)
    if not src.is_file():
        raise InvalidInputError(f"no such file {str(src)!r}", field="--requests")
    engine = get_engine(args.engine).id
    start = time.perf_counter()
    predictor = load_predictor(args.checkpoint)
    chunks = iter_request_chunks(src, defaults=args)
    first = next(chunks)  # header and first rows checked before anything is written
    gpus = first.table.gpus if len(first.table) < first_chunk_limit() else _file_gpus(src)
    assume = resolve_assumptions(gpus, **options, engine=engine)
    total = count_rows(src) if sys.stderr.isatty() else None
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    parquet_out = out.suffix.lower() in (".parquet", ".pq")
    n = 0
    extrapolated = 0
    try:
        with os.fdopen(fd, "wb") as fh, Progress(
                TextColumn("predicting"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                disable=total is None or total < 50_000, transient=True) as bar:
            task = bar.add_task("predict", total=total)
            writer = None
            chunk: Any = first
            while chunk is not None:
                fp = predict_footprint(chunk.table, predictor, assumptions=assume)
                batch = pa.RecordBatch.from_arrays([*chunk.batch.columns, *prediction_arrays(fp)],
                                                   names=[*chunk.header, *PREDICTION_COLUMNS])
                if parquet_out:
                    writer = writer or pq.ParquetWriter(fh, batch.schema)
                    writer.write_batch(batch)
                else:
                    quoting = "needed" if _needs_quotes(list(chunk.batch.columns)) else "none"
                    header_quoting = "needed" if n == 0 and _needs_quotes([pa.array(chunk.header)]) else "none"
                    pa_csv.write_csv(batch, fh, pa_csv.WriteOptions(include_header=n == 0, quoting_style=quoting,
                                                                    quoting_header=header_quoting))
                n += len(chunk.table)
                extrapolated += int(np.count_nonzero(fp.extrapolated))
                bar.advance(task, len(chunk.table))
                chunk = next(chunks, None)
            if writer is not None:
                writer.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the output gets the usual permissions
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    seconds = time.perf_counter() - start
    g = assume["grid"]
    sys.stderr.write(f"predicted {n:,} requests in {seconds:.2f} s ({n / seconds:,.0f}/s) -> {out}; engine {engine} "
                     f"(rows without an engine column), grid {g['g_co2eq_per_kwh']:g} g/kWh ({g['region'] or 'user value'}), "
                     f"PUE {assume['pue']['value']:g}; {extrapolated:,} extrapolated\n")
    return 0


def first_chunk_limit() -> int:
    """A first chunk shorter than this is the whole file (its GPUs are all the file's GPUs)."""
    from llmco2.analytic.request_files import CHUNK_ROWS

    return CHUNK_ROWS

