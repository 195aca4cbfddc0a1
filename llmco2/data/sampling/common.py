"""Shared pieces of the samplers: the sample frame's columns, the weight dtypes and small
argument and drawing helpers (categorical draws from uniforms, rounding to a step)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError

IntArray = NDArray[np.int64]

ARCH_COLUMNS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")
SAMPLE_COLUMNS = ("model", "gpu", "num_gpus", "batch_size", "prompt_tokens", "generated_tokens", "dtype", "trace",
                  *ARCH_COLUMNS)
INT_COLUMNS = ("num_gpus", "batch_size", "prompt_tokens", "generated_tokens", *ARCH_COLUMNS)
DTYPES = ("fp16", "bf16", "int8", "int4")
#: Default share of each weight dtype in the focused draw (renormalised over the dtypes allowed).
DTYPE_WEIGHTS = {"fp16": 0.4, "bf16": 0.3, "int8": 0.15, "int4": 0.15}
SAMPLE_TRACES = ("code", "conv", "uniform")
#: Target column of the frames :func:`~llmco2.data.sampling.focused_loop` returns.
TARGET = "target"


def as_list(value: Any, name: str) -> list[Any]:
    """``value`` as a list (``None``: empty; a string: one item)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise InvalidInputError(f"must be a list, got {value!r}", field=name) from None


def choice_weights(values: Any, k: int, name: str) -> NDArray[np.float64]:
    """Normalised non-negative weights of length ``k`` (``None``: equal)."""
    if values is None:
        return np.full(k, 1.0 / k)
    w = np.asarray(as_list(values, name), dtype=np.float64)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidInputError(f"must be {k} non-negative numbers with a positive sum, got {list(values)}", field=name)
    return w / w.sum()


def pick(weights: NDArray[np.float64], u: NDArray[np.float64]) -> tuple[IntArray, NDArray[np.bool_]]:
    """Row-wise categorical draw: column index per row (probability proportional to ``weights``)
    from uniforms ``u``; ``ok`` is false where a row has no positive weight."""
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    idx = (cum <= (u * total)[:, None]).sum(axis=1)
    return np.minimum(idx, weights.shape[1] - 1).astype(np.int64), total > 0


def round_to(x: NDArray[np.float64], step: Any) -> IntArray:
    """Round to a positive multiple of ``step`` (at least ``step``)."""
    step = np.asarray(step, dtype=np.float64)
    return (np.maximum(np.rint(x / step), 1.0) * step).astype(np.int64)


def check_dtypes(dtypes: Sequence[str]) -> list[str]:
    """The weight dtypes to sample, each one of :data:`DTYPES`."""
    out = [str(d) for d in dtypes]
    bad = [d for d in out if d not in DTYPES]
    if bad or not out:
        raise InvalidInputError(f"sampled weight dtypes must be among {', '.join(DTYPES)}, got {out}", field="dtypes")
    return out


def check_fraction(value: float, name: str, allow_zero: bool = False) -> float:
    """``value`` as a float in (0, 1] (``allow_zero``: [0, 1]), else `InvalidInputError` on ``name``."""
    v = float(value)
    if not (0 <= v <= 1) or (v == 0 and not allow_zero):
        raise InvalidInputError(f"must be in {'[0' if allow_zero else '(0'}, 1], got {value}", field=name)
    return v
