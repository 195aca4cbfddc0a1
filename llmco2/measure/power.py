"""Energy from sampled power: the fallback where a GPU has no total-energy counter (pre-Volta).

A :class:`PowerSampler` reads every GPU's power (W) with a time stamp (s) — synchronously when
asked (:meth:`PowerSampler.sample`, used at the edges of every window) and from a background
thread while a window is open — and :func:`integrate_power` integrates the trace over a window
with the trapezoid rule, the power held constant before the first and after the last sample.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from llmco2.measure.errors import MeasurementError

log = logging.getLogger(__name__)


def integrate_power(times_s: Sequence[float], power_w: Sequence[float], t0: float, t1: float) -> float:
    """Energy in joules of a power trace between ``t0`` and ``t1`` (seconds).

    The trace is linear between samples (so a linearly changing power is integrated exactly) and
    constant before its first and after its last sample. At least one sample is needed.
    """
    if t1 < t0:
        raise ValueError(f"window ends ({t1}) before it begins ({t0})")
    t = np.asarray(times_s, dtype=float)
    p = np.asarray(power_w, dtype=float)
    if t.size == 0 or t.size != p.size:
        raise MeasurementError(f"cannot integrate power: {t.size} time stamps and {p.size} power samples")
    order = np.argsort(t, kind="stable")
    t, p = t[order], p[order]
    inside = (t > t0) & (t < t1)
    grid = np.concatenate(([t0], t[inside], [t1]))
    values = np.interp(grid, t, p)
    return float(np.sum((values[1:] + values[:-1]) * 0.5 * np.diff(grid)))


class PowerSampler:
    """Time-stamped power samples of several GPUs.

    Args:
        read_power_w: returns ``{gpu index: power in W}`` for every GPU (one NVML call each).
        clock: seconds, monotonic (the meter's clock, so that windows and samples agree).
        interval_s: background sampling period; ``None`` takes samples only when :meth:`sample`
            is called (tests drive it by hand with a fake clock).
    """

    def __init__(self, read_power_w: Callable[[], dict[int, float]], clock: Callable[[], float] = time.perf_counter,
                 interval_s: float | None = 0.02) -> None:
        if interval_s is not None and interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 or None, got {interval_s}")
        self._read = read_power_w
        self._clock = clock
        self.interval_s = interval_s
        self._times: list[float] = []
        self._power: list[dict[int, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def sample(self) -> float:
        """Take one reading of every GPU now; returns its time stamp (s)."""
        t = self._clock()
        power = self._read()
        with self._lock:
            self._times.append(t)
            self._power.append(power)
        return t

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Sample in a background thread every ``interval_s`` (no-op without an interval)."""
        if self.interval_s is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="llmco2-power-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def _loop(self) -> None:
        assert self.interval_s is not None
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except BaseException as exc:  # reported by the next energy_j, never lost in the thread
                self._error = exc
                return

    def energy_j(self, t0: float, t1: float) -> dict[int, float]:
        """Energy per GPU in joules between ``t0`` and ``t1`` (s); re-raises a sampling failure."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        with self._lock:
            times = list(self._times)
            power = list(self._power)
        if not times:
            raise MeasurementError("no power samples were taken in the window")
        gpus = power[0].keys()
        return {g: integrate_power(times, [p[g] for p in power], t0, t1) for g in gpus}

    def mean_power_w(self, t0: float, t1: float) -> dict[int, float]:
        """Time-averaged power per GPU over ``[t0, t1]`` in watts."""
        span = t1 - t0
        energy = self.energy_j(t0, t1)
        if span <= 0:
            return {g: float("nan") for g in energy}
        return {g: e / span for g, e in energy.items()}

    def discard_before(self, t: float) -> None:
        """Forget samples older than the last one taken at or before ``t`` (keeps memory bounded)."""
        with self._lock:
            keep = 0
            for i, ts in enumerate(self._times):
                if ts <= t:
                    keep = i
            del self._times[:keep]
            del self._power[:keep]
