"""On a real NVIDIA GPU: the meter reads energy, the runner measures a small model end to end.

Skipped unless torch sees CUDA and the NVML bindings (``nvidia-ml-py``) import. Run with
``pytest tests/gpu -m gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install 'llmco2[measure]')")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

from llmco2.data.schema import read_table  # noqa: E402
from llmco2.measure.meter import EnergyMeter  # noqa: E402
from llmco2.measure.runner import InferenceRunner  # noqa: E402
from llmco2.measure.sweep import SweepOptions, detect_device, run_sweep  # noqa: E402
from llmco2.specs import Request, get_model  # noqa: E402

pytestmark = pytest.mark.gpu

SMALL = dict(hidden_size=1024, intermediate_size=2816, num_layers=4, num_heads=16, num_kv_heads=4, head_dim=64)


@pytest.fixture(scope="module")
def meter():
    with EnergyMeter([0]) as m:
        yield m


def test_meter_reads_positive_energy_for_a_matmul_loop(meter) -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    meter.begin_window("matmul")
    for _ in range(300):
        c = a @ b
    m = meter.end_window("matmul")
    assert c.shape == (4096, 4096)
    assert m.method in ("nvml_energy", "nvml_power")
    assert m.elapsed_s > 0 and m.energy_j[0] > 0
    power = m.energy_j[0] / m.elapsed_s
    assert 1.0 < power < 2000.0, f"implausible average power {power:.1f} W"
    assert m.temperature_c[0] is None or 0 < m.temperature_c[0] < 110


def test_idle_power_is_plausible(meter) -> None:
    torch.cuda.synchronize()
    idle = meter.measure_idle_power(1.0)
    assert 1.0 < idle[0] < 1000.0
    d = meter.describe()
    assert d["driver_version"] and d["gpus"]["0"]["name"]


def test_counter_probe_under_load(meter) -> None:
    runner = InferenceRunner(meter, gpus=(0,))
    probe = meter.probe_counter(runner.counter_load(), 2.0)
    assert probe is not None, "the GPU has no energy counter (pre-Volta): nothing to probe"
    assert 0.001 < probe.period_s < 1.0 and probe.updates[0] >= 4
    assert 0 < probe.increment_j[0] < 2000.0 * probe.period_s  # at most 2 kW between updates


def test_runner_measures_a_small_model_end_to_end(meter) -> None:
    """A prefill of a few milliseconds: amortised over k passes, no repeat at 0 J, a bound under 2%."""
    arch = get_model("llama3.1-8b").with_overrides(**SMALL)
    runner = InferenceRunner(meter, gpus=(0,), repeats=3, warmup=1)
    if meter.counter_probe is None and meter.method == "nvml_energy":
        meter.probe_counter(runner.counter_load(), 2.0)
    result = runner.run(arch, Request(batch_size=8, prompt_tokens=512, generated_tokens=64, weight_dtype="fp16"))
    runner.release()
    assert result.decode is not None and result.decode_steps == 63 and result.tokens_generated == 64
    pre, dec = result.prefill, result.decode
    assert min(pre.energy_per_repeat_j) > 0 and min(dec.energy_per_repeat_j) > 0
    assert pre.window_method == "amortised" and pre.window_passes > 1 and pre.window_s >= 1.0
    assert pre.energy_std_j / pre.energy_j < 0.10
    if pre.quantisation_bound is not None:
        assert pre.quantisation_bound <= 0.02 and dec.quantisation_bound is not None
    assert pre.latency_s > 0 and dec.latency_s > pre.latency_s / 100
    assert result.weights == "random" and result.model_type == "llama" and result.engine == "hf"
    assert result.attention == "sdpa" and result.power_limit_w is not None and result.power_limit_w > 0
    assert runner.environment()["software"]["cuda"]


def test_static_decode_with_cuda_graphs(meter) -> None:
    arch = get_model("llama3.1-8b").with_overrides(**SMALL)
    runner = InferenceRunner(meter, gpus=(0,), repeats=2, warmup=2, decode_mode="static")
    result = runner.run(arch, Request(batch_size=4, prompt_tokens=256, generated_tokens=64, weight_dtype="bf16"))
    runner.release()
    assert result.engine == "hf-static" and result.decode is not None
    assert min(result.decode.energy_per_repeat_j) > 0 and min(result.prefill.energy_per_repeat_j) > 0


def test_power_sampling_agrees_with_the_counter() -> None:
    """The fallback (integrated power samples) against the energy counter over the same 8 s of matmuls."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    with EnergyMeter([0], method="nvml_energy") as counter, EnergyMeter([0], method="nvml_power", power_interval_s=0.01) as power:
        if counter.method != "nvml_energy":
            pytest.skip("no energy counter to compare with")
        for _ in range(20):  # warm up clocks and power
            a @ a
        torch.cuda.synchronize()
        counter.begin_window("load")
        power.begin_window("load")
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        while True:
            for _ in range(50):
                a @ a
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            if start.elapsed_time(end) > 8000.0:
                break
        by_power = power.end_window("load")
        by_counter = counter.end_window("load")
    assert by_counter.energy_j[0] > 0 and by_power.energy_j[0] > 0
    ratio = by_power.energy_j[0] / by_counter.energy_j[0]
    assert 0.85 < ratio < 1.15, f"power sampling {by_power.energy_j[0]:.0f} J vs counter {by_counter.energy_j[0]:.0f} J"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_runner_splits_a_model_over_two_gpus() -> None:
    pytest.importorskip("accelerate")
    with EnergyMeter([0, 1]) as two:
        arch = get_model("llama3.1-8b").with_overrides(**SMALL)
        runner = InferenceRunner(two, gpus=(0, 1), repeats=1, warmup=1)
        result = runner.run(arch, Request(batch_size=4, prompt_tokens=256, generated_tokens=32, num_gpus=2, weight_dtype="fp16"))
        runner.release()
    assert result.gpus == (0, 1) and result.prefill.energy_j > 0
    assert {v for v in result.device_map.values()} == {"cuda:0", "cuda:1"}


def test_sweep_end_to_end(tmp_path: Path) -> None:
    with EnergyMeter([0]) as probe:
        try:
            device = detect_device([probe.devices[0].name])
        except Exception:
            pytest.skip(f"{probe.devices[0].name} is not in the GPU catalog")
    configs = tmp_path / "configs.csv"
    cols = ",".join(SMALL)
    values = ",".join(str(v) for v in SMALL.values())
    configs.write_text(f"model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,dtype,{cols}\n"
                       f"llama3.1-8b,{device},1,4,256,32,fp16,{values}\n"
                       f"llama3.1-8b,{device},1,4,256,1,fp16,{values}\n")
    out = tmp_path / "gpu.csv"
    summary = run_sweep(SweepOptions(configs=configs, out=out, repeats=2, warmup=1, idle_s=1.0, progress=False))
    assert (summary["measured"], summary["failed"]) == (2, 0), summary
    table, report = read_table(out)
    assert report.bad_rows == 0 and list(table["phase"]) == ["prefill", "decode", "prefill"]
    assert (table["energy_j"] > 0).all() and set(table["engine"]) == {"hf"}
    assert table["window_method"].notna().all() and (table["window_s"] >= 1.0).all()
    log = [line for line in out.with_name("gpu.runs.jsonl").read_text().splitlines() if line]
    assert '"counter_probe"' in log[0]
