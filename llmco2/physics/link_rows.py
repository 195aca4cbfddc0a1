"""Each request row's all-reduce link, as arrays for the step physics' network term, and the bytes a collective puts on it.

The formulas are :mod:`llmco2.specs.links`' (one GPU at one tensor-parallel degree); this module only
evaluates them once per distinct (GPU, degree) pair of a batch of rows and spreads the values back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from llmco2.analytic.experts import all_to_all_rows
from llmco2.analytic.layer import KERNEL_NAMES, LayerAnalysis
from llmco2.specs.gpus import GPU
from llmco2.specs.links import RING_ALLREDUCE_PASSES, allreduce_bandwidth_bytes_per_s, allreduce_extra_latency_s

Array = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class LinkRows:
    """The GPU of each of ``n`` rows: ``gpus`` the distinct GPUs, ``code`` (``[n]``) each row's index into them.
    Two are equal when their rows hold equal GPUs, however the distinct GPUs are ordered."""

    gpus: tuple[GPU, ...]
    code: NDArray[np.int64]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LinkRows) and [self.gpus[i] for i in self.code.tolist()] == [
            other.gpus[i] for i in other.code.tolist()]

    __hash__ = None  # type: ignore[assignment]

    def take(self, idx: NDArray[np.int64]) -> LinkRows:
        return LinkRows(self.gpus, self.code[idx])

    @classmethod
    def of(cls, gpus: Sequence[GPU]) -> LinkRows:
        """The rows of ``gpus`` (one per row; the same object counts once)."""
        index: dict[int, int] = {}
        distinct: list[GPU] = []
        for g in gpus:
            if id(g) not in index:
                index[id(g)] = len(distinct)
                distinct.append(g)
        return cls(tuple(distinct), np.array([index[id(g)] for g in gpus], dtype=np.int64))

    def allreduce(self, tp: ArrayLike) -> tuple[Array, Array]:
        """``([n] link bandwidth (bytes/s), [n] latency beyond NVLink's (s))`` of one all-reduce of each row,
        its GPU at its tensor-parallel degree ``tp`` (:func:`llmco2.specs.links.allreduce_bandwidth_bytes_per_s`
        and :func:`llmco2.specs.links.allreduce_extra_latency_s`)."""
        n = len(self.code)
        if n == 0:
            return np.zeros(0), np.zeros(0)
        degree = np.broadcast_to(np.rint(np.asarray(tp, dtype=np.float64)).astype(np.int64), (n,))
        low = int(degree.min())
        span = int(degree.max()) - low + 1  # (GPU, degree) pairs as one integer each, in the same order
        keys, inverse = np.unique(self.code * span + (degree - low), return_inverse=True)
        pairs = np.stack([keys // span, keys % span + low], axis=1)
        values = np.array([(allreduce_bandwidth_bytes_per_s(self.gpus[g], int(t)), allreduce_extra_latency_s(self.gpus[g], int(t)))
                           for g, t in pairs.tolist()], dtype=np.float64).reshape(-1, 2)
        rows = values[np.asarray(inverse).reshape(-1)]
        return np.ascontiguousarray(rows[:, 0]), np.ascontiguousarray(rows[:, 1])


#: The slot that holds the MLP's collective: a tensor-parallel all-reduce, or with expert parallelism
#: across attention groups the dispatch and combine all-to-alls (:mod:`llmco2.analytic.experts`).
A2A_SLOT = "all_reduce_mlp"


def collectives_per_layer(a: LayerAnalysis) -> Array:
    """Collectives one layer runs per step, per row: one per present all-reduce slot; where the MoE
    layer dispatches tokens across attention groups (expert parallelism beyond the tensor-parallel
    group), its MLP slot is a dispatch and a combine (two all-to-alls) plus the tensor-parallel
    all-reduce when ``tp > 1``, as vLLM runs it."""
    count = np.sum([a.present[name].astype(np.float64) for name in KERNEL_NAMES if name.startswith("all_reduce")], axis=0)
    a2a = all_to_all_rows(a.batch)
    if not a2a.any():
        return count
    mlp = a.present[A2A_SLOT].astype(np.float64)
    return count + np.where(a2a, 2.0 + (a.batch.tp > 1) - mlp, 0.0)


def wire_bytes(net_bytes: Array, ring_part: Array | None = None) -> Array:
    """Bytes each GPU sends on one direction of its link for a collective slot whose analytic network
    bytes (the paper's, :mod:`llmco2.analytic.kernels`) are ``net_bytes``: a ring all-reduce sends
    :data:`~llmco2.specs.links.RING_ALLREDUCE_PASSES` times them (a reduce-scatter and an all-gather), an
    expert all-to-all's dispatch and combine bytes once. ``ring_part`` (the MLP slot of rows that hold
    both) caps the share of ``net_bytes`` that is an all-reduce; ``None``: all of it."""
    ring = net_bytes if ring_part is None else np.minimum(net_bytes, ring_part)
    return RING_ALLREDUCE_PASSES * ring + (net_bytes - ring)
