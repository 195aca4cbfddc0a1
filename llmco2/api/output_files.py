"""The files a batch run writes: each chunk appended to the partial output (CSV text, or Arrow IPC
for a Parquet output), the finished output converted by its suffix, and the rows left out and the
totals written beside it, atomically."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from llmco2.analytic.request_parsing import Reject

#: Output suffixes of a request file's predictions (before a ``.gz``): CSV text or Parquet.
OUTPUT_SUFFIXES = (".csv", ".parquet", ".pq")


def chunk_writer(batch: Any, first: bool, parquet: bool) -> Callable[[IO[bytes]], None]:
    """How one chunk's Arrow record ``batch`` is appended to a partial output
    (:meth:`~llmco2.resumable_output.ResumableOutput.commit`): for a Parquet output, Arrow IPC
    messages that keep every column's type (the schema before the ``first`` chunk); else CSV (the
    header with the ``first`` chunk; cells and names quoted only where they hold a delimiter, a quote
    or a line break)."""
    import pyarrow.csv as pa_csv

    if parquet:
        def write_ipc(fh: IO[bytes]) -> None:
            if first:
                fh.write(batch.schema.serialize())
            fh.write(batch.serialize())
        return write_ipc
    quoting = "needed" if _needs_quotes(batch.columns) else "none"  # the inputs' and the notes' text
    header_quoting = "needed" if first and any(c in h for h in batch.schema.names for c in ',"\r\n') else "none"
    options = pa_csv.WriteOptions(include_header=first, quoting_style=quoting, quoting_header=header_quoting)

    def write_csv(fh: IO[bytes]) -> None:
        pa_csv.write_csv(batch, fh, options)
    return write_csv


def output_conversion(out: Path) -> Callable[[Path, IO[bytes]], None] | None:
    """What turns the committed partial file into the output ``out`` (its suffix decides): Arrow IPC
    into Parquet, CSV into gzip-compressed CSV, or nothing (CSV as written)."""
    from llmco2.analytic.compressed import gzip_copy, is_gzip_output

    if out.suffix.lower() in (".parquet", ".pq"):
        return _ipc_to_parquet
    return gzip_copy if is_gzip_output(out) else None


def _ipc_to_parquet(partial: Path, fh: Any) -> None:
    """The Parquet output of the Arrow IPC messages committed in ``partial`` (one row group per chunk)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pa.memory_map(str(partial)) as source:
        reader = pa.ipc.open_stream(source)
        writer = pq.ParquetWriter(fh, reader.schema)
        for batch in reader:
            writer.write_batch(batch)
        writer.close()


def _needs_quotes(columns: list[Any]) -> bool:
    """Whether any string cell holds a delimiter, quote or line break (a byte search in each
    column's character data, over the cells of the column only)."""
    import pyarrow as pa

    for c in columns:
        if not (pa.types.is_string(c.type) or pa.types.is_large_string(c.type)) or not len(c):
            continue
        _, offsets, data = c.buffers()
        if data is None:
            continue
        width = 8 if pa.types.is_large_string(c.type) else 4
        ends = np.frombuffer(offsets, dtype=f"<i{width}", count=len(c) + 1, offset=c.offset * width)
        text = memoryview(data)[int(ends[0]):int(ends[-1])].tobytes()
        if any(ch in text for ch in (b",", b'"', b"\r", b"\n")):
            return True
    return False


def write_rejects(out: Path, rejects: list[Reject]) -> Path:
    """Write the rows a job left out beside its output (``OUT.rejects.csv``: ``line,reason``, the
    header is line 1 of the input), atomically; returns its path."""
    import csv
    import io

    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["line", "reason"])
    writer.writerows((r.line, r.reason) for r in sorted(rejects, key=lambda r: r.line))
    return replace_text(out.with_name(out.name + ".rejects.csv"), text.getvalue())


def write_totals(out: Path, totals: dict[str, Any], assume: dict[str, Any]) -> Path:
    """Write a batch run's totals and assumptions beside its output (``OUT.totals.json``, replaced
    atomically); returns its path."""
    import json

    text = json.dumps({"output": out.name, **totals, "assumptions": assume}, indent=1, default=str)
    return replace_text(out.with_name(out.name + ".totals.json"), text)


def replace_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it and a rename (readers never see
    a partial file; permissions 0644); returns ``path``."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
