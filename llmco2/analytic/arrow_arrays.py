"""NumPy <-> Arrow conversions through buffers.

``pa.array``, ``pa.scalar``, ``Array.to_numpy`` and Python scalars passed to Arrow compute
functions make pyarrow import pandas (about 0.4 s) to check their input's type. The request-file
path converts its columns here instead, from and to the arrays' buffers (public Arrow API), so a
prediction never imports pandas.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

_TO_ARROW = {np.dtype(np.float64): pa.float64(), np.dtype(np.int64): pa.int64(), np.dtype(np.bool_): pa.bool_()}
_TO_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64, pa.uint8(): np.uint8,
             pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64, pa.float32(): np.float32,
             pa.float64(): np.float64}


def arrow_array(values: NDArray[Any], valid: NDArray[np.bool_] | None = None) -> pa.Array:
    """A float64, int64 or bool NumPy array as an Arrow array (``valid``: False marks a null)."""
    values = np.ascontiguousarray(values)
    if values.dtype not in _TO_ARROW:
        raise TypeError(f"unsupported dtype {values.dtype}")
    bitmap = None if valid is None or bool(valid.all()) else pa.py_buffer(np.packbits(valid, bitorder="little"))
    data = np.packbits(values, bitorder="little") if values.dtype == np.bool_ else values
    return pa.Array.from_buffers(_TO_ARROW[values.dtype], len(values), [bitmap, pa.py_buffer(data)],
                                 null_count=-1 if bitmap is not None else 0)


def string_array(texts: list[str]) -> pa.Array:
    """Python strings as an Arrow string array."""
    data = [t.encode() for t in texts]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def empty_strings(n: int) -> pa.Array:
    """``n`` empty strings."""
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)), pa.py_buffer(b"")])


def string_scalar(text: str) -> pa.Scalar:
    """An Arrow string scalar (to compare or fill with, instead of a Python ``str``)."""
    return string_array([text])[0]


def numpy_values(values: pa.Array) -> NDArray[Any]:
    """The values of a numeric or bool Arrow array without nulls, as NumPy (a view where it can)."""
    if values.null_count:
        raise ValueError("the array has nulls")
    n = len(values)
    if values.type == pa.bool_():
        if not n:
            return np.zeros(0, dtype=bool)
        bits = np.frombuffer(values.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, count=values.offset + n, bitorder="little")[values.offset:].astype(bool)
    if values.type not in _TO_NUMPY:
        raise TypeError(f"unsupported Arrow type {values.type}")
    dtype = np.dtype(_TO_NUMPY[values.type])
    if not n:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=n, offset=values.offset * dtype.itemsize)
