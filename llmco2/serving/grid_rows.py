"""One batch size's row of a :class:`~llmco2.serving.costs.GridCostModel` as piecewise power laws
in context, evaluated with plain Python floats (no array overhead for one value or a short run).

The grid interpolates log energy and log latency linearly in (log batch, log context). At a fixed
batch the bilinear interpolation collapses to a linear function of log context between two grid
contexts ``c_j <= c < c_{j+1}``, i.e. ``energy = a_j * c ** b_j`` (and likewise latency), held
constant below the first and from the last grid context on. A :class:`PowerRow` stores ``a_j``
and ``b_j`` per segment, with the row's multipliers (energy scale, batch extrapolation, latency
calibration) folded into ``a_j``, so one value costs a bisection and two powers.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


@dataclass(frozen=True)
class PowerRow:
    """Energy (J) and latency (s) of one batch size as functions of context ``c`` (tokens).

    Segment ``s = bisect_right(bounds, c)``: ``s = 0`` below the first grid context and
    ``s = len(bounds)`` from the last one on (both constant, exponent 0), else the power law between
    ``bounds[s - 1]`` and ``bounds[s]``. ``ends[s]`` is the context at which segment ``s`` ends
    (``inf`` for the last). ``e_coef``/``e_exp`` give energy ``e_coef[s] * c ** e_exp[s]`` (J),
    ``t_coef``/``t_exp`` latency (s).
    """

    bounds: tuple[float, ...]
    ends: tuple[float, ...]
    e_coef: tuple[float, ...]
    e_exp: tuple[float, ...]
    t_coef: tuple[float, ...]
    t_exp: tuple[float, ...]

    def at(self, context: float) -> tuple[float, float]:
        """Energy (J) and latency (s) at ``context`` tokens."""
        s = bisect_right(self.bounds, context)
        return self.e_coef[s] * context ** self.e_exp[s], self.t_coef[s] * context ** self.t_exp[s]

    @property
    def first(self) -> tuple[float, float]:
        """Energy (J) and latency (s) at (and below) the first grid context."""
        return self.e_coef[0], self.t_coef[0]

    def run(self, context: float, steps: int, limit: float = math.inf) -> tuple[int, float, float]:
        """Decode steps at contexts ``context, context + 1, ...``: ``(n, energy J, time s)`` of the
        first ``n`` steps, ``n`` being ``steps`` or, if sooner, the first step by whose end the
        summed latency reaches ``limit`` (s)."""
        bounds, ends, e_coef, e_exp, t_coef, t_exp = self.bounds, self.ends, self.e_coef, self.e_exp, self.t_coef, self.t_exp
        k = 0
        e = t = 0.0
        if steps < 1:
            return k, e, t
        c = context
        while True:
            s = bisect_right(bounds, c)
            end, ea, eb, ta, tb = ends[s], e_coef[s], e_exp[s], t_coef[s], t_exp[s]
            while c < end:
                t += ta * c ** tb
                e += ea * c ** eb
                k += 1
                if t >= limit or k == steps:
                    return k, e, t
                c = context + k


def power_row(log_batches: Array, contexts: Array, log_e: Array, log_t: Array, batch: float,
              e_mult: float = 1.0, t_mult: float = 1.0) -> PowerRow:
    """The row at ``batch`` of grids ``log_e`` / ``log_t`` (log J and log s; shape (batches,
    contexts) over ``log_batches`` x ``contexts``, tokens), interpolated linearly in log batch
    (held at the grid's edges), energies times ``e_mult`` and latencies times ``t_mult``."""
    lb = min(max(math.log(max(batch, 1.0)), float(log_batches[0])), float(log_batches[-1]))
    i = min(max(int(np.searchsorted(log_batches, lb)) - 1, 0), len(log_batches) - 2)
    w = (lb - log_batches[i]) / (log_batches[i + 1] - log_batches[i])
    bounds = tuple(float(c) for c in contexts)
    log_contexts = np.log(contexts)
    parts = []
    for grid, mult in ((log_e, e_mult), (log_t, t_mult)):
        row = grid[i] + w * (grid[i + 1] - grid[i])  # log value at each grid context
        slope = np.diff(row) / np.diff(log_contexts)
        exps = np.concatenate([[0.0], slope, [0.0]])
        logs = np.concatenate([[row[0]], row[:-1] - slope * log_contexts[:-1], [row[-1]]])
        parts.append((tuple(float(v) for v in np.exp(logs) * mult), tuple(float(v) for v in exps)))
    return PowerRow(bounds, bounds + (math.inf,), parts[0][0], parts[0][1], parts[1][0], parts[1][1])
