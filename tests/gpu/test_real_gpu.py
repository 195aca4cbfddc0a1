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


def test_runner_measures_a_small_model_end_to_end(meter) -> None:
    arch = get_model("llama3.1-8b").with_overrides(**SMALL)
    runner = InferenceRunner(meter, gpus=(0,), repeats=2, warmup=1)
    result = runner.run(arch, Request(batch_size=8, prompt_tokens=512, generated_tokens=64, weight_dtype="fp16"))
    runner.release()
    assert result.decode is not None and result.decode_steps == 63 and result.tokens_generated == 64
    assert result.prefill.energy_j > 0 and result.decode.energy_j > 0
    assert result.prefill.latency_s > 0 and result.decode.latency_s > result.prefill.latency_s / 100
    assert result.weights == "random" and result.model_type == "llama"
    assert runner.environment()["software"]["cuda"]


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
    assert (table["energy_j"] > 0).all()
