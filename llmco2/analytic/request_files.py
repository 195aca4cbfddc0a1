"""Read request files (CSV, gzip-compressed CSV or Parquet, through Arrow) in chunks of rows.

Each chunk is parsed as columns (:mod:`llmco2.analytic.request_parsing`). Memory stays bounded by
the chunk size whatever the length of the file. Errors name the file and the line (the header is
line 1).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llmco2.analytic.arrow_arrays import string_scalar
from llmco2.analytic.compressed import open_binary
from llmco2.analytic.csv_text import count_records, csv_batches, csv_header, with_physical_line
from llmco2.analytic.request_parsing import (
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    Reject,
    Resolver,
    RowDefaults,
    good_rows,
    parse_chunk,
)
from llmco2.analytic.table import RequestTable
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_input_file
from llmco2.specs.limits import MAX_REQUEST_COLUMNS

log = logging.getLogger(__name__)

#: Rows parsed and predicted together.
CHUNK_ROWS = 16_384


@dataclass
class RequestChunk:
    """Consecutive rows of a request file.

    Attributes:
        header: column names of the file.
        batch: the rows' cells as an Arrow record batch of strings.
        table: the parsed requests.
        first_line: file line of the first row (the header is line 1).
        native: the rows as the file types them (Parquet: integers, timestamps, ...; ``None`` for a
            CSV, whose cells are text): what is written back beside the predictions.
    """

    header: list[str]
    batch: pa.RecordBatch
    table: RequestTable
    first_line: int
    native: pa.RecordBatch | None = None

    @property
    def written(self) -> pa.RecordBatch:
        """The input columns as they are written back: the file's own types."""
        return self.native if self.native is not None else self.batch


