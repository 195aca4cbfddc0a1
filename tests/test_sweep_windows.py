"""Sweeps with amortised windows on a simulated GPU (energy counter updated every 100 ms): the
probe goes into the run log, rows carry the window columns and the quantisation flag, an
interrupted sweep resumes without measuring anything twice, and the ``engine`` column of the
configurations chooses eager or static decoding."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from llmco2.data.schema import read_table
from llmco2.errors import InvalidInputError
from llmco2.measure.meter import EnergyMeter
from llmco2.measure.runner import InferenceRunner
from llmco2.measure.sweep import SweepOptions, plan_sweep, run_sweep
from llmco2.measure.testing import FakeMeter, FakeNVML, SimulatedGPU, SimulatedModel, simulated_factory, tiny_llama_factory
from llmco2.measure.windows import WindowPolicy

CONFIGS = """model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,dtype
qwen2-0.5b,h100-sxm,1,1,512,5,bf16
qwen2-0.5b,h100-sxm,1,2,256,3,fp16
qwen2-0.5b,h100-sxm,1,4,128,1,bf16
"""


class CrashingRunner(InferenceRunner):
    """Dies (as a killed process would) when it starts configuration number ``crash_at``."""

    def __init__(self, *args, crash_at: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at = crash_at
        self.started = 0

    def run(self, arch, request):
        self.started += 1
        if self.crash_at is not None and self.started == self.crash_at:
            raise KeyboardInterrupt
        return super().run(arch, request)


@pytest.fixture
def sim(tmp_path: Path):
    gpu = SimulatedGPU()
    patch = mock.patch("llmco2.measure.nvml.pynvml", FakeNVML(energy_mj=[gpu.counter()]))
    patch.start()
    meters = []

    def meter() -> EnergyMeter:
        m = EnergyMeter((0,), clock=gpu.clock, sync=gpu.sync)
        meters.append(m)
        return m

    yield gpu, meter
    for m in meters:
        m.close()
    patch.stop()


def sweep_options(tmp_path: Path, text: str = CONFIGS, **kw) -> SweepOptions:
    configs = tmp_path / "configs.csv"
    configs.write_text(text)
    settings = {"device": "h100-sxm", "repeats": 2, "warmup": 1, "idle_s": 0.0, "progress": False, "probe_s": 2.0} | kw
    return SweepOptions(configs=configs, out=tmp_path / "h100.csv", **settings)


def test_sweep_probes_the_counter_and_writes_window_columns(sim, tmp_path: Path) -> None:
    gpu, make_meter = sim
    meter = make_meter()
    model = SimulatedModel(gpu)
    opts = sweep_options(tmp_path)
    runner = InferenceRunner(meter, device="cpu", model_factory=simulated_factory(model), repeats=2, warmup=1,
                             policy=opts.policy, clock=gpu.clock)
    summary = run_sweep(opts, meter=meter, runner=runner, probe_load=gpu.load())
    assert summary["measured"] == 3 and summary["rows_total"] == 5
    table, report = read_table(opts.out)
    assert report.bad_rows == 0
    prefill = table[table["phase"] == "prefill"]
    truth = [model.prefill_truth_j(b, p) for b, p in zip(prefill["batch_size"], prefill["prompt_tokens"], strict=True)]
    assert prefill["energy_j"].to_numpy(float) == pytest.approx(truth, rel=0.02)
    assert set(prefill["window_method"]) == {"amortised"} and (prefill["window_passes"] > 1).all()
    assert set(table.loc[table["phase"] == "decode", "window_method"]) == {"lengthened"}
    assert (table["window_s"] >= 2.0).all() and (table["quantisation_bound"] <= 0.02).all()
    assert not table["flag"].fillna("").str.contains("counter_quantised").any()
    assert set(table["engine"]) == {"hf"} and (table["power_limit_w"] == 700.0).all()
    log = [json.loads(line) for line in opts.out.with_name("h100.runs.jsonl").read_text().splitlines()]
    probe = log[0]["environment"]["meter"]["counter_probe"]
    assert probe["period_s"] == pytest.approx(0.1, rel=0.02) and probe["increment_j"]["0"] == pytest.approx(25.0, rel=0.02)
    assert log[0]["environment"]["window_policy"]["min_periods"] == 20.0


def test_rows_above_the_bound_are_flagged_not_dropped(sim, tmp_path: Path) -> None:
    gpu, make_meter = sim
    meter = make_meter()
    model = SimulatedModel(gpu)
    opts = sweep_options(tmp_path, max_passes=10)
    runner = InferenceRunner(meter, device="cpu", model_factory=simulated_factory(model), repeats=2, warmup=1,
                             policy=opts.policy, clock=gpu.clock)
    run_sweep(opts, meter=meter, runner=runner, probe_load=gpu.load())
    table, _ = read_table(opts.out)
    assert len(table) == 5
    quantised = table["flag"].fillna("").str.contains("counter_quantised").to_numpy()
    assert (quantised == (table["quantisation_bound"] > 0.02).to_numpy()).all() and quantised.any()


def test_an_interrupted_sweep_resumes_where_it_stopped(sim, tmp_path: Path) -> None:
    gpu, make_meter = sim
    model = SimulatedModel(gpu)
    opts = sweep_options(tmp_path)

    def runner(crash_at=None) -> CrashingRunner:
        return CrashingRunner(meter, device="cpu", model_factory=simulated_factory(model), repeats=2, warmup=1,
                              policy=opts.policy, clock=gpu.clock, crash_at=crash_at)

    meter = make_meter()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(opts, meter=meter, runner=runner(crash_at=2), probe_load=gpu.load())
    first, _ = read_table(opts.out)
    assert len(first) == 2  # configuration 1, both phases
    assert [c.status for c in plan_sweep(opts).items] == ["done", "todo", "todo"]
    meter = make_meter()
    again = runner()
    summary = run_sweep(opts, meter=meter, runner=again, probe_load=gpu.load())
    assert summary["done_before"] == 1 and summary["measured"] == 2 and again.started == 2
    table, _ = read_table(opts.out)
    assert len(table) == 5 and list(table["source_row"]) == list(range(2, 7))
    assert table.iloc[:2].equals(first)


def test_engine_column_chooses_the_decode_mode(tmp_path: Path) -> None:
    text = ("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,dtype,engine\n"
            "qwen2-0.5b,h100-sxm,1,1,6,3,fp32,hf\n"
            "qwen2-0.5b,h100-sxm,1,1,6,3,fp32,hf-static\n"
            "qwen2-0.5b,h100-sxm,1,1,6,3,fp32,torch.compile\n")  # an alias of hf-static: the same configuration
    opts = sweep_options(tmp_path, text, probe_s=0.0)
    plan = plan_sweep(opts)
    assert [c.fields["engine"] for c in plan.items] == ["hf", "hf-static"] and plan.items[0].key != plan.items[1].key
    runner = InferenceRunner(FakeMeter(), device="cpu", model_factory=tiny_llama_factory, repeats=1, warmup=1,
                             policy=WindowPolicy.single_pass(), compile_decode=False)
    run_sweep(opts, meter=FakeMeter(), runner=runner)
    table, _ = read_table(opts.out)
    assert list(table["engine"]) == ["hf", "hf", "hf-static", "hf-static"]
    with pytest.raises(InvalidInputError, match="line 2: engine 'vllm'"):
        plan_sweep(sweep_options(tmp_path, text.replace(",hf\n", ",vllm\n", 1)))
    default_static = sweep_options(tmp_path, CONFIGS, decode_mode="static")
    assert {c.fields["engine"] for c in plan_sweep(default_static).items} == {"hf-static"}
