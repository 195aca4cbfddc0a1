"""Energy targets: the learned log-ratio to a physics prior per phase.

The prior comes from :class:`llmco2.physics.priors.PhysicsPrior` (launch-overhead-aware latency x
power between idle and the power limit); :func:`physics_prior_j` is the earlier prior, the energy
the GPUs would draw at their TDP for the roofline time, ``time_at_roofline x TDP x num_gpus`` (J),
kept for comparisons (``TrainConfig.prior="tdp"``). The regressor learns
``r = log(E / E_prior)``, standardised with a mean and standard deviation fitted on training rows
and stored with the checkpoint. Learning a ratio to a hardware-aware prior is what lets a model
trained on some GPUs say something sensible about a GPU it has never seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis
from llmco2.analytic.model import ModelTotals

#: Floor on the prior (J) so that empty phases (one generated token: no decode) stay finite.
MIN_PRIOR_J = 1e-6


def physics_prior_j(analysis: LayerAnalysis, totals: ModelTotals) -> NDArray[np.float64]:
    """``[n_configs, 2]`` prior energy (J) of prefill and decode: roofline time x TDP x GPUs."""
    b = analysis.batch
    cols = [totals.totals[p]["time_s"] * b.tdp_w * b.num_gpus for p in ("prefill", "decode")]
    return np.maximum(np.stack(cols, axis=1), MIN_PRIOR_J)


#: Predictions may leave the training range of the standardised log-ratio by this much (in std).
CLAMP_MARGIN = 1.0


@dataclass
class EnergyTarget:
    """Standardisation of the per-phase log-ratio ``log(E / E_prior)``, and the range predictions
    are held to: the training range widened by :data:`CLAMP_MARGIN` standard deviations. The prior
    carries the scale of a request; the learned ratio only corrects it, so a request far outside
    the training data (new hardware, many GPUs) cannot run away exponentially."""

    mean: NDArray[np.float64]
    std: NDArray[np.float64]
    lo: NDArray[np.float64] | None = None
    hi: NDArray[np.float64] | None = None
    #: device group -> ``[min, max]`` of the training rows' ``log(E / E_prior)`` on that group's GPUs
    #: (every phase, whole-request rows against the summed prior): the correction an unseen GPU of
    #: the group may get (:meth:`bound_unseen`).
    group_bounds: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def fit(cls, log_ratio: NDArray[np.float64], mask: NDArray[np.bool_]) -> EnergyTarget:
        """Mean, std and clamp range per phase over the rows where ``mask`` is set (``[n, 2]``)."""
        mean, std = np.zeros(2), np.ones(2)
        lo, hi = np.full(2, -np.inf), np.full(2, np.inf)
        for p in range(2):
            vals = log_ratio[mask[:, p], p]
            if len(vals):
                mean[p] = float(vals.mean())
                std[p] = float(max(vals.std(), 1e-3))
                z = (vals - mean[p]) / std[p]
                lo[p], hi[p] = float(z.min()) - CLAMP_MARGIN, float(z.max()) + CLAMP_MARGIN
        return cls(mean, std, lo, hi)

    @staticmethod
    def group_log_ratio_bounds(log_ratio: NDArray[np.float64], groups: Sequence[str]) -> dict[str, list[float]]:
        """``{group: [min, max]}`` of the per-row log-ratios ``log_ratio`` ``[n]`` of each device group."""
        g = np.asarray(groups, dtype=object)
        ok = np.isfinite(log_ratio)
        return {str(k): [float(log_ratio[ok & (g == k)].min()), float(log_ratio[ok & (g == k)].max())]
                for k in sorted(set(g[ok].tolist()))}

    def bound_unseen(self, log_ratio: NDArray[np.float64], groups: Sequence[str],
                     unseen: NDArray[np.bool_]) -> NDArray[np.float64]:
        """``log_ratio`` ``[n, 2]`` with the rows of ``unseen`` GPUs held within the range the
        training rows of their device group needed. The network's correction was learnt on the
        training GPUs; for a GPU it has not seen, it is trusted only as far as the measured GPUs
        of the same kind (data-centre or edge) departed from the physics prior."""
        if not self.group_bounds or not np.any(unseen):
            return log_ratio
        g = np.asarray(groups, dtype=object)
        out = log_ratio.copy()
        for group, (lo, hi) in self.group_bounds.items():
            rows = unseen & (g == group)
            out[rows] = np.clip(out[rows], lo, hi)
        return out

    def clamp(self, z: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.lo is None or self.hi is None:
            return z
        return np.clip(z, self.lo, self.hi)

    def encode(self, log_ratio: NDArray[np.float64]) -> NDArray[np.float64]:
        return (log_ratio - self.mean) / self.std

    def decode_log_ratio(self, z: NDArray[np.float64]) -> NDArray[np.float64]:
        return z * self.std + self.mean

    def energy_j(self, z: NDArray[np.float64], prior_j: NDArray[np.float64]) -> NDArray[np.float64]:
        """``[n, 2]`` predicted energy (J) from standardised outputs and the prior."""
        return np.exp(self.decode_log_ratio(self.clamp(z))) * prior_j

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        if self.lo is not None and self.hi is not None:
            out.update(lo=self.lo.tolist(), hi=self.hi.tolist())
        if self.group_bounds:
            out["group_bounds"] = {k: list(v) for k, v in self.group_bounds.items()}
        return out

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> EnergyTarget:
        """The target of a checkpoint; raises ``ValueError`` unless every per-phase entry holds one
        finite number per phase (prefill, decode), the standard deviations positive."""
        def per_phase(key: str) -> NDArray[np.float64]:
            a = np.asarray(state[key], dtype=float)
            if a.shape != (2,) or not np.all(np.isfinite(a)):
                raise ValueError(f"target {key} must hold one finite number per phase (2), got shape {a.shape}")
            return a

        mean, std = per_phase("mean"), per_phase("std")
        if not np.all(std > 0):
            raise ValueError("target std must be positive")
        bounds = [per_phase(k) if k in state else None for k in ("lo", "hi")]
        groups = {str(k): [float(a) for a in v] for k, v in state.get("group_bounds", {}).items()}
        if any(len(v) != 2 or not all(np.isfinite(v)) for v in groups.values()):
            raise ValueError("target group_bounds must hold two finite numbers per group")
        return cls(mean, std, *bounds, groups)


def phase_energy(pred_j: NDArray[np.float64], phase: NDArray[np.int64]) -> NDArray[np.float64]:
    """Energy of each row's phase from ``[n, 2]`` per-phase predictions (total = sum)."""
    out = np.where(phase == 0, pred_j[:, 0], pred_j[:, 1])
    return np.where(phase == 2, pred_j[:, 0] + pred_j[:, 1], out)
