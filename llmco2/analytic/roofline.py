"""Roofline model (paper Eq 8): arithmetic intensity, ridge points, attainable performance.

Vectorised: every argument may be an array over requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

Array = NDArray[np.float64]

BOUNDS = ("compute", "memory", "network", "idle")


def arithmetic_intensity(ops: ArrayLike, traffic_bytes: ArrayLike) -> Array:
    """Operations per byte of traffic; ``inf`` when there is no traffic, 0 when there is no work."""
    o, b = np.asarray(ops, dtype=np.float64), np.asarray(traffic_bytes, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, o / np.where(b > 0, b, 1.0), np.where(o > 0, np.inf, 0.0))


def ridge_point(peak_ops_per_s: ArrayLike, bandwidth_bytes_per_s: ArrayLike) -> Array:
    """Intensity (ops/byte) where the roofline turns from bandwidth-bound to compute-bound."""
    return np.asarray(peak_ops_per_s, dtype=np.float64) / np.asarray(bandwidth_bytes_per_s, dtype=np.float64)


def attainable_performance(intensity: ArrayLike, peak_ops_per_s: ArrayLike, bandwidth_bytes_per_s: ArrayLike) -> Array:
    """Paper Eq 8: ``BW * AI`` below the ridge point, ``Th_max`` at or above it (ops/s)."""
    ai = np.asarray(intensity, dtype=np.float64)
    peak = np.asarray(peak_ops_per_s, dtype=np.float64)
    bw = np.asarray(bandwidth_bytes_per_s, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        below = np.where(ai > 0, bw * ai, 0.0)  # no work: no performance (avoids inf * 0)
    return np.where(ai < peak / bw, below, peak)


@dataclass(frozen=True)
class RooflinePoint:
    """Roofline of one kernel in one phase (arrays over requests).

    Attributes:
        intensity: the paper's MAI (ops per memory byte), or NAI (ops per network byte) for
            all-reduce kernels.
        perf_ops_per_s: the paper's P (Eq 8).
        time_s: time at the roofline, ``max(ops/peak, mem/BW, net/NET)``.
        bound: index into :data:`BOUNDS` of the resource that sets ``time_s``.
    """

    intensity: Array
    perf_ops_per_s: Array
    time_s: Array
    bound: NDArray[np.int64]


def roofline_point(ops: ArrayLike, mem_bytes: ArrayLike, net_bytes: ArrayLike, peak_ops_per_s: ArrayLike,
                   mem_bw_bytes_per_s: ArrayLike, net_bw_bytes_per_s: ArrayLike, network_kernel: bool) -> RooflinePoint:
    """Roofline of a kernel: Eq 8 against memory (or the network for an all-reduce kernel)."""
    ops_a = np.asarray(ops, dtype=np.float64)
    mem = np.asarray(mem_bytes, dtype=np.float64)
    net = np.asarray(net_bytes, dtype=np.float64)
    peak = np.asarray(peak_ops_per_s, dtype=np.float64)
    bw = np.asarray(mem_bw_bytes_per_s, dtype=np.float64)
    nbw = np.asarray(net_bw_bytes_per_s, dtype=np.float64)
    if network_kernel:
        ai = arithmetic_intensity(ops_a, net)
        perf = attainable_performance(ai, peak, np.where(nbw > 0, nbw, np.inf))
    else:
        ai = arithmetic_intensity(ops_a, mem)
        perf = attainable_performance(ai, peak, bw)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_compute = ops_a / peak
        t_mem = mem / bw
        t_net = np.where(net > 0, net / np.where(nbw > 0, nbw, np.nan), 0.0)
    t_compute, t_mem, t_net = np.broadcast_arrays(t_compute, t_mem, t_net)
    time = np.maximum(np.maximum(t_compute, t_mem), t_net)  # as max over the three, NaN first
    bound = np.where(time > 0, _first_max(t_compute, t_mem, t_net), 3)
    return RooflinePoint(ai, perf, time, bound.astype(np.int64))


def _first_max(*values: Array) -> NDArray[np.intp]:
    """Index of the largest of ``values`` (equal-shape arrays) element by element, the first of
    equal ones and the first NaN taken as largest: ``numpy.argmax`` over a stack of them, without
    the stack (an argmax across rows is slow)."""
    best = values[0]
    index = np.zeros(best.shape, dtype=np.intp)
    for i, v in enumerate(values[1:], start=1):
        later = ~np.less_equal(v, best) & np.equal(best, best)  # larger or NaN, unless a NaN is held already
        index = index + later * (i - index)  # arithmetic, not a masked write: no branch per element
        best = np.maximum(best, v)  # the largest so far, NaN kept (the sign of a zero does not matter to <=)
    return np.asarray(index)
