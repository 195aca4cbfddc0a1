"""CSV request files as exported by real systems: read through Arrow, checked as text.

What reads correctly: a UTF-8 byte-order mark, CRLF (or CR) line ends, quoted fields (with
delimiters, doubled quotes or line breaks inside), blank lines (skipped), and all of these
gzip-compressed (``.csv.gz``, decompressed as it is read: :mod:`llmco2.analytic.compressed`). What
is refused, with the file and the line: bytes that are not UTF-8, and rows of the wrong width (a
stray quote shows up as one); a gzip file that does not decompress, with the reason. Line numbers
are those an editor shows (the header is line 1 when the file starts with it; blank lines and line
breaks inside quoted fields count).

The fast path never looks at lines one by one in Python; the scans that find a line number run only
after Arrow has refused the file or a row has been found invalid.
"""

from __future__ import annotations

import codecs
import csv
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.csv as pa_csv

from llmco2.analytic.compressed import GZIP_ERRORS, arrow_input, compressed_error, corrupt_gzip, is_gzip, open_binary, open_text
from llmco2.errors import InvalidInputError
from llmco2.specs.limits import MAX_REQUEST_COLUMNS

log = logging.getLogger(__name__)

BOM = b"\xef\xbb\xbf"
#: The longest header line read (a "header" longer than this is not one).
MAX_HEADER_BYTES = 1 << 20
_LINE_PREFIX = re.compile(r"^line (\d+): ")
_CR_END = re.compile(r"(?<=\r)(?!\n)")


def first_bad_utf8(path: Path) -> tuple[int, int, int] | None:
    """``(line, column, byte value)`` of the first byte of ``path`` that is not UTF-8 (columns
    count bytes from 1), or None when the whole file decodes."""
    with open_binary(path) as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return number, exc.start + 1, raw[exc.start]
    return None


def not_utf8_error(path: Path) -> InvalidInputError:
    """The error for a file with bytes that are not UTF-8, naming the first one's line (or the
    compression it is in: :func:`llmco2.analytic.compressed.compressed_error`)."""
    compressed = compressed_error(path, "requests")
    if compressed is not None:
        return compressed
    bad = first_bad_utf8(path)
    where = f", line {bad[0]}" if bad else ""
    what = f"byte 0x{bad[2]:02x} at column {bad[1]} is not UTF-8 text" if bad else "not UTF-8 text"
    return InvalidInputError(f"{path}{where}: {what}; save the file as UTF-8 (CSV) or give a Parquet request file",
                             field="requests")


def _decoded_lines(path: Path, fh: IO[bytes]) -> Iterator[str]:
    """The lines of ``fh`` as text (a byte-order mark dropped), at most :data:`MAX_HEADER_BYTES` in all;
    a byte that is not UTF-8 is an error naming its line, and so is a header that goes on past
    those bytes (a line of more than a megabyte is no header)."""
    read, number = 0, 0
    while read < MAX_HEADER_BYTES and (raw := fh.readline(MAX_HEADER_BYTES - read)):
        read += len(raw)
        number += 1
        if number == 1 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        cut = read >= MAX_HEADER_BYTES and not raw.endswith((b"\n", b"\r"))  # the last line read is not whole
        try:  # a line cut inside a character keeps the whole characters before it
            line = codecs.getincrementaldecoder("utf-8")().decode(raw, final=not cut)
        except UnicodeDecodeError as exc:
            if number == 1 and (compressed := compressed_error(path, "requests")) is not None:
                raise compressed from None
            raise InvalidInputError(f"{path}, line {number}: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} "
                                    "is not UTF-8 text; save the file as UTF-8 (CSV) or give a Parquet request file",
                                    field="requests") from None
        if "\x00" in line:
            if number == 1 and (compressed := compressed_error(path, "requests")) is not None:
                raise compressed
            raise InvalidInputError(f"{path}, line {number}: not a CSV header (it holds NUL bytes)", field="requests")
        parts = [part for part in _CR_END.split(line) if part]  # lines ended by CR alone, too
        for i, part in enumerate(parts):
            if cut and i == len(parts) - 1:  # the header goes on past the bytes read
                raise InvalidInputError(f"{path}, line {number}: the header is longer than {MAX_HEADER_BYTES:,} bytes "
                                        f"({part.count(',') + 1:,} columns or more); a request file has at most "
                                        f"{MAX_REQUEST_COLUMNS:,} columns", field="requests")
            yield part


