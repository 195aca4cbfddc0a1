"""Prediction intervals by split-conformal calibration in log space (NumPy only).

On held-out rows, the residual ``r = log(measured) - log(predicted)`` is collected per phase and
per device group (edge modules/SoCs, data-centre GPUs). The interval of a new prediction ``E`` at
nominal levels ``(a, b)`` is ``[E exp(q_a), E exp(q_b)]`` with ``q`` the finite-sample-corrected
empirical quantiles of ``r`` (split conformal: with ``n`` rows, levels ``floor(a (n + 1)) / n``
and ``ceil(b (n + 1)) / n``). A group with fewer than :data:`MIN_ROWS` rows uses the quantiles of
all rows of the phase.

Requests outside the training domain (an unseen GPU, engine or size) take the quantiles of
out-of-domain residuals when the trainer supplies them (e.g. every held-out device's residuals of
a leave-one-device-out experiment), widened to contain the in-domain interval. Without such
residuals, the in-domain interval is widened by :data:`UNCALIBRATED_WIDENING` in log space, and
the calibration says that it is uncalibrated.

Rows of a whole request (``total``) count toward decode, which dominates their energy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.table import value_codes

MIN_ROWS = 30
#: Log-space widening of out-of-domain intervals when no out-of-domain residuals were supplied.
UNCALIBRATED_WIDENING = 2.0
PHASES = ("prefill", "decode")


def conformal_bounds(resid: NDArray[np.float64], levels: tuple[float, float]) -> list[float]:
    """``[low, high]`` finite-sample-corrected quantiles of ``resid`` (``[0, 0]`` when empty)."""
    r = np.sort(np.asarray(resid, dtype=float)[np.isfinite(resid)])
    n = len(r)
    if not n:
        return [0.0, 0.0]
    lo_rank = int(np.floor(levels[0] * (n + 1))) - 1
    hi_rank = int(np.ceil(levels[1] * (n + 1))) - 1
    lo = r[lo_rank] if lo_rank >= 0 else r[0] - (r[-1] - r[0])
    hi = r[hi_rank] if hi_rank < n else r[-1] + (r[-1] - r[0])
    return [float(min(lo, 0.0)), float(max(hi, 0.0))]


@dataclass
class IntervalCalibration:
    """Log-residual quantiles per phase and group, and for out-of-domain requests."""

    levels: tuple[float, float] = (0.1, 0.9)
    in_domain: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # phase -> group|all -> [lo, hi]
    out_of_domain: dict[str, list[float]] = field(default_factory=dict)  # phase -> [lo, hi]
    rows: dict[str, Any] = field(default_factory=dict)
    out_of_domain_source: str = "uncalibrated"

    @staticmethod
    def _phase_rows(phase: NDArray[np.int64], p: int) -> NDArray[np.bool_]:
        return phase == 0 if p == 0 else phase >= 1

    @classmethod
    def fit(cls, log_resid: NDArray[np.float64], phase: NDArray[np.int64], groups: Sequence[str],
            levels: tuple[float, float] = (0.1, 0.9)) -> IntervalCalibration:
        """Calibrate on held-out rows: ``log_resid`` = log measured - log predicted, ``phase``
        0/1/2 per row, ``groups`` the device group of each row."""
        cal = cls(levels=(float(levels[0]), float(levels[1])))
        g = np.asarray(list(groups), dtype=object)
        for p, name in enumerate(PHASES):
            mine = cls._phase_rows(np.asarray(phase), p)
            table = {"all": conformal_bounds(log_resid[mine], cal.levels)}
            counts = {"all": int(mine.sum())}
            for group in sorted(set(g[mine])):
                sel = mine & (g == group)
                counts[str(group)] = int(sel.sum())
                if sel.sum() >= MIN_ROWS:
                    table[str(group)] = conformal_bounds(log_resid[sel], cal.levels)
            cal.in_domain[name] = table
            cal.rows[name] = counts
        return cal

    def with_out_of_domain(self, log_resid: NDArray[np.float64], phase: NDArray[np.int64], source: str) -> IntervalCalibration:
        """Set the out-of-domain quantiles from residuals of predictions outside their training
        domain (``source`` says where they come from)."""
        for p, name in enumerate(PHASES):
            mine = self._phase_rows(np.asarray(phase), p)
            if mine.sum() >= MIN_ROWS:
                self.out_of_domain[name] = conformal_bounds(log_resid[mine], self.levels)
        all_rows = conformal_bounds(log_resid, self.levels)
        for name in PHASES:
            self.out_of_domain.setdefault(name, all_rows)
        self.rows["out_of_domain"] = int(np.isfinite(log_resid).sum())
        self.out_of_domain_source = source
        return self

    def _in(self, name: str, group: str) -> list[float]:
        table = self.in_domain.get(name, {})
        return table.get(group) or table.get("all") or [0.0, 0.0]

    def log_bounds(self, groups: Sequence[str], extrapolated: Sequence[bool]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``([n, 2], [n, 2])`` log-space offsets of the interval ends, per request and phase
        (worked out once per distinct (group, extrapolated) pair)."""
        out = np.asarray(extrapolated, dtype=bool).reshape(-1)
        if len(out) != len(groups):
            raise ValueError(f"{len(groups)} groups but {len(out)} extrapolation flags")
        values, code = value_codes(groups)
        pairs, inverse = np.unique(code * 2 + out, return_inverse=True)
        lo, hi = np.zeros((len(pairs), 2)), np.zeros((len(pairs), 2))
        for j, pair in enumerate(pairs.tolist()):
            group, outside = values[pair // 2], bool(pair % 2)
            for p, name in enumerate(PHASES):
                b = self._in(name, group)
                if outside:
                    o = self.out_of_domain.get(name)
                    b = [min(b[0], o[0]), max(b[1], o[1])] if o else [b[0] * UNCALIBRATED_WIDENING,
                                                                      b[1] * UNCALIBRATED_WIDENING]
                lo[j, p], hi[j, p] = b[0], b[1]
        inverse = inverse.reshape(-1)
        return lo[inverse], hi[inverse]

    def state_dict(self) -> dict[str, Any]:
        return {"levels": list(self.levels), "in_domain": self.in_domain, "out_of_domain": self.out_of_domain,
                "rows": self.rows, "out_of_domain_source": self.out_of_domain_source}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> IntervalCalibration:
        if not state:
            return cls()
        return cls(tuple(state.get("levels", (0.1, 0.9))), dict(state.get("in_domain", {})),  # type: ignore[arg-type]
                   dict(state.get("out_of_domain", {})), dict(state.get("rows", {})),
                   str(state.get("out_of_domain_source", "uncalibrated")))
