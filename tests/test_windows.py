"""Windows long enough for a coarse energy counter: the period probe, the window policy, amortised
prefill, lengthened decode and the quantisation bound, on a simulated GPU whose NVML counter
updates every 100 ms (25 J per update under load), as an H100's does in the same way."""

from __future__ import annotations

import itertools
import math
from unittest import mock

import pytest

from llmco2.errors import InvalidInputError
from llmco2.measure.errors import MeasurementError
from llmco2.measure.meter import EnergyMeter, Measurement
from llmco2.measure.runner import InferenceRunner
from llmco2.measure.testing import FakeNVML, SimulatedGPU, SimulatedModel, simulated_factory
from llmco2.measure.windows import (
    AMORTISED,
    LENGTHENED,
    SINGLE,
    CounterProbe,
    WindowPolicy,
    per_pass,
    probe_counter,
    quantisation_bound,
)
from llmco2.specs import Request, get_model

ARCH = get_model("qwen2-0.5b")


@pytest.fixture
def sim_meter():
    """An EnergyMeter over fake NVML bindings whose counter is a SimulatedGPU's (100 ms, 250 W busy)."""
    made = []

    def make(**gpu_kwargs) -> tuple[SimulatedGPU, EnergyMeter]:
        gpu = SimulatedGPU(**gpu_kwargs)
        patch = mock.patch("llmco2.measure.nvml.pynvml", FakeNVML(energy_mj=[gpu.counter()]))
        patch.start()
        meter = EnergyMeter((0,), clock=gpu.clock, sync=gpu.sync)
        made.append((patch, meter))
        return gpu, meter

    yield make
    for patch, meter in reversed(made):
        meter.close()
        patch.stop()


# -- the probe ---------------------------------------------------------------------------------------
def test_probe_finds_the_update_period_and_increment_under_load(sim_meter) -> None:
    gpu, meter = sim_meter()
    probe = meter.probe_counter(gpu.load(1e-3), duration_s=2.0)
    assert probe is meter.counter_probe
    assert probe.period_s == pytest.approx(0.1, rel=0.02)
    assert probe.increment_j[0] == pytest.approx(25.0, rel=0.02)  # 250 W x 100 ms
    assert probe.updates[0] >= 19 and probe.increment_for([0]) == probe.increment_j[0]
    assert meter.describe()["counter_probe"]["period_s"] == probe.period_s


def test_probe_of_a_counter_that_never_moves_is_an_error() -> None:
    clock = itertools.count(0.0, 0.01)
    with pytest.raises(MeasurementError, match="changed 0 times"):
        probe_counter(lambda: {0: 5000}, lambda: next(clock), None, duration_s=1.0)
    with pytest.raises(InvalidInputError):
        probe_counter(lambda: {0: 0}, lambda: 0.0, None, duration_s=0)


def test_power_method_has_nothing_to_probe(fake_nvml_power) -> None:
    meter = fake_nvml_power
    assert meter.method == "nvml_power" and meter.probe_counter(lambda: None, 1.0) is None


@pytest.fixture
def fake_nvml_power():
    with mock.patch("llmco2.measure.nvml.pynvml", FakeNVML(energy_mj=[None])):
        meter = EnergyMeter((0,), power_interval_s=None, sync=lambda: None)
        yield meter
        meter.close()


# -- the policy --------------------------------------------------------------------------------------
def test_policy_sizes_windows_in_time_and_energy() -> None:
    policy = WindowPolicy()  # 1 s, 20 periods, 1.5% target
    probe = CounterProbe(period_s=0.1, increment_j={0: 25.0, 1: 20.0})
    assert policy.minimum_s(None) == 1.0 and policy.minimum_s(probe) == pytest.approx(2.0)
    assert probe.increment_for([0, 1]) == 45.0 and probe.increment_for([1]) == 20.0
    assert policy.passes(0.040, 2.0) == 50  # time only: 50 x 40 ms = 2 s
    # energy: one 25 J increment is at most 1.5% of k x 10 J -> k >= 166.7
    assert policy.passes(0.040, 2.0, increment_j=25.0, pass_energy_j=10.0) == 167
    assert policy.passes(3.0, 2.0) == 1 and policy.passes(3.0, 2.0, 25.0, 2000.0) == 1  # long enough already
    assert WindowPolicy(max_passes=100).passes(0.040, 2.0, 25.0, 10.0) == 100  # capped
    assert WindowPolicy.single_pass().passes(0.001, WindowPolicy.single_pass().minimum_s(probe), 25.0, 0.1) == 1
    with pytest.raises(InvalidInputError):
        WindowPolicy(flag_bound=2.0)
    with pytest.raises(InvalidInputError):
        WindowPolicy(min_window_s=-1)


def test_per_pass_and_quantisation_bound() -> None:
    window = Measurement("decode", elapsed_s=2.0, energy_j={0: 500.0, 1: 300.0}, method="nvml_energy")
    prefill = Measurement("prefill", elapsed_s=0.01, energy_j={0: 2.0, 1: 1.0}, method="nvml_energy")
    out = per_pass(window, 50, minus=[prefill])
    assert out.energy_j == {0: pytest.approx(8.0), 1: pytest.approx(5.0)} and out.elapsed_s == pytest.approx(0.03)
    assert per_pass(window, 4).energy_j == {0: 125.0, 1: 75.0}
    assert quantisation_bound(25.0, 50, 10.0) == pytest.approx(0.05)
    assert quantisation_bound(25.0, 50, 10.0, extra_j=0.1) == pytest.approx(0.06)
    assert quantisation_bound(None, 50, 10.0) is None and quantisation_bound(25.0, 1, 0.0) == math.inf


