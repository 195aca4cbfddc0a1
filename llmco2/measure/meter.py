"""GPU energy meter: named measurement windows over one or more NVIDIA GPUs.

``meter.begin_window("prefill")`` ... ``meter.end_window("prefill")`` returns a
:class:`Measurement` with the energy of every GPU in joules. Two methods:

* ``nvml_energy`` — the cumulative energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
  millijoules, Volta and newer), read at both ends of the window;
* ``nvml_power`` — where the counter is missing, power (``nvmlDeviceGetPowerUsage``, milliwatts)
  sampled in a background thread and integrated over the window (:mod:`llmco2.measure.power`).

The device is synchronised before every read (``sync``; by default ``torch.cuda.synchronize``
on each GPU when torch has initialised CUDA), so queued kernels are counted in the window that
launched them. Idle power (W) is measured with :meth:`EnergyMeter.measure_idle_power` and
attached to every later measurement, which then also reports the energy above idle.

Counter wrap-around: the counter is an unsigned 64-bit number of millijoules, which wraps after
1.8e16 J (about 585 million years at 1 kW). A reading lower than the previous one is accepted
as a wrap only when the difference modulo 2**64 is physically possible (at most ``max_power_w``
per GPU over the window plus one second); otherwise the counter was reset (driver reload, GPU
reset) and :class:`~llmco2.measure.errors.CounterWrapError` is raised.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from llmco2.errors import InvalidInputError
from llmco2.measure.errors import CounterWrapError, MeasurementError, WindowError
from llmco2.measure.measurement import Measurement
from llmco2.measure.nvml import NVMLDevice, NVMLSession
from llmco2.measure.power import PowerSampler
from llmco2.measure.windows import CounterProbe, probe_counter

log = logging.getLogger(__name__)

METHODS = ("auto", "nvml_energy", "nvml_power")
COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption returns an unsigned long long (mJ)
WRAP_SLACK_S = 1.0


class Meter(Protocol):
    """What the runner needs from a meter (the NVML meter, or a fake one in tests)."""

    def begin_window(self, name: str) -> None: ...

    def end_window(self, name: str) -> Measurement: ...


@runtime_checkable
class IdleMeter(Protocol):
    """A meter that reads each GPU's idle power (W, by GPU index) before a sweep."""

    def measure_idle_power(self, duration_s: float = 5.0, sleep: Callable[[float], None] | None = None) -> dict[int, float]: ...


@runtime_checkable
class CounterMeter(Protocol):
    """A meter whose ``method`` may be the GPUs' energy counter (``"nvml_energy"``), whose update period
    and increment it can probe under load."""

    method: str

    def probe_counter(self, load: Callable[[], None] | None = None, duration_s: float = 2.0) -> CounterProbe | None: ...


def cuda_synchronizer(gpus: Sequence[int]) -> Callable[[], None]:
    """A ``sync()`` that waits for every queued kernel on ``gpus``.

    A no-op when torch is not imported or has not initialised CUDA: this process then cannot have
    kernels in flight (and the meter never imports torch itself).
    """
    indices = tuple(gpus)

    def sync() -> None:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        for g in indices:
            torch.cuda.synchronize(g)

    return sync


def counter_delta_mj(begin_mj: int, end_mj: int, elapsed_s: float, gpu: int, max_power_w: float) -> int:
    """Energy between two counter readings (mJ), handling a 64-bit wrap-around.

    Raises `CounterWrapError` when the counter went backwards by more than a wrap can explain.
    """
    if end_mj >= begin_mj:
        return end_mj - begin_mj
    wrapped = end_mj + COUNTER_MODULUS - begin_mj
    limit_mj = max_power_w * (max(elapsed_s, 0.0) + WRAP_SLACK_S) * 1000.0
    if wrapped > limit_mj:
        raise CounterWrapError(
            f"GPU {gpu}: the energy counter went backwards from {begin_mj} mJ to {end_mj} mJ in {elapsed_s:.3g} s "
            f"(driver reload or GPU reset?); the window is discarded",
            gpu=gpu, begin_mj=begin_mj, end_mj=end_mj,
        )
    log.warning("GPU %d: energy counter wrapped around 2**64 mJ (%d -> %d); counted %d mJ", gpu, begin_mj, end_mj, wrapped)
    return wrapped


@dataclass
class _Open:
    t0: float
    counters_mj: dict[int, int] | None  # None for the power method


