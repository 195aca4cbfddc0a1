"""``llmco2 predict --serving`` and ``llmco2 report trace --serving``: input errors (exit 2, one
line) and the wiring of a served request's footprint, with a linear cost model in place of the
predictor grid so that the tests need no checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmco2.serving import Workload, serve
from llmco2.serving import costs as serving_costs
from tests.helpers import run_cli
from tests.test_serving import LinearCost

BASE = ["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--prompt-tokens", "200", "--gen-tokens", "50"]


@pytest.mark.parametrize("extra, message", [
    (["--serving"], "--concurrency N or --rate R"),
    (["--serving", "--concurrency", "4", "--rate", "2"], "exactly one load"),
    (["--serving", "--concurrency", "0"], "--concurrency"),
    (["--serving", "--rate", "-3"], "--rate"),
    (["--serving", "--concurrency", "4", "--gpus", "3"], "tensor"),
    (["--serving", "--concurrency", "4", "--engine", "nope"], "engine"),
])
def test_predict_serving_bad_input_exits_2_with_one_line(extra, message, capsys):
    code, out, err = run_cli(BASE + extra, capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_predict_serving_weights_that_do_not_fit(capsys):
    code, _, err = run_cli(["predict", "--model", "llama3.1-70b", "--gpu", "h100", "--prompt-tokens", "10", "--gen-tokens", "10",
                            "--serving", "--rate", "1", "--dtype", "bf16"], capsys)
    assert code == 2 and "--gpus" in err and len(err.strip().splitlines()) == 1


def test_report_trace_serving_bad_input(capsys, tmp_path):
    out = str(tmp_path / "f.png")
    code, _, err = run_cli(["report", "trace", "--serving", "--rate", "1", "--concurrency", "2", "-o", out], capsys)
    assert code == 2 and "not both" in err
    code, _, err = run_cli(["report", "trace", "--serving", "--sweep-gpus", "h100:x", "-o", out], capsys)
    assert code == 2 and "GPU:COUNT" in err


@pytest.fixture
def linear_grid(monkeypatch):
    """Replace the predictor grid with the linear cost model (no checkpoint needed)."""
    monkeypatch.setattr(serving_costs.GridCostModel, "from_predictor", classmethod(lambda cls, *a, **k: LinearCost()))
    monkeypatch.setattr("llmco2.prediction.loading.load_predictor", lambda *a, **k: None)


def test_predict_serving_reports_the_request_share(linear_grid, capsys):
    code, out, err = run_cli(BASE + ["--serving", "--concurrency", "4", "--background", "fixed", "--serving-requests", "40",
                                     "--dtype", "bf16", "--json"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    e = rec["energy_j"]
    assert e["total"] == pytest.approx(e["prefill"] + e["decode"])
    assert rec["total"] == e["total"] and rec["operational"] == rec["carbon_g"]["operational"]
    # 200 prompt tokens at 1 J each when prefilled alone; mixed into an iteration it carries its token share
    assert e["prefill"] > 0 and e["decode"] > 0
    assert rec["serving"]["requests"] == 41
    assert rec["serving"]["mean_batch"] <= 4
    assert rec["carbon_g"]["total"] > rec["carbon_g"]["operational"] > 0
    assert rec["latency_s"]["total"] == pytest.approx(rec["latency_s"]["prefill"] + rec["latency_s"]["decode"])


def test_serve_charges_carbon_in_proportion_to_energy():
    rng = np.random.default_rng(1)
    w = Workload(rng.integers(1, 400, 60), rng.integers(1, 80, 60), None, concurrency=6)
    r = serve("llama3.1-8b", "h100", w, cost=LinearCost(), carbon_intensity=400.0, pue=1.2)
    frame = r.requests
    assert frame["operational_g"].to_numpy() == pytest.approx(frame["energy_j"].to_numpy() / 3.6e6 * 1.2 * 400.0)
    assert frame["energy_j"].sum() == pytest.approx(r.summary["energy_j"])
    assert r.summary["j_per_output_token"] == pytest.approx(frame["energy_j"].sum() / frame["output_tokens"].sum())
    assert (frame["embodied_g"] > 0).all()
    assert r.assumptions["server"]["kv_capacity_tokens"] > 100_000


def test_shipped_calibration_belongs_to_its_checkpoint(monkeypatch, tmp_path):
    from llmco2.serving import calibration as cal_mod

    other = tmp_path / "other.safetensors"
    other.write_bytes(b"not the checkpoint the calibration was fitted with")
    monkeypatch.setattr("llmco2.prediction.loading.default_checkpoint_path", lambda: other)
    cal_mod.shipped_calibration.cache_clear()
    try:
        assert cal_mod.shipped_calibration() is None
    finally:
        cal_mod.shipped_calibration.cache_clear()


def test_serve_takes_the_names_predict_uses_and_the_old_ones_with_a_warning():
    import pytest

    from llmco2.serving.workload import make_workload

    w = make_workload("fixed", n=20, concurrency=4, prompt_tokens=100, output_tokens=20)
    new = serve("llama3.1-8b", "h100", w, region="fra", pue=1.2)
    with pytest.warns(DeprecationWarning, match="region="):
        old = serve("llama3.1-8b", "h100", w, region_id="fra", pue_value=1.2)
    assert new.summary["g_per_output_token"] == old.summary["g_per_output_token"]
    assert new.assumptions["grid"]["region"] == "fra" and new.assumptions["pue"]["value"] == 1.2


def test_report_trace_serving_costs_with_the_step_physics_as_predict_serving_does(tmp_path, capsys):
    import json

    from tests.helpers import run_cli

    code, out, err = run_cli(["report", "trace", "--serving", "--trace", "code", "--model", "llama3.1-8b", "--gpu", "h100",
                              "--concurrency", "4", "--sweep-gpus", "h100", "--sweep-engines", "vllm", "--sweep-requests", "20",
                              "-o", str(tmp_path / "x.png"), "--json"], capsys)
    assert code == 0 and "WARNING" not in err, err
    served = json.loads(out)["served"]
    assert served["server"]["cost_model"] == "step physics" and served["j_per_output_token_interval"] is not None


def test_predict_serving_says_what_a_config_json_left_to_an_assumption(tmp_path, capsys):
    """A config.json without a context key: predict --serving says so (text and --json notes), as
    the single-request predict does; a catalog model has no notes."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
              "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
              "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ["predict", "--model", str(path), "--gpu", "h100", "--prompt-tokens", "200", "--gen-tokens", "50", "--serving",
            "--rate", "2", "--serving-requests", "20"]
    code, out, err = run_cli([*args, "--json"], capsys)
    assert code == 0, err
    assert any(n.startswith("context length unknown") for n in json.loads(out)["notes"])
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "note: context length unknown" in " ".join(out.split())
    code, out, err = run_cli([*BASE, "--serving", "--rate", "2", "--serving-requests", "20", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["notes"] == []