# -- runner on the simulated GPU ----------------------------------------------------------------------
def sim_runner(meter, model, policy=None, repeats=3) -> InferenceRunner:
    return InferenceRunner(meter, device="cpu", model_factory=simulated_factory(model), repeats=repeats, warmup=1,
                           policy=policy, clock=meter.clock)


def test_single_pass_windows_read_zero_or_a_whole_increment(sim_meter) -> None:
    """The method before amortised windows: a 40 ms prefill in a window of its own."""
    gpu, meter = sim_meter()
    meter.probe_counter(gpu.load(), 2.0)
    model = SimulatedModel(gpu)
    runner = sim_runner(meter, model, WindowPolicy.single_pass(), repeats=6)
    request = Request(batch_size=1, prompt_tokens=512, generated_tokens=1)
    truth = model.prefill_truth_j(1, 512)  # 10 J
    try:
        result = runner.run(ARCH, request)
    except MeasurementError as exc:  # every repeat read 0 J
        assert "prefill measured 0" in str(exc)
        return
    readings = result.prefill.energy_per_repeat_j
    assert all(r == 0 or r == pytest.approx(25.0, abs=1.0) for r in readings)
    assert abs(result.prefill.energy_j - truth) > 0.02 * truth
    assert result.prefill.quantisation_bound > 1.0  # one 25 J increment over a 10 J pass


@pytest.mark.parametrize("batch, prompt", [(1, 512), (4, 300), (8, 64)])
def test_amortised_prefill_is_within_two_percent_of_the_truth(sim_meter, batch, prompt) -> None:
    gpu, meter = sim_meter()
    meter.probe_counter(gpu.load(), 2.0)
    model = SimulatedModel(gpu)
    result = sim_runner(meter, model).run(ARCH, Request(batch_size=batch, prompt_tokens=prompt, generated_tokens=1))
    truth = model.prefill_truth_j(batch, prompt)
    pre = result.prefill
    assert pre.window_method == AMORTISED and pre.window_passes > 1
    assert pre.window_s >= 2.0  # at least 20 update periods
    assert pre.energy_j == pytest.approx(truth, rel=0.02)
    assert all(e == pytest.approx(truth, rel=0.02) for e in pre.energy_per_repeat_j)
    assert pre.latency_s == pytest.approx(model.prefill_s_per_token * batch * prompt, rel=0.02)
    assert pre.quantisation_bound <= 0.02 and pre.quantisation_bound == pytest.approx(25.0 / (pre.window_passes * pre.energy_j), rel=0.05)
    # k prefill passes per window, each over the whole prompt with a fresh cache
    assert all(c == ("prefill", prompt) for c in model.calls)


def test_short_decode_is_lengthened_and_the_prefill_subtracted(sim_meter) -> None:
    gpu, meter = sim_meter()
    meter.probe_counter(gpu.load(), 2.0)
    model = SimulatedModel(gpu)
    request = Request(batch_size=2, prompt_tokens=256, generated_tokens=5)  # 4 decode steps: 40 ms, 10 J
    result = sim_runner(meter, model).run(ARCH, request)
    dec = result.decode
    assert dec is not None and dec.window_method == LENGTHENED and dec.window_passes > 1
    assert dec.energy_j == pytest.approx(model.decode_truth_j(4), rel=0.02)
    assert dec.latency_s == pytest.approx(4 * model.decode_step_s, rel=0.05)
    assert result.prefill.energy_j == pytest.approx(model.prefill_truth_j(2, 256), rel=0.02)
    # the decode bound adds the subtracted prefill's own bound
    k_pre, k_dec = result.prefill.window_passes, dec.window_passes
    assert dec.quantisation_bound == pytest.approx((25.0 / k_dec + 25.0 / k_pre) / dec.energy_j, rel=0.05)


def test_long_decode_is_one_window(sim_meter) -> None:
    gpu, meter = sim_meter()
    meter.probe_counter(gpu.load(), 2.0)
    model = SimulatedModel(gpu, decode_step_s=0.05)
    request = Request(batch_size=1, prompt_tokens=512, generated_tokens=201)  # 200 steps: 10 s, 2500 J
    result = sim_runner(meter, model, repeats=2).run(ARCH, request)
    assert result.decode.window_method == SINGLE and result.decode.window_passes == 1
    assert result.decode.energy_j == pytest.approx(model.decode_truth_j(200), rel=0.02)
    assert result.decode.quantisation_bound == pytest.approx(25.0 / result.decode.energy_j, rel=0.05)


def test_capped_windows_report_a_bound_above_two_percent(sim_meter) -> None:
    gpu, meter = sim_meter()
    meter.probe_counter(gpu.load(), 2.0)
    model = SimulatedModel(gpu)
    policy = WindowPolicy(max_passes=20)
    result = sim_runner(meter, model, policy).run(ARCH, Request(batch_size=1, prompt_tokens=512, generated_tokens=1))
    assert result.prefill.window_passes == 20
    assert result.prefill.quantisation_bound > 0.02  # 25 J / (20 x 10 J) = 12.5%


def test_without_a_probe_windows_are_sized_in_time_only(sim_meter) -> None:
    gpu, meter = sim_meter()
    model = SimulatedModel(gpu)
    result = sim_runner(meter, model, WindowPolicy(min_window_s=3.0)).run(ARCH, Request(batch_size=1, prompt_tokens=512,
                                                                                        generated_tokens=1))
    assert result.prefill.window_passes == 75 and result.prefill.quantisation_bound is None  # 3 s / 40 ms
    assert result.prefill.window_s == pytest.approx(3.0, rel=0.02)