class EnergyMeter:
    """Measure GPU energy over named windows, on several GPUs at once.

    Args:
        gpus: CUDA indices of the GPUs to measure.
        method: ``"auto"`` (the energy counter where every GPU has one, else power sampling),
            ``"nvml_energy"`` or ``"nvml_power"``.
        sync: called before every read (default: :func:`cuda_synchronizer`); ``None`` keeps the
            default, pass ``lambda: None`` to disable.
        clock: monotonic seconds (default ``time.perf_counter``, looked up when the meter is made).
        power_interval_s: sampling period of the power fallback (``None``: samples only at the
            window edges and when :meth:`PowerSampler.sample` is called — tests use this).
        max_power_w: upper bound of one GPU's power, used to tell a counter wrap from a reset.
        env: environment for ``CUDA_VISIBLE_DEVICES`` (default ``os.environ``).

    Raises `~llmco2.measure.errors.NoGPUError` (an `InvalidInputError`) when NVML or the GPUs
    are missing.
    """

    def __init__(self, gpus: Sequence[int] = (0,), *, method: str = "auto", sync: Callable[[], None] | None = None,
                 clock: Callable[[], float] | None = None, power_interval_s: float | None = 0.02,
                 max_power_w: float = 5000.0, env: Mapping[str, str] | None = None) -> None:
        if method not in METHODS:
            raise InvalidInputError(f"must be one of {', '.join(METHODS)}, got {method!r}", field="method")
        gpus = tuple(int(g) for g in gpus)
        if not gpus:
            raise InvalidInputError("no GPU to measure; give at least one index", field="gpus")
        if len(set(gpus)) != len(gpus):
            raise InvalidInputError(f"GPU indices repeat: {list(gpus)}", field="gpus")
        self.gpus = gpus
        self._clock = clock if clock is not None else time.perf_counter
        self._sync = sync if sync is not None else cuda_synchronizer(gpus)
        self.max_power_w = float(max_power_w)
        self._windows: dict[str, _Open] = {}
        self._idle_power_w: dict[int, float] = {}
        self._session = NVMLSession()
        try:
            self.devices: dict[int, NVMLDevice] = {g: self._session.device(g, env) for g in gpus}
            self.method = self._choose_method(method)
        except BaseException:
            self._session.close()
            raise
        self._sampler = PowerSampler(self._read_power_w, clock=self._clock, interval_s=power_interval_s)
        self.counter_probe: CounterProbe | None = None  # set by probe_counter
        log.info("measuring GPU(s) %s (%s) with %s", list(gpus), ", ".join(d.name for d in self.devices.values()), self.method)

    def _choose_method(self, requested: str) -> str:
        if requested == "nvml_power":
            return requested
        missing = [g for g, d in self.devices.items() if not d.has_energy_counter()]
        if not missing:
            return "nvml_energy"
        if requested == "nvml_energy":
            raise MeasurementError(f"GPU(s) {missing} have no total-energy counter (it needs Volta or newer); use method=nvml_power")
        log.warning("GPU(s) %s have no total-energy counter; integrating sampled power instead", missing)
        return "nvml_power"

    # -- reads ---------------------------------------------------------------------------------
    def _read_power_w(self) -> dict[int, float]:
        return {g: d.power_mw() / 1000.0 for g, d in self.devices.items()}

    def _read_counters_mj(self) -> dict[int, int]:
        return {g: d.total_energy_mj() for g, d in self.devices.items()}

    # -- windows -------------------------------------------------------------------------------
    def begin_window(self, name: str, sync: bool = True) -> None:
        """Open window ``name`` (after synchronising the GPUs unless ``sync=False``)."""
        if name in self._windows:
            raise WindowError(f"window {name!r} is already open")
        if sync:
            self._sync()
        if self.method == "nvml_energy":
            t0 = self._clock()
            self._windows[name] = _Open(t0, self._read_counters_mj())
        else:
            self._sampler.start()
            self._windows[name] = _Open(self._sampler.sample(), None)

    def end_window(self, name: str, sync: bool = True) -> Measurement:
        """Close window ``name`` and return what it measured."""
        opened = self._windows.pop(name, None)
        if opened is None:
            raise WindowError(f"window {name!r} was not begun (open: {', '.join(self._windows) or 'none'})")
        try:
            if sync:
                self._sync()
            if opened.counters_mj is not None:
                t1 = self._clock()
                end = self._read_counters_mj()
                elapsed = t1 - opened.t0
                energy = {g: counter_delta_mj(opened.counters_mj[g], end[g], elapsed, g, self.max_power_w) / 1000.0
                          for g in self.gpus}
            else:
                t1 = self._sampler.sample()
                elapsed = t1 - opened.t0
                energy = self._sampler.energy_j(opened.t0, t1)
        finally:
            self._after_window()
        return Measurement(
            name=name, elapsed_s=elapsed, energy_j=energy, method=self.method, idle_power_w=dict(self._idle_power_w),
            sm_clock_mhz={g: d.sm_clock_mhz() for g, d in self.devices.items()},
            mem_clock_mhz={g: d.mem_clock_mhz() for g, d in self.devices.items()},
            temperature_c={g: d.temperature_c() for g, d in self.devices.items()},
        )

    def cancel_window(self, name: str) -> None:
        """Forget window ``name`` without measuring (after a failure inside it); no-op if not open."""
        if self._windows.pop(name, None) is not None:
            self._after_window()

    def _after_window(self) -> None:
        if self.method != "nvml_power":
            return
        if self._windows:
            self._sampler.discard_before(min(w.t0 for w in self._windows.values()))
        else:
            self._sampler.stop()
            self._sampler.discard_before(float("inf"))

    @property
    def sampler(self) -> PowerSampler:
        """The power sampler of the ``nvml_power`` method."""
        return self._sampler

    # -- energy counter ------------------------------------------------------------------------
    def read_counters_mj(self) -> dict[int, int]:
        """The energy counter of every GPU (mJ), without synchronising."""
        return self._read_counters_mj()

    @property
    def clock(self) -> Callable[[], float]:
        """The meter's monotonic clock (seconds)."""
        return self._clock

    def probe_counter(self, load: Callable[[], None] | None = None, duration_s: float = 2.0) -> CounterProbe | None:
        """Update period and increment of the energy counter under ``load`` (see
        :func:`llmco2.measure.windows.probe_counter`); kept as :attr:`counter_probe` and returned.
        ``None`` with the power-sampling method (there is no counter to probe)."""
        if self.method != "nvml_energy":
            return None
        self._sync()
        try:
            self.counter_probe = probe_counter(self._read_counters_mj, self._clock, load, duration_s)
        finally:
            self._sync()
        return self.counter_probe

    def power_limits_w(self) -> dict[int, float | None]:
        """Enforced power limit per GPU in watts (``None`` where NVML does not report it)."""
        return {g: d.power_limit_w() for g, d in self.devices.items()}

    # -- idle power ----------------------------------------------------------------------------
    @property
    def idle_power_w(self) -> dict[int, float]:
        """Idle power per GPU in watts (empty until measured or set)."""
        return dict(self._idle_power_w)

    @idle_power_w.setter
    def idle_power_w(self, value: Mapping[int, float]) -> None:
        self._idle_power_w = {int(g): float(p) for g, p in value.items()}

    def measure_idle_power(self, duration_s: float = 5.0, sleep: Callable[[float], None] | None = None) -> dict[int, float]:
        """Measure each GPU's idle power (W) over ``duration_s`` seconds of doing nothing.

        Call it before a sweep, with no other work on the GPUs; later measurements carry it.
        """
        if duration_s <= 0:
            raise InvalidInputError(f"must be > 0 seconds, got {duration_s}", field="idle_s")
        self.begin_window("__idle__")
        try:
            (sleep or time.sleep)(duration_s)
        except BaseException:
            self.cancel_window("__idle__")
            raise
        m = self.end_window("__idle__")
        if m.elapsed_s <= 0:
            raise MeasurementError(f"idle window lasted {m.elapsed_s} s; the clock did not advance")
        self._idle_power_w = {g: e / m.elapsed_s for g, e in m.energy_j.items()}
        log.info("idle power: %s", ", ".join(f"GPU {g} {p:.1f} W" for g, p in self._idle_power_w.items()))
        return dict(self._idle_power_w)

    # -- description ---------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Method, driver and GPU names (for the run log)."""
        return {
            "method": self.method,
            "driver_version": self._session.driver_version(),
            "cuda_driver_version": self._session.cuda_driver_version(),
            "gpus": {str(g): {"name": d.name, "uuid": d.uuid} for g, d in self.devices.items()},
            "idle_power_w": {str(g): p for g, p in self._idle_power_w.items()},
            "power_limit_w": {str(g): p for g, p in self.power_limits_w().items()},
            "counter_probe": None if self.counter_probe is None else self.counter_probe.to_dict(),
        }

    def close(self) -> None:
        """Stop sampling and shut NVML down."""
        self._sampler.stop()
        self._session.close()

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
