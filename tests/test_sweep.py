"""Sweeps without a GPU: a tiny CPU model with a fake meter stands in for the GPU run; crashes are
injected to check that finished measurements survive and are not repeated."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest

import llmco2.cli as cli
from llmco2.cli import measure as measure_cli
from llmco2.data.schema import read_table
from llmco2.errors import InvalidInputError
from llmco2.measure.hf_models import torch_dtype
from llmco2.measure.runner import InferenceRunner
from llmco2.measure.store import ResultStore, config_fields, config_key, failed_rows
from llmco2.measure.sweep import (
    SweepOptions,
    detect_device,
    merge_shards,
    parse_gpus,
    parse_model_paths,
    plan_sweep,
    run_sweep,
    shard_path,
)
from llmco2.measure.testing import FakeMeter, FakeNVML, tiny_llama_factory
from llmco2.measure.windows import WindowPolicy
from llmco2.specs import Request, get_gpu, get_model

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = """model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,dtype
llama3.1-8b,h100-sxm,1,1,8,4,bf16
llama3.1-8b,h100-sxm,1,2,6,3,bf16
qwen2-7b,h100-sxm,1,1,5,2,fp16
llama3.1-8b,h100-sxm,1,1,4,1,fp32
llama3.1-8b,a100-80gb,1,1,4,3,fp16
"""


class SpyRunner:
    """The real runner on CPU (tiny model, fake meter), counting calls; crashes or fails on demand."""

    def __init__(self, crash_at: int | None = None, fail_batch: int | None = None) -> None:
        self.inner = InferenceRunner(FakeMeter(), device="cpu", model_factory=self.factory, repeats=2, warmup=1,
                                     policy=WindowPolicy.single_pass(), compile_decode=False)
        self.calls: list[tuple[str, int, int]] = []
        self.modes: list[str] = []
        self.crash_at = crash_at
        self.fail_batch = fail_batch

    @staticmethod
    def factory(arch, dtype, devices, **kw):
        torch_dtype(dtype)  # quantised dtypes fail as with the real factory
        return tiny_llama_factory(arch, dtype, devices, **kw)

    @property
    def decode_mode(self) -> str:
        return self.inner.decode_mode

    @decode_mode.setter
    def decode_mode(self, mode: str) -> None:
        self.inner.decode_mode = mode

    def run(self, arch, request):
        self.calls.append((arch.id, request.batch_size, request.prompt_tokens))
        self.modes.append(self.inner.decode_mode)
        if self.crash_at is not None and len(self.calls) == self.crash_at:
            raise KeyboardInterrupt  # the process dies: not a configuration failure
        if request.batch_size == self.fail_batch:
            raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return self.inner.run(arch, request)

    def environment(self):
        return self.inner.environment()

    def release(self):
        self.inner.release()


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    path = tmp_path / "configs.csv"
    path.write_text(CONFIGS)
    return path


def options(configs: Path, out: Path, **kw) -> SweepOptions:
    settings = {"device": "h100-sxm", "repeats": 2, "warmup": 1, "idle_s": 0.0, "progress": False} | kw
    return SweepOptions(configs=configs, out=out, **settings)


def keys_on_disk(out: Path) -> list[str]:
    return [json.loads(line)["key"] for line in out.with_name(out.stem + ".runs.jsonl").read_text().splitlines()]


# -- a full sweep --------------------------------------------------------------------------------------
def test_sweep_writes_canonical_rows_as_each_configuration_finishes(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.csv"
    runner = SpyRunner()
    appended: list[int] = []
    real_append = ResultStore.append

    def spy_append(self, key, table, record):  # the file grows configuration by configuration
        real_append(self, key, table, record)
        appended.append(len(read_table(self.out)[0]))

    with mock.patch.object(ResultStore, "append", spy_append):
        summary = run_sweep(options(configs, out), meter=FakeMeter(), runner=runner)
    assert appended == [2, 4, 6, 7]  # the fourth generates one token: prefill only
    assert summary | {"out": None, "runs_log": None, "failed_file": None} == {
        "out": None, "runs_log": None, "failed_file": None, "device": "h100-sxm", "shard": 0, "num_shards": 1, "configurations": 5,
        "done_before": 0, "failed_before": 0, "other_gpu": 1, "measured": 4, "failed": 0, "rows_total": 7}
    assert len(runner.calls) == 4  # the a100 configuration is left for an a100 machine
    table, report = read_table(out)
    assert report.bad_rows == 0 and len(table) == 7
    assert list(table["phase"]) == ["prefill", "decode"] * 3 + ["prefill"]
    assert list(table["source_row"]) == list(range(2, 9)) and set(table["source_file"]) == {"h100.csv"}
    assert list(table["generated_tokens"]) == [4, 4, 3, 3, 2, 2, 1]
    assert set(table["device"]) == {"h100-sxm"} and set(table["engine"]) == {"hf"}
    assert set(table["measurement"]) == {"nvml_energy"} and set(table["repeats"]) == {2}
    assert (table["energy_j"] > 0).all() and (table["energy_std_j"] >= 0).all()
    assert list(table["weight_bits"]) == [16, 16, 16, 16, 16, 16, 32]
    log = [json.loads(line) for line in (tmp_path / "h100.runs.jsonl").read_text().splitlines()]
    assert [r["rows"] for r in log] == [[2, 3], [4, 5], [6, 7], [8]]
    first = log[0]
    assert first["config"]["model"] == "llama3.1-8b" and first["number"] == 1
    assert first["result"]["decode_steps"] == 3 and first["result"]["tokens_generated"] == 4
    assert first["result"]["prefill"]["energy_above_idle_j"] is not None
    assert first["environment"]["software"]["torch"] and first["environment"]["meter"]["driver_version"] == "fake"
    assert first["csv_bytes"] < log[-1]["csv_bytes"] == out.stat().st_size
    assert not (tmp_path / "h100.failed.csv").exists()


def test_crash_in_the_middle_keeps_finished_rows_and_resume_skips_them(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.csv"
    crashing = SpyRunner(crash_at=3)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(options(configs, out), meter=FakeMeter(), runner=crashing)
    assert len(crashing.calls) == 3
    table, _ = read_table(out)
    assert len(table) == 4 and list(table["batch_size"]) == [1, 1, 2, 2]  # configurations 1 and 2, both phases
    done_keys = keys_on_disk(out)
    assert len(done_keys) == 2

    plan = plan_sweep(options(configs, out))
    assert [c.status for c in plan.items] == ["done", "done", "todo", "todo", "other_gpu"]

    resumed = SpyRunner()
    summary = run_sweep(options(configs, out), meter=FakeMeter(), runner=resumed)
    assert resumed.calls == [("qwen2-7b", 1, 5), ("llama3.1-8b", 1, 4)]  # nothing measured twice
    assert (summary["done_before"], summary["measured"], summary["rows_total"]) == (2, 2, 7)
    table, _ = read_table(out)
    assert len(table) == 7 and list(table["source_row"]) == list(range(2, 9))
    keys = keys_on_disk(out)
    assert keys[:2] == done_keys and len(set(keys)) == 4

    again = SpyRunner()
    assert run_sweep(options(configs, out), meter=FakeMeter(), runner=again)["measured"] == 0
    assert again.calls == []


def test_resume_cuts_off_a_torn_append(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner(crash_at=2))
    good = out.read_bytes()
    with out.open("ab") as fh:  # the crash hit while the next configuration's rows were written
        fh.write(b"llmco2,h100.csv,4,h100-sxm,1,1,1,hf-transf")
    with (tmp_path / "h100.runs.jsonl").open("ab") as fh:
        fh.write(b'{"key": "model=')
    plan = plan_sweep(options(configs, out))  # a dry run looks but changes nothing
    assert plan.counts()["done"] == 1 and out.read_bytes() != good
    resumed = SpyRunner()
    run_sweep(options(configs, out), meter=FakeMeter(), runner=resumed)
    assert len(resumed.calls) == 3
    table, report = read_table(out)
    assert report.bad_rows == 0 and len(table) == 7 and list(table["source_row"]) == list(range(2, 9))
    assert len(keys_on_disk(out)) == 4


def test_crash_before_the_first_configuration_finished(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.csv"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner(crash_at=1))
    assert (tmp_path / "h100.runs.jsonl").read_text() == ""
    out.write_text("source,source_file\n")  # not even a full header made it
    with pytest.raises(InvalidInputError, match="canonical header"):
        run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner())
    out.unlink()
    assert run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner())["measured"] == 4


def test_failed_configurations_are_logged_and_the_sweep_goes_on(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.csv"
    cfg = configs.read_text() + "llama3.1-8b,h100-sxm,1,1,4,2,int8\n"
    configs.write_text(cfg)
    runner = SpyRunner(fail_batch=2)
    summary = run_sweep(options(configs, out), meter=FakeMeter(), runner=runner)
    assert (summary["measured"], summary["failed"]) == (3, 2)
    failures = list(failed_rows(tmp_path / "h100.failed.csv"))
    assert [f["key"].split("|")[4] for f in failures] == ["batch_size=2", "batch_size=1"]
    assert failures[0]["reason"] == "RuntimeError: CUDA out of memory. Tried to allocate 80.00 GiB"
    assert failures[1]["reason"].startswith("UnsupportedConfigError: dtype int8 needs a quantisation backend")
    assert all(f["time"].endswith("+00:00") for f in failures)
    assert "dtype=int8" in failures[1]["key"]
    table, _ = read_table(out)
    assert len(table) == 5 and 2 not in set(table["batch_size"])

    skipping = SpyRunner()
    summary = run_sweep(options(configs, out), meter=FakeMeter(), runner=skipping)
    assert skipping.calls == [] and summary["failed_before"] == 2
    retrying = SpyRunner()
    summary = run_sweep(options(configs, out, retry_failed=True), meter=FakeMeter(), runner=retrying)
    assert len(retrying.calls) == 2 and (summary["measured"], summary["failed"]) == (1, 1)
    assert len(read_table(out)[0]) == 7


def test_unsupported_multi_gpu_configuration_fails_cleanly(tmp_path: Path) -> None:
    configs = tmp_path / "c.csv"
    configs.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,h100-sxm,2,1,4,2\n")
    summary = run_sweep(options(configs, tmp_path / "o.csv"), meter=FakeMeter(), runner=SpyRunner())
    assert summary["failed"] == 1
    assert "needs 2 GPUs" in next(iter(failed_rows(tmp_path / "o.failed.csv")))["reason"]


def test_device_is_recognised_from_the_meter(configs: Path, tmp_path: Path) -> None:
    class NamedMeter(FakeMeter):
        devices = {0: mock.Mock(name="dev")}

    NamedMeter.devices[0].name = "NVIDIA A100-SXM4-80GB"
    runner = SpyRunner()
    summary = run_sweep(options(configs, tmp_path / "a.csv", device=None), meter=NamedMeter(), runner=runner)
    assert summary["device"] == "a100-80gb" and runner.calls == [("llama3.1-8b", 1, 4)] and summary["other_gpu"] == 4
    assert detect_device(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]) == "h100-sxm"
    with pytest.raises(InvalidInputError, match="catalog id as `device`"):
        detect_device(["NVIDIA Quadro 9000"])
    with pytest.raises(InvalidInputError, match="different kinds"):
        detect_device(["NVIDIA H100 80GB HBM3", "Tesla T4"])
    with pytest.raises(InvalidInputError, match="catalog id as `device`"):
        run_sweep(options(configs, tmp_path / "b.csv", device=None), meter=FakeMeter(), runner=SpyRunner())


# -- plan, shards, keys ------------------------------------------------------------------------------
def test_dry_run_plan_estimates_from_the_roofline(configs: Path, tmp_path: Path) -> None:
    from llmco2.analytic.batch import analyze_request_table, read_request_csv

    out = tmp_path / "plan.csv"
    plan = plan_sweep(options(configs, out, device=None, repeats=3, warmup=2, idle_s=5.0))
    doc = plan.to_dict()
    assert (doc["total"], doc["todo"], doc["done"]) == (5, 5, 0)
    roof = analyze_request_table(read_request_csv(configs))
    # warm-up + repeats + 2 calibration runs, each phase at least one minimum window (1 s; decode only if there is one)
    expected = [(max(p, 1.0) + (max(d, 1.0) if g > 1 else d)) * (5 + 2)
                for p, d, g in zip(roof["prefill_time_s"], roof["decode_time_s"], roof["generated_tokens"], strict=True)]
    assert [c.estimate_s for c in plan.items] == pytest.approx(expected)
    assert doc["estimated_s"] == pytest.approx(sum(expected) + 5.0)
    assert not list(tmp_path.glob("plan*"))  # a plan writes nothing


def test_shards_split_the_configurations_and_merge_back(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.csv"
    calls = []
    for shard in (0, 1):
        runner = SpyRunner()
        run_sweep(options(configs, out, shard=shard, num_shards=2), meter=FakeMeter(), runner=runner)
        calls.append(runner.calls)
    assert calls == [[("llama3.1-8b", 1, 8), ("qwen2-7b", 1, 5)], [("llama3.1-8b", 2, 6), ("llama3.1-8b", 1, 4)]]
    assert shard_path(out, 1, 2).name == "all.shard1of2.csv" and shard_path(out, 0, 1) == out
    merged = merge_shards(out, 2)
    assert len(merged) == 7 and set(merged["source_file"]) == {"all.shard0of2.csv", "all.shard1of2.csv"}
    with pytest.raises(InvalidInputError, match="missing shard"):
        merge_shards(out, 3)
    with pytest.raises(InvalidInputError):
        SweepOptions(configs=configs, out=out, shard=2, num_shards=2)


def test_config_key_is_stable_across_spellings() -> None:
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100")
    a = config_key(config_fields(arch, Request(batch_size=2, prompt_tokens=16, generated_tokens=4, weight_dtype="bfloat16"), gpu))
    b = config_key(config_fields(get_model("Llama3.1-8B"), Request(batch_size="2.0", prompt_tokens=16.0, generated_tokens=4,
                                                                    weight_dtype="bf16"), get_gpu("h100-sxm")))
    assert a == b
    assert a.startswith("model=llama3.1-8b|gpu=h100-sxm|num_gpus=1|tensor_parallel=1|batch_size=2|")
    other = config_key(config_fields(arch.with_overrides(num_layers=16), Request(batch_size=2, prompt_tokens=16, generated_tokens=4,
                                                                                 weight_dtype="bf16"), gpu))
    assert other != a and "num_layers=16" in other


def test_store_refuses_foreign_or_inconsistent_files(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(InvalidInputError, match="canonical header"):
        ResultStore.open(foreign)
    with pytest.raises(InvalidInputError, match=".csv"):
        ResultStore.open(tmp_path / "x.parquet")
    with pytest.raises(InvalidInputError, match="does not exist"):
        ResultStore.open(tmp_path / "nope" / "x.csv")


def test_rows_without_a_run_log_are_not_overwritten(configs: Path, tmp_path: Path) -> None:
    out = tmp_path / "h100.csv"
    run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner())
    (tmp_path / "h100.runs.jsonl").unlink()
    before = out.read_bytes()
    with pytest.raises(InvalidInputError, match="no run log"):
        run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner())
    assert out.read_bytes() == before
    log_path = tmp_path / "h100.runs.jsonl"
    log_path.write_text(json.dumps({"key": "k", "csv_bytes": len(before) + 10, "rows": [2]}) + "\n")
    with pytest.raises(InvalidInputError, match="shorter"):
        run_sweep(options(configs, out), meter=FakeMeter(), runner=SpyRunner())


def test_option_parsing(tmp_path: Path) -> None:
    assert parse_gpus("0,1") == (0, 1) and parse_gpus([2]) == (2,) and parse_gpus(None) == (0,)
    for bad in ("a", "", "-1"):
        with pytest.raises(InvalidInputError):
            parse_gpus(bad)
    assert parse_model_paths([f"Llama3.1-8B={tmp_path}"]) == {"llama3.1-8b": str(tmp_path)}
    with pytest.raises(InvalidInputError, match="MODEL=PATH"):
        parse_model_paths(["llama3.1-8b"])
    with pytest.raises(InvalidInputError, match="not a folder"):
        parse_model_paths({"llama3.1-8b": str(tmp_path / "missing")})


# -- command line and Hydra ----------------------------------------------------------------------------
@pytest.fixture
def llmco2_main(monkeypatch):
    assert measure_cli in cli.COMMAND_MODULES  # `llmco2 measure` is a registered command

    def run(args: list[str], capsys) -> tuple[int, str, str]:
        try:
            code = cli.main(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_dry_run_needs_no_gpu(configs: Path, tmp_path: Path, llmco2_main, capsys) -> None:
    code, out, _ = llmco2_main(["measure", "--configs", str(configs), "--out", str(tmp_path / "m.csv"), "--dry-run"], capsys)
    assert code == 0
    assert "5 configurations" in out and "to measure: 5" in out and "estimated GPU time (roofline x 6 runs" in out
    assert "qwen2-7b on 1x h100-sxm hf fp16 batch 1 prompt 5 gen 2" in out
    code, out, _ = llmco2_main(["measure", "--configs", str(configs), "--out", str(tmp_path / "m.csv"), "--dry-run", "--json",
                                "--repeats", "2", "--warmup", "0", "--device", "a100"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["repeats"] == 2 and doc["other_gpu"] == 4 and doc["todo"] == 1
    assert not list(tmp_path.glob("m*"))


def test_cli_without_gpu_exits_2_with_one_line(configs: Path, tmp_path: Path, llmco2_main, capsys) -> None:
    with mock.patch("llmco2.measure.nvml.pynvml", FakeNVML(init_error=FakeNVML.NVML_ERROR_DRIVER_NOT_LOADED)):
        code, out, err = llmco2_main(["measure", "--configs", str(configs), "--out", str(tmp_path / "m.csv")], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no NVIDIA GPU" in err and "--dry-run" in err
    assert not list(tmp_path.glob("m*"))  # nothing written


def test_cli_bad_input_exits_2(configs: Path, tmp_path: Path, llmco2_main, capsys) -> None:
    for args in (["--gpus", "x"], ["--out", str(tmp_path / "m.parquet")], ["--configs", str(tmp_path / "missing.csv")],
                 ["--num-shards", "0"]):
        base = {"--configs": str(configs), "--out": str(tmp_path / "m.csv")}
        extra = dict(zip(args[::2], args[1::2], strict=True))
        argv = ["measure", *(x for kv in (base | extra).items() for x in kv), "--dry-run"]
        code, _, err = llmco2_main(argv, capsys)
        assert code == 2 and err.count("\n") == 1, (args, err)


def test_cli_runs_a_sweep_with_injected_hardware(configs: Path, tmp_path: Path, llmco2_main, capsys) -> None:
    import llmco2.measure.sweep as sweep_mod

    real = sweep_mod.run_sweep
    with mock.patch.object(sweep_mod, "run_sweep", lambda opts: real(opts, meter=FakeMeter(), runner=SpyRunner())):
        code, _, err = llmco2_main(["measure", "--configs", str(configs), "--out", str(tmp_path / "m.csv"), "--device", "h100-sxm",
                                    "--no-progress"], capsys)
    assert code == 0 and "measured 4 configurations on h100-sxm" in err
    assert len(read_table(tmp_path / "m.csv")[0]) == 7


def test_hydra_config_and_run_sweep(configs: Path, tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    from llmco2.measure import sweep_app

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="measure", overrides=[f"configs={configs}", f"out={tmp_path / 'h.csv'}", "shard=1",
                                                        "num_shards=2", "gpus=[0,1]", "dry_run=true", "device=h100-sxm"])
    opts = sweep_app.options_from_cfg(cfg)
    assert (opts.shard, opts.num_shards, opts.gpus, opts.repeats, opts.device) == (1, 2, (0, 1), 5, "h100-sxm")
    plan = sweep_app.run_sweep(cfg)
    assert plan["out"].endswith("h.shard1of2.csv") and (plan["total"], plan["todo"], plan["other_gpu"]) == (2, 2, 0)


def test_hydra_multirun_one_job_per_shard(configs: Path, tmp_path: Path) -> None:
    """``-m shard='range(0,2)'`` runs one job per shard (here the local launcher, as a dry run)."""
    proc = subprocess.run(
        [sys.executable, "-m", "llmco2.measure.sweep_app", "-m", "shard=range(0,2)", "num_shards=2", f"configs={configs}",
         f"out={tmp_path / 'h.csv'}", "dry_run=true", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "#0 : shard=0" in proc.stdout + proc.stderr and "#1 : shard=1" in proc.stdout + proc.stderr
    assert proc.stdout.count('"total"') == 2
    assert (tmp_path / "multirun" / "shard0").is_dir() and (tmp_path / "multirun" / "shard1").is_dir()


def test_readme_documents_the_cluster_command() -> None:
    text = (ROOT / "data" / "measurements" / "README.md").read_text()
    assert "hydra/launcher=submitit_slurm" in text and "llmco2 measure" in text
    assert "python -m llmco2.cli measure" in text


def test_readme_counts_the_committed_measurement_rows() -> None:
    """The folder's README says how many rows its tables hold, and the tables hold that many."""
    folder = ROOT / "data" / "measurements"
    text = (folder / "README.md").read_text()
    tables = [p for p in folder.glob("*.csv") if not p.name.startswith("configs")]
    rows = sum(len(pd.read_csv(p)) for p in tables)
    stated = re.search(r"Measured so far: (\d+) rows", text)
    assert stated is not None and int(stated.group(1)) == rows
    for table in tables:
        assert f"`{table.name}`" in text


def test_empty_table_round_trip(configs: Path, tmp_path: Path) -> None:
    run_sweep(options(configs, tmp_path / "t.csv"), meter=FakeMeter(), runner=SpyRunner())
    raw = pd.read_csv(tmp_path / "t.csv")
    assert list(raw.columns)[:3] == ["source", "source_file", "source_row"]


def test_the_device_script_is_valid_bash_and_names_committed_plans() -> None:
    """data/measurements/device_run.sh parses, and every plan it may pick is committed."""
    script = ROOT / "data" / "measurements" / "device_run.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    gpus = re.findall(r"gpu=(\w+) ;;", text)
    assert gpus == ["h200", "h100"]
    for gpu in gpus:
        assert (ROOT / "data" / "measurements" / f"configs_{gpu}.csv").is_file()
    assert "device_run.sh" in (ROOT / "data" / "measurements" / "README.md").read_text()

