"""Accuracy metrics: MAPE, median APE and EBA (error-bound accuracy), as fractions.

Computed over rows with positive measured energy; the number of rows left out is reported.
EBA(b) is the fraction of predictions whose absolute percentage error is within ``b``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

EBA_BOUNDS = (0.05, 0.10, 0.30)


def ape(predicted: ArrayLike, measured: ArrayLike) -> np.ndarray:
    """Absolute percentage error |p - m| / m (a fraction) per row."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return np.abs(p - m) / m


def scores(predicted: ArrayLike, measured: ArrayLike) -> dict[str, Any]:
    """``{"n", "excluded", "mape", "median_ape", "eba_5", "eba_10", "eba_30"}`` over rows with
    positive measured energy and a finite prediction."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    ok = (m > 0) & np.isfinite(m) & np.isfinite(p)
    errors = ape(p[ok], m[ok])
    out: dict[str, Any] = {"n": int(ok.sum()), "excluded": int((~ok).sum())}
    if not len(errors):
        return {**out, "mape": None, "median_ape": None, **{f"eba_{int(b * 100)}": None for b in EBA_BOUNDS}}
    out["mape"] = float(errors.mean())
    out["median_ape"] = float(np.median(errors))
    for b in EBA_BOUNDS:
        out[f"eba_{int(round(b * 100))}"] = float((errors <= b + 1e-12).mean())
    return out


def grouped_scores(frame: pd.DataFrame, by: str, predicted: str = "predicted_j", measured: str = "energy_j") -> dict[str, Any]:
    """:func:`scores` per value of column ``by``."""
    return {str(k): scores(g[predicted], g[measured]) for k, g in frame.groupby(by, dropna=False, sort=True)}


def coverage(low: ArrayLike, high: ArrayLike, measured: ArrayLike) -> dict[str, Any]:
    """Empirical coverage of prediction intervals: ``{"n", "coverage", "below", "above",
    "median_width"}`` over rows with a positive measurement and finite bounds; ``coverage`` is the
    fraction of measurements within ``[low, high]``, ``median_width`` the median of high / low."""
    lo, hi, m = (np.asarray(a, dtype=float) for a in (low, high, measured))
    ok = (m > 0) & np.isfinite(m) & np.isfinite(lo) & np.isfinite(hi)
    n = int(ok.sum())
    if not n:
        return {"n": 0, "coverage": None, "below": None, "above": None, "median_width": None}
    lo, hi, m = lo[ok], hi[ok], m[ok]
    with np.errstate(divide="ignore", invalid="ignore"):
        width = np.where(lo > 0, hi / lo, np.inf)
    return {"n": n, "coverage": float(((m >= lo) & (m <= hi)).mean()), "below": float((m < lo).mean()),
            "above": float((m > hi).mean()), "median_width": float(np.median(width))}
