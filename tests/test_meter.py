"""The NVML energy meter without a GPU: fake bindings injected where the meter imports them,
counters driven by ``itertools.count``, the clock patched."""

from __future__ import annotations

import inspect
import itertools
import logging
import sys
import threading
import time
from unittest import mock

import pytest

from llmco2.errors import InvalidInputError
from llmco2.measure import nvml
from llmco2.measure.errors import (
    CounterWrapError,
    MeasurementError,
    NoGPUError,
    NVMLCallError,
    NVMLGPULostError,
    NVMLNoPermissionError,
    NVMLNotSupportedError,
    NVMLTimeoutError,
    NVMLUninitializedError,
    NVMLUnknownError,
    WindowError,
)
from llmco2.measure.meter import COUNTER_MODULUS, EnergyMeter, Measurement, counter_delta_mj, cuda_synchronizer
from llmco2.measure.power import PowerSampler, integrate_power
from llmco2.measure.testing import FakeNVML


@pytest.fixture
def fake_nvml():
    """Install a FakeNVML where the meter looks for ``pynvml``; returns a factory."""
    patches = []

    def install(**kwargs) -> FakeNVML:
        fake = FakeNVML(**kwargs)
        p = mock.patch("llmco2.measure.nvml.pynvml", fake)
        p.start()
        patches.append(p)
        return fake

    yield install
    for p in reversed(patches):
        p.stop()


def ticks(start: float = 0.0, step: float = 1.0):
    """A fake clock: start, start + step, ... one value per call."""
    return itertools.count(start, step).__next__


