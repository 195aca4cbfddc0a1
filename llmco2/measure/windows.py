"""Measurement windows long enough for a coarse energy counter.

NVML's total-energy counter is updated only every few tens of milliseconds (the update period is
GPU-dependent; an H100 read 0, 21.2 and 0 J for three identical 40 ms prefill passes). A window
shorter than a few periods reads 0 J or whole counter increments. Three tools fix that:

* :func:`probe_counter` — at the start of a sweep, read the counter in a tight loop while the GPU
  is busy and report its update period (s) and the energy it adds per update under that load (J);
* :class:`WindowPolicy` — how long a window must be: at least ``max(min_window_s, min_periods x
  period)`` seconds, and long enough in energy that one counter increment is at most
  ``target_bound`` of it; from that, the number ``k`` of passes per window;
* :func:`per_pass` / :func:`quantisation_bound` — a window of ``k`` passes divided by ``k``
  (optionally minus another phase measured on its own), and the relative error bound
  ``increment / (k x energy of one pass)`` that a row records (rows above ``flag_bound``, 2%
  by default, are flagged :data:`QUANTISED_FLAG`).

Three window methods, recorded per row: ``single`` (one pass per window), ``amortised`` (``k``
passes back to back, divided by ``k``; prefill) and ``lengthened`` (``k`` x prefill+decode,
divided by ``k``, minus the prefill measured on its own; short decodes).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.measure.errors import MeasurementError
from llmco2.measure.measurement import Measurement

log = logging.getLogger(__name__)

QUANTISED_FLAG = "counter_quantised"
SINGLE, AMORTISED, LENGTHENED = "single", "amortised", "lengthened"
MIN_UPDATES = 4


@dataclass(frozen=True)
class CounterProbe:
    """What :func:`probe_counter` found.

    Attributes:
        period_s: update period of the energy counter (s; the largest of the GPUs' medians).
        increment_j: per GPU, the median energy the counter adds per update under the probe's load (J).
        updates: per GPU, how many updates were seen.
        duration_s: how long the probe ran (s).
    """

    period_s: float
    increment_j: dict[int, float]
    updates: dict[int, int] = field(default_factory=dict)
    duration_s: float = 0.0

    def increment_for(self, gpus: Sequence[int]) -> float:
        """Counter increment of a window summed over ``gpus`` (J): each GPU's reading is off by at
        most one of its own increments."""
        return float(sum(self.increment_j[g] for g in gpus if g in self.increment_j))

    def to_dict(self) -> dict[str, Any]:
        return {"period_s": self.period_s, "increment_j": {str(g): v for g, v in self.increment_j.items()},
                "updates": {str(g): n for g, n in self.updates.items()}, "duration_s": self.duration_s}


def probe_counter(read_mj: Callable[[], Mapping[int, int]], clock: Callable[[], float], load: Callable[[], None] | None = None,
                  duration_s: float = 2.0, max_reads: int = 10_000_000) -> CounterProbe:
    """Read the energy counters in a tight loop for ``duration_s`` seconds while ``load()`` keeps
    the GPUs busy (it is called before every read and should queue a little work without
    waiting for it), and return the update period and the increment per update.

    Raises `MeasurementError` when a counter changes fewer than :data:`MIN_UPDATES` times.
    """
    if duration_s <= 0:
        raise InvalidInputError(f"must be > 0 seconds, got {duration_s}", field="probe_s")
    last = dict(read_mj())
    changes: dict[int, list[tuple[float, int]]] = {g: [] for g in last}
    t0 = clock()
    t = t0
    for _ in range(max_reads):
        if load is not None:
            load()
        values = read_mj()
        t = clock()
        for g, v in values.items():
            if v != last[g]:
                changes[g].append((t, int(v) - int(last[g])))
                last[g] = v
        if t - t0 >= duration_s:
            break
    periods: dict[int, float] = {}
    increments: dict[int, float] = {}
    for g, seen in changes.items():
        if len(seen) < MIN_UPDATES:
            raise MeasurementError(f"GPU {g}: the energy counter changed {len(seen)} times in {t - t0:.2f} s under load; its update "
                                   f"period cannot be told (is the GPU busy? use method=nvml_power)")
        times = [s[0] for s in seen]
        periods[g] = statistics.median(b - a for a, b in zip(times, times[1:], strict=False))
        increments[g] = statistics.median(s[1] for s in seen[1:]) / 1000.0  # the first change may follow a partial update
    probe = CounterProbe(period_s=max(periods.values()), increment_j=increments, updates={g: len(s) for g, s in changes.items()},
                         duration_s=t - t0)
    log.info("energy counter: update period %.1f ms, %s per update under load", probe.period_s * 1000,
             ", ".join(f"GPU {g} {v:.2f} J" for g, v in increments.items()))
    return probe


@dataclass(frozen=True)
class WindowPolicy:
    """How long a measurement window must be.

    Attributes:
        min_window_s: shortest window in seconds (1 s).
        min_periods: shortest window in counter update periods (20).
        target_bound: passes are added until one counter increment is at most this fraction of the
            window's energy (1.5%), so that rows stay below ``flag_bound``.
        flag_bound: rows whose quantisation bound exceeds this fraction (2%) are flagged
            :data:`QUANTISED_FLAG`.
        max_passes: upper limit of ``k`` (a phase of almost no energy would otherwise run for ever;
            a 1 ms prefill needs about 7,000 passes for a 7 s window).
    """

    min_window_s: float = 1.0
    min_periods: float = 20.0
    target_bound: float = 0.015
    flag_bound: float = 0.02
    max_passes: int = 100_000

    def __post_init__(self) -> None:
        for name in ("min_window_s", "min_periods"):
            if getattr(self, name) < 0:
                raise InvalidInputError(f"must be >= 0, got {getattr(self, name)}", field=name)
        for name in ("target_bound", "flag_bound"):
            if not 0 < getattr(self, name) < 1:
                raise InvalidInputError(f"must be between 0 and 1 (a fraction), got {getattr(self, name)}", field=name)
        if self.max_passes < 1:
            raise InvalidInputError(f"must be >= 1, got {self.max_passes}", field="max_passes")

    @classmethod
    def single_pass(cls) -> WindowPolicy:
        """One pass per window whatever the counter (the method before amortised windows; tests)."""
        return cls(min_window_s=0.0, min_periods=0.0, target_bound=0.999, max_passes=1)

    def minimum_s(self, probe: CounterProbe | None) -> float:
        """Shortest window in seconds: ``max(min_window_s, min_periods x period)``."""
        return max(self.min_window_s, self.min_periods * probe.period_s if probe is not None else 0.0)

    def passes(self, pass_s: float, minimum_s: float, increment_j: float | None = None, pass_energy_j: float | None = None,
               share: float = 1.0) -> int:
        """``k``: passes of ``pass_s`` seconds (and ``pass_energy_j`` joules, if known) that fill a
        window of ``minimum_s`` seconds in which one counter increment is at most ``share x
        target_bound`` of ``k x pass_energy_j`` (``share`` 1/2 where two windows' errors add up)."""
        k = 1
        if minimum_s > 0:
            k = max(k, math.ceil(minimum_s / max(pass_s, 1e-9) - 1e-9))  # 3 s / 40 ms is 75 passes, not 76
        if increment_j and pass_energy_j is not None:
            if pass_energy_j <= 0:
                k = self.max_passes
            else:
                k = max(k, math.ceil(increment_j / (share * self.target_bound * pass_energy_j)))
        if k > self.max_passes:
            log.warning("a window would need %d passes; capped at %d (the row's quantisation bound will show it)", k, self.max_passes)
        return min(k, self.max_passes)


def per_pass(window: Measurement, k: int, minus: Sequence[Measurement] = (), name: str | None = None) -> Measurement:
    """``window`` divided by ``k`` passes, minus the per-pass measurements ``minus`` (per GPU energy
    and elapsed time; e.g. the prefill inside a lengthened decode window)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    energy = {g: e / k - sum(m.energy_j.get(g, 0.0) for m in minus) for g, e in window.energy_j.items()}
    elapsed = window.elapsed_s / k - sum(m.elapsed_s for m in minus)
    return Measurement(name=name or window.name, elapsed_s=elapsed, energy_j=energy, method=window.method,
                       idle_power_w=dict(window.idle_power_w), sm_clock_mhz=dict(window.sm_clock_mhz),
                       mem_clock_mhz=dict(window.mem_clock_mhz), temperature_c=dict(window.temperature_c))


def quantisation_bound(increment_j: float | None, k: int, phase_energy_j: float, extra_j: float = 0.0) -> float | None:
    """Relative error bound of a phase from the counter's quantisation: ``(increment / k + extra) /
    energy``, where ``extra`` is the absolute bound of anything subtracted (the prefill of a
    lengthened decode). ``None`` when the increment is unknown (power sampling, no probe)."""
    if increment_j is None:
        return None
    if phase_energy_j <= 0:
        return math.inf
    return (increment_j / k + extra_j) / phase_energy_j


@dataclass(frozen=True)
class WindowPlan:
    """How one phase of a configuration is measured: ``k`` passes per window with ``method``."""

    method: str
    k: int

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "k": self.k}
