"""`llmco2 predict` (convention 3) and `llmco2 evaluate` (convention 4), with a tiny checkpoint
trained here and with the shipped default."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmco2.carbon.accounting import SECONDS_PER_YEAR
from llmco2.data.dataset import energy_data
from llmco2.prediction.loading import default_checkpoint_path
from llmco2.training.train import GNNPredictor, TrainConfig
from tests.helpers import run_cli as run
from tests.test_gnn import synthetic_table

REQUEST = ["--model", "qwen2-1.5b", "--gpu", "a100-80gb", "--batch-size", "1", "--prompt-tokens", "256", "--gen-tokens", "32"]




@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    table = synthetic_table(60)
    data = energy_data(table)
    model = GNNPredictor(TrainConfig(hidden=16, max_epochs=3))
    model.fit(data)
    return model.save(tmp_path_factory.mktemp("ckpt") / "tiny.safetensors")


def test_predict_json_carbon_arithmetic(checkpoint: Path, capsys) -> None:
    code, out, err = run(["predict", *REQUEST, "--carbon-intensity", "400", "--pue", "1.2", "--json", "--checkpoint",
                          str(checkpoint), "--scope", "gpu"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert {"prefill", "decode", "total", "operational", "embodied"} <= set(doc)
    assert doc["total"] == pytest.approx(doc["prefill"] + doc["decode"])
    kwh = doc["total"] / 3.6e6
    assert doc["operational"] == pytest.approx(kwh * 1.2 * 400, rel=1e-12)
    # embodied: (8.26 cm2 x 1.6 kg/cm2 + 80 GB x 0.4 kg/GB) x 1 GPU x latency / 5 years, in grams
    device_g = (8.26 * 1.6 + 80 * 0.4) * 1000
    assert doc["embodied"] == pytest.approx(device_g * doc["latency_s"]["total"] / (5 * SECONDS_PER_YEAR))
    assert doc["carbon_g"]["total"] == pytest.approx(doc["operational"] + doc["embodied"])
    assert any("unseen GPU a100-80gb" in n for n in doc["notes"])


def test_predict_region_and_named_pue(checkpoint: Path, capsys) -> None:
    code, out, _ = run(["predict", *REQUEST, "--region", "fr", "--pue", "google", "--json", "--checkpoint", str(checkpoint)], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["assumptions"]["grid"]["region"] == "fra" and doc["assumptions"]["pue"]["id"] == "google"
    assert doc["operational"] == pytest.approx(doc["server_energy_j"]["total"] / 3.6e6 * doc["assumptions"]["pue"]["value"]
                                               * doc["assumptions"]["grid"]["g_co2eq_per_kwh"])
    code, text, _ = run(["predict", *REQUEST, "--checkpoint", str(checkpoint)], capsys)
    assert code == 0 and "carbon" in text and "assumptions" in text


def test_predict_file(tmp_path: Path, checkpoint: Path, capsys) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,engine\n"  # trained on engine "unknown"
                   "qwen2-1.5b,jetson-orin,1,1,128,16,unknown\nqwen2-0.5b,jetson-orin,1,1,64,1,unknown\nllama3.1-8b,h100,2,2,512,64,\n")
    out = tmp_path / "pred.csv"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out), "--checkpoint", str(checkpoint)], capsys)
    assert code == 0, err
    frame = pd.read_csv(out)
    assert list(frame.columns[:6]) == ["model", "gpu", "num_gpus", "batch_size", "prompt_tokens", "generated_tokens"]
    assert (frame["total_j"] > 0).all() and frame.loc[1, "decode_j"] == 0  # one generated token: no decode
    assert list(frame["extrapolated"]) == [False, False, True]
    assert np.isnan(frame.loc[0, "embodied_g"]) and frame.loc[2, "embodied_g"] > 0  # Orin's die area is unpublished


@pytest.mark.parametrize("extra, mention", [
    (["--region", "atlantis"], "atlantis"),
    (["--region", "fr", "--carbon-intensity", "10"], "--region"),
    (["--pue", "0.8"], "PUE"),
    (["--carbon-intensity", "-1"], "carbon-intensity"),
])
def test_predict_bad_options(extra, mention, checkpoint: Path, capsys) -> None:
    code, out, err = run(["predict", *REQUEST, "--checkpoint", str(checkpoint), *extra], capsys)
    assert code == 2 and out == "" and mention in err and len(err.strip().splitlines()) == 1


def test_predict_missing_request_fields(capsys) -> None:
    code, _, err = run(["predict", "--model", "qwen2-7b"], capsys)
    assert code == 2 and "--gpu" in err


def test_evaluate_json(tmp_path: Path, checkpoint: Path, capsys) -> None:
    path = tmp_path / "rows.csv"
    synthetic_table(15).assign(source="co2meter").to_csv(path, index=False)
    code, out, err = run(["evaluate", "--data", str(path), "--checkpoint", str(checkpoint), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert {"n", "mape", "median_ape", "eba_5", "eba_10", "eba_30"} <= set(doc)
    assert doc["n"] == 30 and set(doc["per_phase"]) == {"prefill", "decode"} and set(doc["per_device"]) == {"jetson-orin"}
    assert 0 <= doc["eba_10"] <= doc["eba_30"] <= 1


@pytest.mark.skipif(not default_checkpoint_path().is_file(), reason="no shipped checkpoint in this checkout")
def test_shipped_checkpoint_predicts(capsys) -> None:
    code, out, err = run(["predict", *REQUEST, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["total"] > 0 and doc["operational"] > 0


ADDED_GPU_IDS = ["a40", "rtx-a6000", "rtx-6000-ada", "l40", "a30", "h100-nvl", "h20", "rtx-4090", "rtx-3090", "mi250x",
                 "mi300x", "gaudi3"]


@pytest.mark.skipif(not default_checkpoint_path().is_file(), reason="no shipped checkpoint in this checkout")
@pytest.mark.parametrize("gpu_id", ADDED_GPU_IDS)
def test_shipped_checkpoint_predicts_on_added_gpus(gpu_id: str, capsys) -> None:
    # gaudi3 (like gaudi2) publishes bf16 and fp8 peaks only, so the default fp16 needs --dtype.
    dtype = ["--dtype", "bf16"] if gpu_id == "gaudi3" else []
    code, out, err = run(["predict", "--model", "llama3.1-8b", "--gpu", gpu_id, "--batch-size", "1", "--prompt-tokens", "512",
                          "--gen-tokens", "64", *dtype, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["total"] > 0 and doc["operational"] > 0
    assert (doc["embodied"] is None) == (gpu_id in ("mi250x", "mi300x", "gaudi3"))


def test_latency_respects_the_power_limit(checkpoint: Path) -> None:
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.prediction.loading import load_predictor
    from llmco2.specs import Request, get_gpu, get_model

    items = [(get_model("llama3.1-8b"), Request(batch_size=b, prompt_tokens=1024, generated_tokens=64, num_gpus=n), get_gpu("h100"))
             for b in (1, 8) for n in (1, 2)]
    fp = predict_footprint(items, load_predictor(str(checkpoint)), carbon_intensity=100.0, pue_value=1.0)
    power = fp.total_j / (fp.latency_s * np.array([r.num_gpus for _, r, _ in items]))
    assert np.all(power <= 700.0 * (1 + 1e-9))  # H100 SXM TDP


def test_unknown_region_lists_close_matches(checkpoint: Path, capsys) -> None:
    code, out, err = run(["predict", *REQUEST, "--region", "frnace", "--checkpoint", str(checkpoint)], capsys)
    assert code == 2 and out == "" and "did you mean" in err and "france" in err and len(err.strip().splitlines()) == 1


def test_a_checkpoint_with_the_legacy_latency_entry_loads_and_predicts_the_same(checkpoint: Path, tmp_path: Path) -> None:
    from llmco2.prediction import predict_phases
    from llmco2.prediction.checkpoint_file import read_checkpoint, write_checkpoint
    from llmco2.prediction.loading import load_predictor
    from llmco2.specs import Request, get_gpu, get_model

    tensors, meta = read_checkpoint(checkpoint)
    assert "latency" not in meta  # no longer written
    legacy = {"fallback": {"a": [0.0, 0.0], "b": [1.0, 1.0], "n": [0, 0], "median_ape": [None, None]}, "per_device": {}}
    old = write_checkpoint(tmp_path / "old.safetensors", tensors, {**meta, "latency": legacy})
    items = [(get_model("qwen2-1.5b"), Request(batch_size=b, prompt_tokens=256, generated_tokens=32), get_gpu("a100-80gb"))
             for b in (1, 4)]
    new_pred, old_pred = predict_phases(items, load_predictor(str(checkpoint))), predict_phases(items, load_predictor(str(old)))
    np.testing.assert_array_equal(new_pred.energy_j, old_pred.energy_j)
    np.testing.assert_array_equal(new_pred.latency_s, old_pred.latency_s)
    assert GNNPredictor.load(old).head is not None
