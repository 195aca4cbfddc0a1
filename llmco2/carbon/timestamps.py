"""Request timestamps for hourly grid intensity: ISO 8601 text (or datetimes, or Arrow timestamps) to
seconds since 1970 (UTC; a time without a zone offset is UTC) and to hour indices, with bad cells
refused naming their line."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError

SECONDS_PER_HOUR = 3600


def hour_text(hour: int) -> str:
    """``2023-11-16T18:00Z`` for an hour index."""
    return datetime.fromtimestamp(int(hour) * SECONDS_PER_HOUR, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _parse_one(text: str) -> float | None:
    """Seconds since 1970 (UTC) of an ISO 8601 text, or None when it does not parse."""
    t = text.strip()
    if not t:
        return None
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    dot = t.find(".")
    if dot > 0:  # more than 6 fractional digits (the Azure traces write 7): microseconds suffice
        end = dot + 1
        while end < len(t) and t[end].isdigit():
            end += 1
        t = t[:dot + 1] + t[dot + 1:end][:6].ljust(1, "0") + t[end:]
    try:
        moment = datetime.fromisoformat(t)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _as_arrow(values: Any) -> Any:
    """An Arrow array of ``values`` (texts or times); a list of mixed cells becomes texts."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def parse_seconds(values: Any, lines: NDArray[np.int64] | None = None, where: str = "",
                  column: str = "timestamp") -> NDArray[np.float64]:
    """Seconds since 1970-01-01 UTC of ISO 8601 texts or of times (an Arrow or NumPy array, a
    list, a pandas Series). A text without a zone offset, or a time without a zone, is UTC. The
    first cell that is not a time raises, naming ``where`` and its line (``lines[i]``; default:
    its row, counted from 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = _as_arrow(values)
    if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):
        ns = arr.cast(pa.timestamp("ns", tz=getattr(arr.type, "tz", None)))
        if ns.null_count:
            _bad_time(None, int(np.argmax(np.asarray(ns.is_null()))), lines, where, column)
        return np.asarray(ns.cast(pa.int64()), dtype=np.float64) / 1e9
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.string())
    text = pc.utf8_trim_whitespace(arr)
    if not text.null_count:
        for target in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
            try:  # the whole column at once when every cell has (or none has) a zone offset
                return np.asarray(text.cast(target).cast(pa.int64()), dtype=np.float64) / 1e9
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
    cells = text.to_pylist()
    out = np.empty(len(cells), dtype=np.float64)
    for i, cell in enumerate(cells):
        seconds = None if cell is None else _parse_one(cell)
        if seconds is None:
            _bad_time(cell, i, lines, where, column)
        out[i] = seconds
    return out


def _bad_time(cell: Any, i: int, lines: NDArray[np.int64] | None, where: str, column: str) -> None:
    line = f"line {int(lines[i])}" if lines is not None else f"row {i}"
    prefix = f"{where}, " if where else ""
    raise InvalidInputError(f"{prefix}{line}: {column}: {cell!r} is not an ISO 8601 time (e.g. 2024-03-01T14:00:00Z; "
                            "without a zone offset it is read as UTC)")


def hours_of(seconds: NDArray[np.float64]) -> NDArray[np.int64]:
    """The hour (whole hours since 1970-01-01 UTC) that contains each time."""
    return np.floor(np.asarray(seconds, dtype=np.float64) / SECONDS_PER_HOUR).astype(np.int64)


# -- reading a file ---------------------------------------------------------------------------------
