"""What the inference runner (:mod:`llmco2.measure.runner`) reports: :class:`PhaseStats` per
phase (energy in J summed over the GPUs serving the request, latency in s, clocks in MHz,
temperature in degrees Celsius) and :class:`RunResult` for both phases of one request.

Plain data without torch, so that the sweep store (:mod:`llmco2.measure.store`) can read and
write results without importing the runner.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmco2.measure.measurement import Measurement


@dataclass(frozen=True)
class PhaseStats:
    """One phase over the measured repeats. Energies in J (all GPUs of the request), times in s."""

    phase: str
    repeats: int
    energy_j: float
    energy_std_j: float
    latency_s: float
    latency_std_s: float
    energy_above_idle_j: float | None
    method: str
    energy_per_repeat_j: tuple[float, ...] = ()
    latency_per_repeat_s: tuple[float, ...] = ()
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_max_c: float | None = None
    window_method: str = "single"
    window_passes: int = 1
    window_s: float | None = None
    quantisation_bound: float | None = None

    @classmethod
    def from_measurements(cls, phase: str, ms: Sequence[Measurement]) -> PhaseStats:
        """Mean and sample standard deviation of ``ms`` (at least one)."""
        if not ms:
            raise ValueError(f"no measurement of {phase}")
        energy = [m.total_energy_j for m in ms]
        latency = [m.elapsed_s for m in ms]
        above = [m.energy_above_idle_j for m in ms]

        def std(xs: list[float]) -> float:
            return statistics.stdev(xs) if len(xs) > 1 else 0.0

        def mean_of(values: list[Any]) -> float | None:
            present = [float(v) for v in values if v is not None]
            return statistics.fmean(present) if present else None

        temps = [t for m in ms for t in m.temperature_c.values() if t is not None]
        return cls(
            phase=phase, repeats=len(ms), energy_j=statistics.fmean(energy), energy_std_j=std(energy),
            latency_s=statistics.fmean(latency), latency_std_s=std(latency),
            energy_above_idle_j=None if any(a is None for a in above) else statistics.fmean(a for a in above if a is not None),
            method=ms[0].method, energy_per_repeat_j=tuple(energy), latency_per_repeat_s=tuple(latency),
            sm_clock_mhz=mean_of([c for m in ms for c in m.sm_clock_mhz.values()]),
            mem_clock_mhz=mean_of([c for m in ms for c in m.mem_clock_mhz.values()]),
            temperature_max_c=float(max(temps)) if temps else None,
        )


@dataclass(frozen=True)
class RunResult:
    """Both phases of one request. ``decode`` is None when only one token is generated."""

    prefill: PhaseStats
    decode: PhaseStats | None
    tokens_generated: int
    decode_steps: int
    gpus: tuple[int, ...]
    model_type: str
    weights: str
    notes: tuple[str, ...] = ()
    device_map: dict[str, str] = field(default_factory=dict)
    engine: str = "hf"
    attention: str | None = None
    idle_power_w: float | None = None
    power_limit_w: float | None = None

    @property
    def phases(self) -> tuple[PhaseStats, ...]:
        return (self.prefill,) if self.decode is None else (self.prefill, self.decode)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
