"""Inference priors (the set I of the paper's Section 4.2): (prompt, generated) token pairs of
the Azure traces, and batch sizes with a head of given probabilities and a uniform tail."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from llmco2.data.sampling.common import IntArray


@functools.lru_cache(maxsize=8)
def trace_length_pairs(which: str, path: str | None) -> IntArray:
    """(prompt, generated) rows of an Azure trace, counts below 1 raised to 1 (cached)."""
    from llmco2.data.azure import load_trace

    df = load_trace(which, path)
    pairs = df[["prompt_tokens", "generated_tokens"]].to_numpy(dtype=np.int64)
    pairs.setflags(write=False)
    return np.maximum(pairs, 1)


def trace_pairs(which: str, path: str | Path | None = None) -> IntArray:
    """The (prompt, generated) pairs of trace ``which``: the inference prior (read once per process)."""
    return trace_length_pairs(which, None if path is None else str(Path(path).resolve()))


def draw_batch_sizes(probs: NDArray[np.float64], max_batch_size: int, u: NDArray[np.float64],
                     u_tail: NDArray[np.float64]) -> IntArray:
    """Batch sizes (sequences) from uniforms: size ``i + 1`` with probability ``probs[i]``, the
    rest spread uniformly over ``len(probs) + 1 .. max_batch_size`` (``u_tail`` picks there)."""
    k = len(probs)
    cum = np.cumsum(probs)
    head = np.searchsorted(cum, u, side="right") + 1  # 1..k, or k+1 in the tail
    tail_lo, tail_hi = k + 1, max_batch_size
    tail = tail_lo + np.floor(u_tail * max(tail_hi - tail_lo + 1, 1)).astype(np.int64)
    return np.where(head <= k, head, np.minimum(tail, tail_hi)).astype(np.int64)