def _parquet_batches(path: Path, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    try:
        import pyarrow.parquet as pq  # only for Parquet files (some 25 ms to import)

        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidInputError(f"{path} is not a Parquet file ({exc})", field="requests") from None
    yield from pf.iter_batches(batch_size=chunk_rows)


def _parquet_as_text(batch: pa.RecordBatch, path: Path, line: int) -> pa.RecordBatch:
    """A typed Parquet batch whose first row is on ``line`` (the lines a CSV of the same rows
    would have) as strings."""
    cols = [_parquet_text(c, name, path, line) for c, name in zip(batch.columns, batch.schema.names, strict=True)]
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


def _parquet_text(column: pa.Array, name: str, path: Path, line: int) -> pa.Array:
    """A Parquet column as strings (nulls empty); bytes that are not UTF-8 or a nested type are an error."""
    try:
        return pc.fill_null(pc.cast(column, pa.string()), string_scalar(""))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        for i, v in enumerate(column.to_pylist()):
            try:
                v is None or v.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInputError(f"{path}, line {line + i}: {name}: not UTF-8 text; write the column as UTF-8 "
                                        "strings", field="requests") from None
    raise InvalidInputError(f"{path}: column {name} of type {column.type} cannot be read as text; write it as strings "
                            "or numbers", field="requests")


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One record batch of the rows of ``batches`` (same schema)."""
    if len(batches) == 1:
        return batches[0]
    if hasattr(pa, "concat_batches"):  # pyarrow >= 19
        return pa.concat_batches(batches)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _rebatch(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` in batches of exactly ``rows`` rows, the last one shorter (the
    reader's batches follow its block size, so a short batch would otherwise be a chunk of its
    own). At most ``rows`` rows plus one reader batch are held."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        held += batch.num_rows
        if held < rows:
            continue
        merged = _concat(pending)
        lo = 0
        while held - lo >= rows:
            yield merged.slice(lo, rows)
            lo += rows
        pending = [merged.slice(lo)] if held > lo else []
        held -= lo
    if held:
        yield _concat(pending)


def check_header(path: Path, header: list[str]) -> None:
    """The columns of a request file: at most :data:`~llmco2.specs.limits.MAX_REQUEST_COLUMNS`,
    every required one, none twice (linear in the number of columns)."""
    if len(header) > MAX_REQUEST_COLUMNS:
        raise InvalidInputError(f"{path} has {len(header):,} columns, more than the {MAX_REQUEST_COLUMNS:,} a request "
                                "file may have; keep the request columns and those you want back beside the predictions",
                                field="requests")
    names = set(header)
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if len(missing) == len(REQUIRED_COLUMNS):
        shown = ", ".join(repr(h[:20]) for h in header[:6]) + (f" and {len(header) - 6} more" if len(header) > 6 else "")
        raise InvalidInputError(f"{path} does not look like a request file (expected columns {', '.join(REQUIRED_COLUMNS)}"
                                f"[, {', '.join(OPTIONAL_COLUMNS)}]; its header has {shown or 'nothing'})", field="requests")
    if missing:
        raise InvalidInputError(f"{path}: missing columns {', '.join(missing)} (need {', '.join(REQUIRED_COLUMNS)})",
                                field="requests")
    dupes = sorted(h for h, n in Counter(header).items() if n > 1) if len(names) < len(header) else []
    if dupes:
        raise InvalidInputError(f"{path}: column {', '.join(dupes)} appears more than once; keep one", field="requests")


def is_parquet(path: Path) -> bool:
    """Whether a request file is read as Parquet (by its suffix; anything else is CSV, gzip-compressed
    or not)."""
    return path.suffix.lower() in (".parquet", ".pq")


def request_header(path: Path) -> list[str]:
    """The checked header of a request file (:func:`check_header`), which must be a readable file."""
    check_input_file(path, "requests")
    if path.suffix.lower() == ".gz" and Path(path.stem).suffix.lower() in (".parquet", ".pq"):
        raise InvalidInputError(f"{path}: a gzip-compressed Parquet file is not read (Parquet compresses its own "
                                "columns); decompress it with gunzip and give the .parquet file", field="requests")
    if is_parquet(path):
        try:
            import pyarrow.parquet as pq

            header = list(pq.ParquetFile(path).schema_arrow.names)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidInputError(f"{path} is not a Parquet file ({exc})", field="requests") from None
    else:
        header = csv_header(path)
    check_header(path, header)
    return header


def request_rows(path: Path, header: list[str]) -> int:
    """Rows of a request file with this header: exact (Parquet: its metadata; CSV: read by Arrow,
    first column only, which also refuses a malformed file with its line)."""
    if is_parquet(path):
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    return count_records(path, header)


def iter_request_chunks(path: Path, defaults: RowDefaults | None = None, chunk_rows: int | None = None,
                        rows: tuple[int, int | None] = (0, None),
                        rejects: list[Reject] | None = None) -> Iterator[RequestChunk]:
    """Parsed, validated chunks of a request file (``.parquet``/``.pq``: Parquet; else CSV) of at
    most ``chunk_rows`` rows (default :data:`CHUNK_ROWS`), aligned with the start of the file.

    ``rows``: ``(start, stop)``, the rows wanted (0-based; ``stop`` None: to the end of the file);
    ``start`` is a multiple of ``chunk_rows``. The rows before are read but not parsed, so the
    chunks are those of the whole file (the same arithmetic on the same rows).

    ``rejects``: when given, a row that fails its checks is left out of its chunk and appended
    here (its line and the reason) instead of stopping the file; a chunk may then hold fewer rows."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    start, stop = rows
    if start % chunk_rows:
        raise ValueError(f"rows start at {start}, not a multiple of the chunk size {chunk_rows}")
    header = request_header(path)
    parquet = is_parquet(path)
    resolver = Resolver(defaults)
    check_context = not (defaults or RowDefaults()).ignore_context
    line = 2
    for batch in _rebatch(_parquet_batches(path, chunk_rows) if parquet else csv_batches(path, header), chunk_rows):
        if stop is not None and line - 2 >= stop:
            return
        if line - 2 < start:
            line += batch.num_rows
            continue
        if stop is not None and line - 2 + batch.num_rows > stop:
            batch = batch.slice(0, stop - (line - 2))
        native = None
        if parquet:
            native, batch = batch, _parquet_as_text(batch, path, line)
        lines = line + np.arange(batch.num_rows, dtype=np.int64)
        try:
            table = parse_chunk(header, batch, lines, resolver, check_context)
        except InvalidInputError as exc:
            if rejects is None:
                message = str(exc) if parquet else with_physical_line(path, str(exc))
                raise InvalidInputError(f"{path}, {message}", field="requests") from None
            good = good_rows(header, batch, lines, resolver, check_context, rejects)
            if not len(good):
                line += batch.num_rows
                continue
            take = pa.array(good)
            batch, native = batch.take(take), native.take(take) if native is not None else None
            table = parse_chunk(header, batch, lines[good], resolver, check_context)
        yield RequestChunk(header, batch, table, line, native)
        line += len(lines)
    if line == 2 and not start:
        raise InvalidInputError(f"{path} has a header but no requests", field="requests")


def count_rows(path: Path) -> int | None:
    """Rows of a request file, for a progress bar (CSV: newlines less the header; None if unknown)."""
    if is_parquet(path):
        try:
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # noqa: BLE001 - only a progress total
            return None
    lines = 0
    try:
        with open_binary(path) as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                lines += block.count(b"\n")
    except (InvalidInputError, OSError):  # a gzip file that does not decompress: reported by the reader
        return None
    return max(lines - 1, 0)