def raw_header(path: Path) -> list[str]:
    """The header cells as written (unstripped, without a byte-order mark: the names Arrow reads).
    Blank lines before it are skipped, as Arrow skips them; only the header's own lines are read
    (the CSV reader pulls more than one only for a quoted line break)."""
    with open_binary(path) as fh:
        reader = csv.reader(_decoded_lines(path, fh))
        try:
            for row in reader:
                if row:
                    return row
        except csv.Error as exc:
            raise InvalidInputError(f"{path}, line {reader.line_num}: not a CSV header ({exc})", field="requests") from None
    return []


def csv_header(path: Path) -> list[str]:
    """The header of a CSV request file (its first record, cells stripped)."""
    return [h.strip() for h in raw_header(path)]


def csv_batches(path: Path, header: list[str]) -> Iterator[pa.RecordBatch]:
    """Record batches of a CSV file, every column as strings (the cells as written), columns
    renamed to ``header``."""
    raw = raw_header(path)
    try:
        with arrow_input(path) as source:
            reader = pa_csv.open_csv(
                source, read_options=pa_csv.ReadOptions(block_size=1 << 20, use_threads=False),
                parse_options=pa_csv.ParseOptions(invalid_row_handler=None),
                convert_options=pa_csv.ConvertOptions(column_types={h: pa.string() for h in raw}, strings_can_be_null=False,
                                                      quoted_strings_can_be_null=False))
            if reader.schema.names != raw:  # Arrow read another header (a quote it parses otherwise)
                raise InvalidInputError(f"{path}, line 1: malformed CSV header (quotes that do not pair up?); write "
                                        "the column names separated by commas, quoted (\"...\") only as a whole cell",
                                        field="requests")
            for batch in reader:
                yield batch.rename_columns(header)
    except pa.ArrowInvalid as exc:
        raise _malformed(path, len(header), exc) from None
    except GZIP_ERRORS as exc:
        if not is_gzip(path):
            raise
        raise corrupt_gzip(path, exc) from None


def count_records(path: Path, header: list[str]) -> int:
    """Rows of a CSV request file (blank lines skipped; a quoted line break is inside its row),
    counted by Arrow reading the first column only; a malformed file is refused as
    :func:`csv_batches` refuses it."""
    raw = raw_header(path)
    rows = 0
    try:
        with arrow_input(path) as source:
            reader = pa_csv.open_csv(
                source, read_options=pa_csv.ReadOptions(block_size=1 << 22),
                convert_options=pa_csv.ConvertOptions(include_columns=raw[:1], column_types={raw[0]: pa.string()}))
            for batch in reader:
                rows += batch.num_rows
    except pa.ArrowInvalid as exc:
        raise _malformed(path, len(header), exc) from None
    except GZIP_ERRORS as exc:
        if not is_gzip(path):
            raise
        raise corrupt_gzip(path, exc) from None
    return rows


def _malformed(path: Path, width: int, exc: Exception) -> InvalidInputError:
    """The error for a file Arrow refused: bytes that are not UTF-8, or the first row of the wrong
    width, named by its line."""
    first = str(exc).splitlines()[0]
    if "UTF8" in first or "UTF-8" in first:
        return not_utf8_error(path)
    where = bad_csv_line(path, width)
    first = re.sub(r"Row #\d+: ", "", first)  # Arrow counts records, not lines: the line is named before
    if "straddling" in first:  # a row longer than the reader's block
        first = "a row or field longer than 1 MiB"
    return InvalidInputError(f"{path}{where}: malformed CSV row ({first[:200]}); every row needs {width} cells, "
                             "quoted (\"...\") where a cell holds a comma, quote or line break", field="requests")


def bad_csv_line(path: Path, width: int) -> str:
    """``", line N"`` of the first row whose number of cells is not ``width`` (an error path only)."""
    with open_text(path, encoding="utf-8-sig", errors="replace") as fh:
        reader = csv.reader(fh)
        try:
            for row in reader:
                if row and len(row) != width:
                    return f", line {reader.line_num}"
        except csv.Error:
            return f", line {reader.line_num}"
    return ""


def physical_line(path: Path, record_line: int) -> int:
    """The line an editor shows for the record that the readers number ``record_line`` (the header
    is record line 1, each non-blank record one more). Blank lines and quoted line breaks move a
    record further down the file (an error path only: the file is scanned up to the record)."""
    with open_text(path, encoding="utf-8-sig", errors="replace") as fh:
        reader = csv.reader(fh)
        records = 0
        start = 1
        try:
            for row in reader:
                if row:
                    records += 1
                    if records == record_line:
                        return start
                start = reader.line_num + 1
        except csv.Error:
            pass
    return record_line


def with_physical_line(path: Path, message: str) -> str:
    """``message`` (``"line N: ..."`` with N a record line) with N the line an editor shows."""
    m = _LINE_PREFIX.match(message)
    if not m:
        return message
    return f"line {physical_line(path, int(m.group(1)))}: {message[m.end():]}"
