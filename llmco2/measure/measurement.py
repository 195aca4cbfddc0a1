"""What one measurement window measured: :class:`Measurement`, the record the meter
(:mod:`llmco2.measure.meter`) returns and the window arithmetic (:mod:`llmco2.measure.windows`)
divides and subtracts. Energies in J, times in s, power in W, clocks in MHz, temperatures in
degrees Celsius; dicts keyed by GPU index (CUDA numbering).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmco2.errors import InvalidInputError


@dataclass(frozen=True)
class Measurement:
    """What one window measured. Dicts are keyed by GPU index (CUDA numbering).

    Attributes:
        name: the window's name.
        elapsed_s: wall time of the window in seconds.
        energy_j: energy per GPU in joules.
        method: ``"nvml_energy"`` (energy counter) or ``"nvml_power"`` (integrated power samples).
        idle_power_w: idle power per GPU in watts, if it was measured (else empty).
        sm_clock_mhz / mem_clock_mhz: clocks read at the end of the window (MHz; None if not reported).
        temperature_c: GPU temperature read at the end of the window (degrees Celsius).
    """

    name: str
    elapsed_s: float
    energy_j: dict[int, float]
    method: str
    idle_power_w: dict[int, float] = field(default_factory=dict)
    sm_clock_mhz: dict[int, int | None] = field(default_factory=dict)
    mem_clock_mhz: dict[int, int | None] = field(default_factory=dict)
    temperature_c: dict[int, int | None] = field(default_factory=dict)

    @property
    def total_energy_j(self) -> float:
        """Energy of all GPUs together, joules."""
        return float(sum(self.energy_j.values()))

    @property
    def idle_energy_j(self) -> float | None:
        """What the GPUs would have used idling for ``elapsed_s`` (J); None if idle power is unknown."""
        if not self.energy_j or any(g not in self.idle_power_w for g in self.energy_j):
            return None
        return float(sum(self.idle_power_w[g] for g in self.energy_j) * self.elapsed_s)

    @property
    def energy_above_idle_j(self) -> float | None:
        """``total_energy_j`` minus the idle energy over the window (J; may dip below 0 for very
        short windows, as measurement noise); None if idle power is unknown."""
        idle = self.idle_energy_j
        return None if idle is None else self.total_energy_j - idle

    def subset(self, gpus: Sequence[int]) -> Measurement:
        """The same measurement restricted to ``gpus``."""
        def pick(d: Mapping[int, Any]) -> dict[int, Any]:
            return {g: d[g] for g in gpus if g in d}

        missing = [g for g in gpus if g not in self.energy_j]
        if missing:
            raise InvalidInputError(f"window {self.name!r} did not measure GPU(s) {missing}", field="gpus")
        return Measurement(self.name, self.elapsed_s, pick(self.energy_j), self.method, pick(self.idle_power_w),
                           pick(self.sm_clock_mhz), pick(self.mem_clock_mhz), pick(self.temperature_c))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready) including the derived totals."""
        out = asdict(self)
        out.update(total_energy_j=self.total_energy_j, energy_above_idle_j=self.energy_above_idle_j)
        return out
