"""Gzip-compressed request files (``requests.csv.gz``), read as a stream and written atomically.

A file is gzip when its name ends in ``.gz`` or its first two bytes are the gzip magic
(``1f 8b``), so a compressed log renamed without its suffix is still read. Every reader of a
request file opens it through :func:`open_binary` / :func:`open_text` (Python) or
:func:`arrow_input` (Arrow), which decompress on the fly: memory stays bounded by the reader's
block, whatever the size of the file. A file that does not decompress (truncated, a flipped bit, a
bad checksum, a ``.gz`` name on a file that is not gzip) is :func:`corrupt_gzip`: one line naming
the file and the reason, exit code 2 on the command line.
"""

from __future__ import annotations

import gzip
import io
import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)

#: The first two bytes of every gzip member (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"
#: What a damaged gzip stream raises: Python's gzip (``BadGzipFile`` is an ``OSError``; a truncated
#: file ``EOFError``; a damaged block ``zlib.error``) and Arrow's decompressor (``OSError``).
GZIP_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
#: Bytes read from the decompressor at a time by the Python readers.
BUFFER_BYTES = 1 << 20
#: zlib level of gzip output (that of the ``gzip`` command: about 40 MB/s of CSV per core).
GZIP_LEVEL = 6


def is_gzip(path: str | Path) -> bool:
    """Whether ``path`` is read as gzip: its name ends in ``.gz`` or it starts with the gzip magic."""
    p = Path(path)
    if p.suffix.lower() == ".gz":
        return True
    try:
        with p.open("rb") as fh:
            return fh.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    except OSError:
        return False  # the caller's own open reports it


def corrupt_gzip(path: str | Path, exc: BaseException) -> InvalidInputError:
    """The one-line error for a gzip file that does not decompress."""
    text = str(exc).strip()
    reason = text.splitlines()[0][:160] if text else type(exc).__name__
    return InvalidInputError(f"{path} is not a readable gzip file ({reason}); check it with 'gzip -t', or give the "
                             "file uncompressed", field="requests")


class CheckedGzipReader(io.RawIOBase):
    """The decompressed bytes of a gzip file; a damaged stream raises :func:`corrupt_gzip`."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.gz = gzip.GzipFile(self.path, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return self.gz.readinto(buffer)
        except GZIP_ERRORS as exc:
            raise corrupt_gzip(self.path, exc) from None

    def close(self) -> None:
        if not self.closed:
            self.gz.close()
        super().close()


def open_binary(path: str | Path) -> IO[bytes]:
    """``path`` opened for reading bytes, decompressed when it is gzip (:func:`is_gzip`)."""
    if is_gzip(path):
        return io.BufferedReader(CheckedGzipReader(path), buffer_size=BUFFER_BYTES)
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


#: Leading bytes of the compressed formats read only after decompressing (gzip is read directly):
#: xz, bzip2, zstd and zip (their format specifications' magic numbers); gzip inside gzip as well.
OTHER_COMPRESSIONS: dict[bytes, str] = {b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd",
                                        b"PK\x03\x04": "zip", GZIP_MAGIC: "gzip twice"}


def compression_of(path: str | Path) -> str | None:
    """The compressed format ``path`` holds once any gzip is undone (:data:`OTHER_COMPRESSIONS`), or
    ``None`` (text, another binary format, or a file that cannot be read)."""
    try:
        with open_binary(path) as fh:
            head = fh.read(8)
    except (OSError, EOFError, InvalidInputError):
        return None
    return next((kind for magic, kind in OTHER_COMPRESSIONS.items() if head.startswith(magic)), None)


def compressed_error(path: str | Path, field: str) -> InvalidInputError | None:
    """The one-line error for a file that is compressed in a format read only after decompressing
    (``field``: the input it was given as), or ``None`` when it is not."""
    kind = compression_of(path)
    if kind is None:
        return None
    return InvalidInputError(f"{path} is compressed ({kind}): decompress it to text first (one layer of gzip is read "
                             "directly)", field=field)


def open_text(path: str | Path, encoding: str = "utf-8", errors: str = "strict") -> IO[str]:
    """``path`` opened for reading text with universal newlines off (as the ``csv`` module wants),
    decompressed when it is gzip."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors, newline="")


@contextmanager
def arrow_input(path: str | Path) -> Iterator[Any]:
    """What an Arrow reader is given for ``path``: a decompressing stream for a gzip file (closed
    afterwards), else the path itself (Arrow then chooses by suffix as it always has)."""
    if not is_gzip(path):
        yield str(path)
        return
    import pyarrow as pa

    stream = pa.input_stream(str(path), compression="gzip")
    try:
        yield stream
    finally:
        stream.close()


def arrow_csv_batches(path: str | Path, **options: Any) -> Iterator[Any]:
    """The record batches ``pyarrow.csv.open_csv(path, **options)`` reads, decompressed when the file
    is gzip; a damaged gzip stream raises :func:`corrupt_gzip` (Arrow's own errors pass through)."""
    import pyarrow.csv as pa_csv

    try:
        with arrow_input(path) as source:
            yield from pa_csv.open_csv(source, **options)
    except GZIP_ERRORS as exc:
        if not is_gzip(path):
            raise
        raise corrupt_gzip(path, exc) from None


def gzip_copy(source: Path, fh: IO[bytes]) -> None:
    """Compress the file ``source`` into the open file ``fh`` as one gzip member (no name and a zero
    time stamp in its header, so the same input gives the same bytes)."""
    with open(source, "rb") as src, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=GZIP_LEVEL, mtime=0,
                                                   filename="") as gz:
        while block := src.read(BUFFER_BYTES):
            gz.write(block)


def is_gzip_output(path: str | Path) -> bool:
    """Whether an output path asks for gzip (its name ends in ``.gz``)."""
    return Path(path).suffix.lower() == ".gz"
