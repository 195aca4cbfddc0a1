"""Request latency from the analytic roofline time, calibrated on measured latencies.

Per phase, ``log(latency) = a + b * log(t_roofline)`` fitted by least squares on rows that report a
latency (any source, including latency-only ones). The roofline time carries the hardware, so the
calibration transfers to GPUs without latency measurements; it is what embodied carbon is charged
for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.models.dataset import EnergyData

MIN_TIME_S = 1e-9


@dataclass
class LatencyCalibration:
    """``latency = exp(a) * t_roofline^b`` per phase (prefill, decode); identity when unfitted."""

    a: NDArray[np.float64] = field(default_factory=lambda: np.zeros(2))
    b: NDArray[np.float64] = field(default_factory=lambda: np.ones(2))
    n: list[int] = field(default_factory=lambda: [0, 0])
    median_ape: list[float | None] = field(default_factory=lambda: [None, None])

    @staticmethod
    def roofline_times(data: EnergyData) -> NDArray[np.float64]:
        """``[n_configs, 2]`` roofline time (s) of prefill and decode."""
        _, totals = data.analysis()
        return np.maximum(np.stack([totals.totals[p]["time_s"] for p in ("prefill", "decode")], axis=1), MIN_TIME_S)

    @classmethod
    def fit(cls, data: EnergyData, latency_s: NDArray[np.float64]) -> LatencyCalibration:
        """Fit on the rows of ``data`` (phase 0/1) whose ``latency_s`` is positive."""
        cal = cls()
        t = cls.roofline_times(data)[data.config]
        for p in range(2):
            ok = (data.phase == p) & np.isfinite(latency_s) & (latency_s > 0) & (t[:, p] > MIN_TIME_S)
            if ok.sum() < 3:
                continue
            x, y = np.log(t[ok, p]), np.log(latency_s[ok])
            b, a = np.polyfit(x, y, 1)
            cal.a[p], cal.b[p], cal.n[p] = a, b, int(ok.sum())
            pred = np.exp(a + b * x)
            cal.median_ape[p] = float(np.median(np.abs(pred - latency_s[ok]) / latency_s[ok]))
        return cal

    def predict(self, data: EnergyData) -> NDArray[np.float64]:
        """``[n_configs, 2]`` predicted latency (s) of prefill and decode (0 for an empty decode)."""
        t = self.roofline_times(data)
        out = np.exp(self.a + self.b * np.log(t))
        steps = np.array([r.generated_tokens - 1 for _, r, _ in data.items])
        out[:, 1] = np.where(steps > 0, out[:, 1], 0.0)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"a": self.a.tolist(), "b": self.b.tolist(), "n": self.n, "median_ape": self.median_ape}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> LatencyCalibration:
        if not state:
            return cls()
        return cls(np.asarray(state["a"], dtype=float), np.asarray(state["b"], dtype=float), list(state["n"]),
                   list(state["median_ape"]))


def latency_rows(table: pd.DataFrame) -> tuple[EnergyData, NDArray[np.float64]]:
    """Rows of a canonical table with a prefill/decode latency, as modelled data and latencies."""
    from llmco2.models.dataset import energy_data

    has = pd.to_numeric(table["latency_s"], errors="coerce").gt(0) & table["phase"].isin(["prefill", "decode"])
    data = energy_data(table[has.to_numpy()].reset_index(drop=True), require_energy=False)
    return data, pd.to_numeric(data.table["latency_s"], errors="coerce").to_numpy(dtype=float)


MIN_ROWS_PER_DEVICE = 20


@dataclass
class LatencyModel:
    """A :class:`LatencyCalibration` per device with enough measurements, and a global one for the
    rest (devices never measured use the global fit through their own roofline time)."""

    per_device: dict[str, LatencyCalibration] = field(default_factory=dict)
    fallback: LatencyCalibration = field(default_factory=LatencyCalibration)

    @classmethod
    def fit(cls, data: EnergyData, latency_s: NDArray[np.float64]) -> LatencyModel:
        devices = np.array([g.id for _, _, g in data.items])[data.config]
        model = cls(fallback=LatencyCalibration.fit(data, latency_s))
        for dev in sorted(set(devices)):
            rows = np.flatnonzero(devices == dev)
            if len(rows) >= MIN_ROWS_PER_DEVICE:
                model.per_device[dev] = LatencyCalibration.fit(data.rows(rows), latency_s[rows])
        return model

    def predict(self, data: EnergyData) -> NDArray[np.float64]:
        """``[n_configs, 2]`` predicted latency (s) of prefill and decode."""
        out = self.fallback.predict(data)
        devices = np.array([g.id for _, _, g in data.items])
        for dev, cal in self.per_device.items():
            mine = devices == dev
            if mine.any():
                out[mine] = cal.predict(data)[mine]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"per_device": {d: c.state_dict() for d, c in self.per_device.items()}, "fallback": self.fallback.state_dict()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> LatencyModel:
        if not state:
            return cls()
        return cls({d: LatencyCalibration.from_state_dict(s) for d, s in state.get("per_device", {}).items()},
                   LatencyCalibration.from_state_dict(state.get("fallback")))
