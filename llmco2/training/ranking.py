"""Ranking metrics: does a predictor order configurations (GPUs for one model and load) the way
the measurements do?

Pairs of configurations are compared on one quantity (e.g. J per output token, lower is better;
the direction does not matter to these metrics). A pair is

* **concordant** when prediction and measurement order it the same way;
* **discordant** when they order it opposite ways;
* a **predicted tie** when the predictions are equal (counted as half right, and as neither
  concordant nor discordant in Kendall's tau);
* a **measured tie** when the two measurements differ by at most ``tie_tolerance`` (a fraction:
  0.02 = 2%, about the run-to-run scatter of a power reading): such a pair has no order to get
  right, so it is skipped by both metrics and counted apart.

Kendall's tau of a set of pairs is ``(concordant - discordant) / pairs`` (tau-a over the pairs
counted, ties in measurement skipped); summing :class:`PairCounts` over groups gives the average
of the groups' taus weighted by their pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Measurements within this fraction of each other are a tie (skipped): 2%.
TIE_TOLERANCE = 0.02


@dataclass(frozen=True)
class PairCounts:
    """Outcome of comparing pairs of configurations (counts of pairs)."""

    concordant: int = 0
    discordant: int = 0
    predicted_ties: int = 0
    measured_ties: int = 0

    @property
    def pairs(self) -> int:
        """Pairs counted by the metrics (measured ties skipped)."""
        return self.concordant + self.discordant + self.predicted_ties

    @property
    def tau(self) -> float:
        """Kendall's tau over the counted pairs, in [-1, 1]; NaN without pairs."""
        return (self.concordant - self.discordant) / self.pairs if self.pairs else math.nan

    @property
    def share_right(self) -> float:
        """Fraction (0-1) of counted pairs ordered right, a predicted tie counting half; NaN without pairs."""
        return (self.concordant + 0.5 * self.predicted_ties) / self.pairs if self.pairs else math.nan

    def __add__(self, other: PairCounts) -> PairCounts:
        return PairCounts(self.concordant + other.concordant, self.discordant + other.discordant,
                          self.predicted_ties + other.predicted_ties, self.measured_ties + other.measured_ties)


def pair_counts(measured: ArrayLike, predicted: ArrayLike, comparable: ArrayLike | None = None,
                tie_tolerance: float = TIE_TOLERANCE) -> PairCounts:
    """Compare every pair ``i < j`` of one group whose entry of ``comparable`` (an ``n x n``
    boolean matrix; default: every pair) is true. ``measured`` and ``predicted`` are positive
    values of the same quantity (any unit, the same for both); a pair whose measurements are within
    ``tie_tolerance`` (fraction) of each other is a measured tie."""
    m = np.asarray(measured, dtype=float)
    p = np.asarray(predicted, dtype=float)
    if m.shape != p.shape or m.ndim != 1:
        raise ValueError(f"measured {m.shape} and predicted {p.shape} must be two 1-D arrays of one length")
    if np.any(~np.isfinite(m) | (m <= 0)) or np.any(~np.isfinite(p) | (p <= 0)):
        raise ValueError("measured and predicted values must be positive and finite")
    n = len(m)
    ok = np.ones((n, n), dtype=bool) if comparable is None else np.asarray(comparable, dtype=bool)
    i, j = np.nonzero(np.triu(ok, k=1))
    dm = np.log(m[i] / m[j])
    dp = np.log(p[i] / p[j])
    tie_m = np.abs(dm) <= math.log1p(tie_tolerance) + 1e-12
    tie_p = ~tie_m & (dp == 0)
    sign = np.sign(dm) * np.sign(dp)
    return PairCounts(concordant=int(np.sum(~tie_m & ~tie_p & (sign > 0))), discordant=int(np.sum(~tie_m & ~tie_p & (sign < 0))),
                      predicted_ties=int(tie_p.sum()), measured_ties=int(tie_m.sum()))


def kendall_tau(measured: ArrayLike, predicted: ArrayLike, comparable: ArrayLike | None = None,
                tie_tolerance: float = TIE_TOLERANCE) -> float:
    """Kendall's tau of one group (see :func:`pair_counts`); NaN when no pair is counted."""
    return pair_counts(measured, predicted, comparable, tie_tolerance).tau


def share_right(measured: ArrayLike, predicted: ArrayLike, comparable: ArrayLike | None = None,
                tie_tolerance: float = TIE_TOLERANCE) -> float:
    """Fraction (0-1) of one group's counted pairs ordered right (see :func:`pair_counts`)."""
    return pair_counts(measured, predicted, comparable, tie_tolerance).share_right


def gpu_pairs(devices: ArrayLike, engines: ArrayLike) -> NDArray[np.bool_]:
    """Which configurations of one group (one model and load) to compare: those on different
    GPUs, on the same engine where the two GPUs ran one in common, otherwise on whatever engine
    each ran (e.g. Gaudi2's own stack against an H100's vLLM). An ``n x n`` boolean matrix."""
    dev = np.asarray(devices, dtype=object)
    eng = np.asarray(engines, dtype=object)
    ran = {d: set(eng[dev == d]) for d in set(dev)}
    out = np.zeros((len(dev), len(dev)), dtype=bool)
    for a in range(len(dev)):
        for b in range(len(dev)):
            if dev[a] != dev[b]:
                out[a, b] = eng[a] == eng[b] or not (ran[dev[a]] & ran[dev[b]])
    return out