# -- no GPU ----------------------------------------------------------------------------------------
def test_no_driver_is_one_typed_line(fake_nvml) -> None:
    fake_nvml(init_error=FakeNVML.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(NoGPUError) as info:
        EnergyMeter([0])
    assert isinstance(info.value, InvalidInputError)  # -> exit code 2 on the command line
    text = str(info.value)
    assert "\n" not in text and "no NVIDIA GPU" in text and "Library Not Found" in text


def test_missing_bindings_say_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(nvml, "pynvml", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(NoGPUError, match=r"llmco2\[measure\]"):
        EnergyMeter([0])


def test_no_device_and_unknown_index(fake_nvml) -> None:
    fake_nvml(energy_mj=[], names=[])
    with pytest.raises(NoGPUError, match="found no GPU"):
        EnergyMeter([0])
    fake = fake_nvml(energy_mj=[itertools.count()])
    with pytest.raises(InvalidInputError, match="GPU 3 does not exist") as info:
        EnergyMeter([3])
    assert info.value.field == "gpus"
    assert fake.initialised == 0  # NVML shut down again after the failure


def test_this_machine_without_gpu_raises_no_gpu_error() -> None:
    """With the real bindings: on a machine without an NVIDIA driver, one typed line."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with mock.patch.object(nvml, "pynvml", pynvml), pytest.raises(NoGPUError):
            EnergyMeter([0])
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; tests/gpu covers it")


# -- energy counter ----------------------------------------------------------------------------------
def test_two_gpus_energy_counter_and_sync(fake_nvml) -> None:
    fake = fake_nvml(energy_mj=[itertools.count(1_000_000, 50_000), itertools.count(7, 20_000)])
    syncs: list[float] = []
    meter = EnergyMeter([0, 1], sync=lambda: syncs.append(1), clock=ticks(10.0, 0.25))
    assert meter.method == "nvml_energy"
    meter.begin_window("prefill")
    m = meter.end_window("prefill")
    assert m.name == "prefill" and m.method == "nvml_energy"
    assert m.elapsed_s == pytest.approx(0.25)
    assert m.energy_j == {0: pytest.approx(50.0), 1: pytest.approx(20.0)}
    assert m.total_energy_j == pytest.approx(70.0)
    assert m.idle_power_w == {} and m.energy_above_idle_j is None
    assert m.sm_clock_mhz == {0: 1980, 1: 1980} and m.mem_clock_mhz == {0: 2619, 1: 2619}
    assert m.temperature_c == {0: 40, 1: 41}
    assert len(syncs) == 2  # before the read at each end of the window
    meter.close()
    assert fake.initialised == 0 and fake.calls["nvmlShutdown"] == 1


def test_overlapping_windows_and_subset(fake_nvml) -> None:
    fake_nvml(energy_mj=[itertools.count(0, 1000), itertools.count(0, 3000)])
    with EnergyMeter([0, 1], sync=lambda: None, clock=ticks()) as meter:
        meter.begin_window("request")   # reads 1 J / 3 J steps per read
        meter.begin_window("decode")
        inner = meter.end_window("decode")
        outer = meter.end_window("request")
    assert inner.energy_j == {0: 1.0, 1: 3.0}
    assert outer.energy_j == {0: 3.0, 1: 9.0}
    assert outer.elapsed_s == 3.0 and inner.elapsed_s == 1.0
    sub = outer.subset([1])
    assert sub.energy_j == {1: 9.0} and sub.total_energy_j == 9.0 and sub.temperature_c == {1: 41}
    with pytest.raises(InvalidInputError):
        outer.subset([2])
    assert set(outer.to_dict()) >= {"name", "elapsed_s", "energy_j", "total_energy_j", "energy_above_idle_j", "method"}


def test_window_misuse(fake_nvml) -> None:
    fake_nvml()
    with EnergyMeter([0], sync=lambda: None, clock=ticks()) as meter:
        meter.begin_window("a")
        with pytest.raises(WindowError, match="already open"):
            meter.begin_window("a")
        with pytest.raises(WindowError, match="was not begun"):
            meter.end_window("b")
        meter.cancel_window("a")
        meter.cancel_window("a")  # no-op
        with pytest.raises(WindowError):
            meter.end_window("a")


def test_cuda_visible_devices_maps_to_nvml_indices(fake_nvml) -> None:
    fake_nvml(energy_mj=[itertools.count(0, 1000), itertools.count(0, 5000)], names=["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"])
    with EnergyMeter([0], sync=lambda: None, clock=ticks(), env={"CUDA_VISIBLE_DEVICES": "1"}) as meter:
        assert meter.devices[0].name == "NVIDIA H100 80GB HBM3"
        meter.begin_window("w")
        assert meter.end_window("w").energy_j == {0: 5.0}  # CUDA 0 is NVML 1
    assert nvml.nvml_target(1, {"CUDA_VISIBLE_DEVICES": "3,2"}) == 2
    assert nvml.nvml_target(0, {"CUDA_VISIBLE_DEVICES": "GPU-fake-1,0"}) == "GPU-fake-1"
    assert nvml.nvml_target(2, {}) == 2
    with pytest.raises(NoGPUError, match="hides every GPU"):
        nvml.nvml_target(0, {"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(NoGPUError, match="MIG"):
        nvml.nvml_target(0, {"CUDA_VISIBLE_DEVICES": "MIG-abc"})
    with pytest.raises(InvalidInputError, match="not visible"):
        nvml.nvml_target(2, {"CUDA_VISIBLE_DEVICES": "0,1,-1,3"})


def test_uuid_in_cuda_visible_devices(fake_nvml) -> None:
    fake_nvml(energy_mj=[itertools.count(0, 1000), itertools.count(0, 2000)])
    with EnergyMeter([0], sync=lambda: None, clock=ticks(), env={"CUDA_VISIBLE_DEVICES": "GPU-fake-1"}) as meter:
        meter.begin_window("w")
        assert meter.end_window("w").energy_j == {0: 2.0}


def test_describe_reports_driver_and_names(fake_nvml) -> None:
    fake_nvml(energy_mj=[itertools.count()])
    with EnergyMeter([0], sync=lambda: None) as meter:
        d = meter.describe()
    assert d["driver_version"] == "550.54.15" and d["cuda_driver_version"] == "12.4"
    assert d["gpus"] == {"0": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-fake-0"}} and d["method"] == "nvml_energy"


# -- wrap-around ---------------------------------------------------------------------------------
def test_counter_wrap_is_counted_modulo_2_64(fake_nvml, caplog) -> None:
    fake_nvml(energy_mj=[iter([0, COUNTER_MODULUS - 3000, 2000])])  # first read: the support probe
    with EnergyMeter([0], sync=lambda: None, clock=ticks()) as meter, caplog.at_level(logging.WARNING):
        meter.begin_window("w")
        m = meter.end_window("w")
    assert m.energy_j == {0: pytest.approx(5.0)}
    assert "wrapped" in caplog.text


def test_counter_reset_raises_typed_error(fake_nvml) -> None:
    fake_nvml(energy_mj=[iter([0, 9_000_000_000, 1_500])])
    with EnergyMeter([0], sync=lambda: None, clock=ticks()) as meter:
        meter.begin_window("decode")
        with pytest.raises(CounterWrapError) as info:
            meter.end_window("decode")
    err = info.value
    assert (err.gpu, err.begin_mj, err.end_mj) == (0, 9_000_000_000, 1_500)
    assert "went backwards" in str(err) and isinstance(err, MeasurementError)


def test_counter_delta_plausibility_bound() -> None:
    assert counter_delta_mj(5, 5, 1.0, 0, 1000.0) == 0
    assert counter_delta_mj(10, 25, 1.0, 0, 1000.0) == 15
    # 1 kW for 1 s + 1 s slack = 2,000,000 mJ is the most a wrap may explain
    assert counter_delta_mj(COUNTER_MODULUS - 1_000_000, 1_000_000, 1.0, 0, 1000.0) == 2_000_000
    with pytest.raises(CounterWrapError):
        counter_delta_mj(COUNTER_MODULUS - 1_000_000, 1_000_001, 1.0, 0, 1000.0)


# -- NVML errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("code", "cls"), [
    (FakeNVML.NVML_ERROR_GPU_IS_LOST, NVMLGPULostError),
    (FakeNVML.NVML_ERROR_RESET_REQUIRED, NVMLGPULostError),
    (FakeNVML.NVML_ERROR_NO_PERMISSION, NVMLNoPermissionError),
    (FakeNVML.NVML_ERROR_UNINITIALIZED, NVMLUninitializedError),
    (FakeNVML.NVML_ERROR_TIMEOUT, NVMLTimeoutError),
    (FakeNVML.NVML_ERROR_NOT_SUPPORTED, NVMLNotSupportedError),
    (FakeNVML.NVML_ERROR_UNKNOWN, NVMLUnknownError),
    (42, NVMLUnknownError),
])
def test_nvml_errors_become_typed_errors(fake_nvml, code, cls) -> None:
    fake = fake_nvml(energy_mj=[itertools.count(), itertools.count()])
    with EnergyMeter([0, 1], sync=lambda: None, clock=ticks()) as meter:
        meter.begin_window("prefill")
        fake.fail["nvmlDeviceGetTotalEnergyConsumption"] = code
        with pytest.raises(cls) as info:
            meter.end_window("prefill")
    err = info.value
    assert isinstance(err, NVMLCallError) and isinstance(err, MeasurementError)
    assert (err.code, err.function, err.gpu) == (code, "nvmlDeviceGetTotalEnergyConsumption", 0)
    assert "nvmlDeviceGetTotalEnergyConsumption on GPU 0 failed" in str(err)
    assert isinstance(err.__cause__, FakeNVML.NVMLError)


def test_error_while_probing_closes_nvml(fake_nvml) -> None:
    fake = fake_nvml(energy_mj=[itertools.count()], fail={"nvmlDeviceGetTotalEnergyConsumption": FakeNVML.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(NVMLGPULostError):
        EnergyMeter([0])
    assert fake.initialised == 0


def test_unreported_clocks_are_none(fake_nvml) -> None:
    fake = fake_nvml(energy_mj=[itertools.count(0, 1000)],
                     fail={"nvmlDeviceGetClockInfo": FakeNVML.NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceGetTemperature": FakeNVML.NVML_ERROR_NO_PERMISSION})
    with EnergyMeter([0], sync=lambda: None, clock=ticks()) as meter:
        meter.begin_window("w")
        m = meter.end_window("w")
    assert m.energy_j == {0: 1.0} and m.sm_clock_mhz == {0: None} and m.temperature_c == {0: None}
    assert fake.calls["nvmlDeviceGetClockInfo"] == 2


# -- power-sampling fallback -------------------------------------------------------------------------
def test_fallback_integrates_sampled_power_with_fake_clock(fake_nvml, caplog) -> None:
    # no energy counter (pre-Volta): NOT_SUPPORTED; power rises 10 W per reading from 100 W
    fake = fake_nvml(energy_mj=[None], power_mw=[itertools.count(100_000, 10_000)])
    with caplog.at_level(logging.WARNING):
        meter = EnergyMeter([0], sync=lambda: None, clock=ticks(0.0, 1.0), power_interval_s=None)
    assert meter.method == "nvml_power" and "no total-energy counter" in caplog.text
    meter.begin_window("decode")        # t=0, 100 W
    meter.sampler.sample()              # t=1, 110 W  (what the background thread does)
    meter.sampler.sample()              # t=2, 120 W
    m = meter.end_window("decode")      # t=3, 130 W
    assert m.method == "nvml_power" and m.elapsed_s == 3.0
    assert m.energy_j[0] == pytest.approx(105 + 115 + 125)  # trapezoids
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # only the probe
    meter.begin_window("short")         # t=4, 140 W: a window with no sample inside
    m2 = meter.end_window("short")      # t=5, 150 W
    assert m2.energy_j[0] == pytest.approx(145.0)
    meter.close()


def test_mixed_gpus_fall_back_for_all_and_forced_counter_fails(fake_nvml) -> None:
    fake_nvml(energy_mj=[itertools.count(), None], power_mw=[itertools.repeat(200_000), itertools.repeat(50_000)])
    with EnergyMeter([0, 1], sync=lambda: None, clock=ticks(), power_interval_s=None) as meter:
        assert meter.method == "nvml_power"
        meter.begin_window("w")
        assert meter.end_window("w").energy_j == {0: pytest.approx(200.0), 1: pytest.approx(50.0)}
    with pytest.raises(MeasurementError, match="no total-energy counter"):
        EnergyMeter([0, 1], method="nvml_energy")


def test_forced_power_method_on_counter_gpu(fake_nvml) -> None:
    fake = fake_nvml(energy_mj=[itertools.count()], power_mw=[itertools.repeat(300_000)])
    with EnergyMeter([0], method="nvml_power", sync=lambda: None, clock=ticks(0, 0.5), power_interval_s=None) as meter:
        meter.begin_window("w")
        assert meter.end_window("w").energy_j == {0: pytest.approx(150.0)}
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 0


def test_background_sampler_thread(fake_nvml) -> None:
    fake_nvml(energy_mj=[None], power_mw=[itertools.repeat(50_000)])
    with EnergyMeter([0], sync=lambda: None, power_interval_s=0.005) as meter:
        meter.begin_window("w")
        assert meter.sampler.running
        time.sleep(0.06)
        m = meter.end_window("w")
        assert not meter.sampler.running  # stops when no window is open
    assert m.energy_j[0] == pytest.approx(50.0 * m.elapsed_s)
    assert not [t for t in threading.enumerate() if t.name == "llmco2-power-sampler"]


def test_sampler_thread_errors_surface_at_window_end() -> None:
    calls = itertools.count()

    def read() -> dict[int, float]:
        if next(calls) >= 2:
            raise NVMLGPULostError("NVML nvmlDeviceGetPowerUsage on GPU 0 failed: GPU is lost", code=15, gpu=0)
        return {0: 10.0}

    sampler = PowerSampler(read, interval_s=0.001)
    t0 = sampler.sample()
    sampler.start()
    time.sleep(0.05)
    sampler.stop()
    with pytest.raises(NVMLGPULostError):
        sampler.energy_j(t0, t0 + 1)


def test_integrate_power() -> None:
    assert integrate_power([0.0, 2.0], [100.0, 100.0], 0.0, 2.0) == pytest.approx(200.0)
    # a linear ramp is integrated exactly, wherever the samples fall
    assert integrate_power([0.0, 0.3, 1.7, 4.0], [0.0, 3.0, 17.0, 40.0], 1.0, 3.0) == pytest.approx(40.0)
    # window inside one sample interval: interpolated ends
    assert integrate_power([0.0, 10.0], [0.0, 100.0], 4.0, 6.0) == pytest.approx(100.0)
    # held constant before the first and after the last sample
    assert integrate_power([1.0, 2.0], [10.0, 20.0], 0.0, 3.0) == pytest.approx(10 + 15 + 20)
    assert integrate_power([5.0], [7.0], 0.0, 2.0) == pytest.approx(14.0)
    assert integrate_power([2.0, 0.0], [20.0, 0.0], 0.0, 2.0) == pytest.approx(20.0)  # unsorted input
    with pytest.raises(MeasurementError):
        integrate_power([], [], 0.0, 1.0)
    with pytest.raises(ValueError):
        integrate_power([0.0], [1.0], 2.0, 1.0)


def test_sampler_discards_old_samples() -> None:
    sampler = PowerSampler(lambda: {0: 1.0}, clock=ticks(), interval_s=None)
    for _ in range(5):
        sampler.sample()
    sampler.discard_before(2.5)   # keeps the sample at t=2 (the window edge) and later ones
    assert sampler.energy_j(2.0, 4.0) == {0: pytest.approx(2.0)}
    with pytest.raises(ValueError):
        PowerSampler(lambda: {}, interval_s=0)


# -- idle power ----------------------------------------------------------------------------------------
def test_idle_power_with_patched_time(fake_nvml) -> None:
    fake_nvml(energy_mj=[itertools.count(0, 30_000), itertools.count(0, 60_000)])  # 30 J / 60 J per read
    fake_time = mock.Mock()
    fake_time.perf_counter.side_effect = ticks(100.0, 2.0)
    with mock.patch("llmco2.measure.meter.time", fake_time):
        meter = EnergyMeter([0, 1], sync=lambda: None)
        idle = meter.measure_idle_power(duration_s=2.0)
        fake_time.sleep.assert_called_once_with(2.0)
        assert idle == {0: pytest.approx(15.0), 1: pytest.approx(30.0)}
        assert meter.idle_power_w == idle
        meter.begin_window("prefill")
        m = meter.end_window("prefill")
    assert m.idle_power_w == idle
    assert m.idle_energy_j == pytest.approx((15 + 30) * 2.0)
    assert m.energy_above_idle_j == pytest.approx(90.0 - 90.0)
    meter.idle_power_w = {0: 5, 1: 5}
    assert meter.idle_power_w == {0: 5.0, 1: 5.0}
    with pytest.raises(InvalidInputError):
        meter.measure_idle_power(0)
    meter.close()


def test_idle_window_is_cancelled_when_interrupted(fake_nvml) -> None:
    fake_nvml()
    with EnergyMeter([0], sync=lambda: None, clock=ticks()) as meter:
        def interrupted(_: float) -> None:
            raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            meter.measure_idle_power(1.0, sleep=interrupted)
        meter.begin_window("__idle__")  # the name is free again


def test_measurement_energy_above_idle() -> None:
    m = Measurement("w", 2.0, {0: 300.0, 1: 100.0}, "nvml_energy", idle_power_w={0: 50.0, 1: 20.0})
    assert m.energy_above_idle_j == pytest.approx(400.0 - 140.0)
    assert Measurement("w", 2.0, {0: 1.0}, "nvml_energy", idle_power_w={1: 5.0}).energy_above_idle_j is None


# -- sync and the real bindings' API ----------------------------------------------------------------
def test_default_sync_is_harmless_without_cuda(fake_nvml) -> None:
    cuda_synchronizer([0, 1])()  # torch on CPU: nothing to wait for
    fake_nvml(energy_mj=[itertools.count()])
    with EnergyMeter([0]) as meter:  # default sync
        meter.begin_window("w")
        meter.end_window("w")


def test_meter_against_autospecced_real_bindings(monkeypatch) -> None:
    """The real ``pynvml`` with its functions replaced by autospecced mocks: every call the meter
    makes must fit the real signatures."""
    pynvml = pytest.importorskip("pynvml")
    monkeypatch.setattr(nvml, "pynvml", pynvml)
    energy = itertools.count(5_000_000, 40_000)
    names = ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName",
             "nvmlDeviceGetUUID", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature",
             "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetEnforcedPowerLimit")
    with mock.patch.multiple(pynvml, autospec=True, **{n: mock.DEFAULT for n in names}) as m:
        m["nvmlDeviceGetCount"].return_value = 1
        m["nvmlDeviceGetHandleByIndex"].side_effect = lambda i: f"handle{i}"
        m["nvmlDeviceGetName"].return_value = "NVIDIA H100 80GB HBM3"
        m["nvmlDeviceGetUUID"].return_value = "GPU-1234"
        m["nvmlDeviceGetTotalEnergyConsumption"].side_effect = lambda h: next(energy)
        m["nvmlDeviceGetClockInfo"].return_value = 1755
        m["nvmlDeviceGetTemperature"].return_value = 51
        m["nvmlSystemGetDriverVersion"].return_value = "560.35.03"
        m["nvmlSystemGetCudaDriverVersion"].return_value = 12060
        m["nvmlDeviceGetEnforcedPowerLimit"].return_value = 700_000
        with EnergyMeter([0], sync=lambda: None, clock=ticks(0, 0.1), env={}) as meter:
            meter.begin_window("w")
            result = meter.end_window("w")
            assert meter.describe()["cuda_driver_version"] == "12.6"
            assert meter.describe()["power_limit_w"] == {"0": 700.0} and meter.power_limits_w() == {0: 700.0}
        m["nvmlDeviceGetEnforcedPowerLimit"].assert_called_with("handle0")
        m["nvmlDeviceGetClockInfo"].assert_any_call("handle0", pynvml.NVML_CLOCK_SM)
        m["nvmlDeviceGetTemperature"].assert_called_with("handle0", pynvml.NVML_TEMPERATURE_GPU)
        m["nvmlShutdown"].assert_called_once_with()
        # a real NVMLError raised by a patched call becomes a typed error
        m["nvmlDeviceGetTotalEnergyConsumption"].side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with EnergyMeter([0], sync=lambda: None, env={}, power_interval_s=None) as meter2:
            assert meter2.method == "nvml_power"
    assert result.energy_j == {0: pytest.approx(40.0)} and result.sm_clock_mhz == {0: 1755}


def test_fake_bindings_match_the_real_signatures() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name in dir(FakeNVML):
        if name.startswith("nvml"):
            real = inspect.signature(getattr(pynvml, name))
            fake = inspect.signature(getattr(FakeNVML(), name))
            assert len(real.parameters) == len(fake.parameters), name
        elif name.startswith("NVML_"):
            assert getattr(pynvml, name) == getattr(FakeNVML, name), name
