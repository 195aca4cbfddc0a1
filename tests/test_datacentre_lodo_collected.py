"""The leave-one-data-centre-GPU-out data with the collected rows (``conf/data/datacentre_lodo_collected.yaml``):
ML.ENERGY v1 mean requests read at an assumed prompt length (``assume_prompt_tokens``,
``round_mean_tokens``), test-only files (``test_only``: the host-bound thesis rows) kept out of every
fit except as the held-out group, and the per-group summary of ``experiments/summarize_datacentre.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from llmco2.data.dataset import energy_data
from llmco2.data.usable import assume_mean_request, held_out_only_rows, load_rows
from llmco2.errors import InvalidInputError
from llmco2.specs import get_gpu
from llmco2.training.experiment import CONF_DIR
from tests.test_importer_collected import ECE_NOTE, FASTCHAT, V1_NOTE, VLLM, row, write

ROOT = Path(__file__).resolve().parents[1]
EIGHT = {"a100-40gb", "a100-80gb", "a40", "gaudi2", "h100-sxm", "a100-pcie-80gb", "v100s-pcie-32gb", "a100-pcie-40gb"}


def _v1(tmp_path: Path) -> Path:
    return write(tmp_path, [row(gpu="A40", engine=FASTCHAT, batch_size=1, prompt_tokens="", generated_tokens=250.4,
                                energy_j=1000.0, latency_s=10.0, avg_power_w=100.0, notes=V1_NOTE, dtype="float16",
                                model_hf="lmsys/vicuna-7B")], "mlenergy_v1_legacy.csv")


def test_mean_request_gets_the_assumed_prompt_and_a_whole_response(tmp_path: Path) -> None:
    src = {"format": "collected", "path": str(_v1(tmp_path)), "assume_prompt_tokens": 125, "round_mean_tokens": True}
    raw = load_rows([{"format": "collected", "path": src["path"]}])
    assert raw["prompt_tokens"].isna().all() and not len(energy_data(raw).energy_j)  # unmodelled as imported
    t = load_rows([src])
    assert t["prompt_tokens"].tolist() == [125] and t["generated_tokens"].tolist() == [250]
    assert float(t["energy_j"].iloc[0]) == pytest.approx(1000.0 * 250 / 250.4)  # J per output token unchanged
    assert float(t["latency_s"].iloc[0]) == pytest.approx(10.0 * 250 / 250.4)
    assert "prompt_tokens_unknown" in str(t["flag"].iloc[0])  # the assumption stays visible
    assert len(energy_data(t).energy_j) == 1


def test_a_runs_enforced_power_limit_caps_its_gpu(tmp_path: Path) -> None:
    """A row measured under an enforced limit (``power_limit_w``) is costed on its GPU with that limit; a row
    without one keeps the catalog's."""
    ece = {"source_repo": "nhathuy25/energy-code-eval", "engine": VLLM, "notes": ECE_NOTE, "batch_size": 64,
           "prompt_tokens": 100, "generated_tokens": 128, "energy_j": 2900.0, "latency_s": 10.0, "avg_power_w": 290.0}
    path = write(tmp_path, [row(gpu="A100-SXM4-80GB", **ece), row(gpu="A40", **ece)], "energy_code_eval.csv")
    data = energy_data(load_rows([{"format": "collected", "path": str(path)}]))
    gpus = {item[2].id: item[2] for item in data.items}
    assert gpus["a100-80gb"].tdp_w == 300.0 and gpus["a40"].tdp_w == 300.0
    assert list(data.table["power_limit_w"].isna()) == [False, True]
    assert get_gpu("a100-80gb").tdp_w == 400.0  # the catalog is untouched


def test_assumed_prompt_fills_only_missing_values_and_must_be_positive() -> None:
    table = pd.DataFrame({"prompt_tokens": pd.array([None, 40.0], dtype="Float64"),
                          "generated_tokens": pd.array([10.0, 20.0], dtype="Float64"),
                          "energy_j": pd.array([1.0, 2.0], dtype="Float64"), "latency_s": pd.array([0.5, 1.0], dtype="Float64")})
    out = assume_mean_request(table, 125, round_tokens=False)
    assert out["prompt_tokens"].tolist() == [125.0, 40.0] and out["energy_j"].tolist() == [1.0, 2.0]
    with pytest.raises(InvalidInputError):
        assume_mean_request(table, 0, round_tokens=False)


def test_held_out_only_rows_enter_only_as_the_held_out_group() -> None:
    table = pd.DataFrame({"source_file": ["a.csv", "thesis.csv", "thesis.csv", "b.csv"],
                          "device": ["x", "t", "t", "y"]})
    only = {"thesis.csv": "host-bound"}
    kept, left = held_out_only_rows(table, only, "device", "x")
    assert kept["source_file"].tolist() == ["a.csv", "b.csv"] and left == {"thesis.csv (test only: host-bound)": 2}
    kept, left = held_out_only_rows(table, only, "device", "t")
    assert len(kept) == 4 and left == {}
    kept, _ = held_out_only_rows(table, only)  # not a leave-one-out split: never in any part
    assert "thesis.csv" not in set(kept["source_file"])
    assert held_out_only_rows(table, None)[0] is table


def test_lodo_datacenter_holds_out_eight_datacentre_gpus() -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["+experiment=lodo_datacenter"])
    assert cfg.data.name == "datacentre_lodo_collected"
    files = [Path(str(s.path)).name for s in cfg.data.sources]
    assert "mlenergy_v1_legacy.csv" in files and "hb_thesis_a100pcie.csv" in files
    assert set(cfg.data.test_only) == {"hb_thesis_a100pcie.csv"}
    v1 = next(s for s in cfg.data.sources if str(s.path).endswith("mlenergy_v1_legacy.csv"))
    assert v1.assume_prompt_tokens == 125 and v1.round_mean_tokens


def test_experiment_config_lists_the_eight_gpus() -> None:
    text = (CONF_DIR / "experiment" / "lodo_datacenter.yaml").read_text()
    line = next(x for x in text.splitlines() if x.strip().startswith("split.holdout:"))
    assert set(line.split(":", 1)[1].strip().split(",")) == EIGHT


def test_summary_per_group_and_mean(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import summarize_datacentre as summ
    finally:
        sys.path.pop(0)
    exp = tmp_path / "lodo_datacenter"
    for model, device, seed, mdape in [("llmco2", "a", 0, 0.1), ("llmco2", "a", 1, 0.2), ("llmco2", "b", 0, 0.3),
                                       ("gbt", "a", 0, 0.5)]:
        run = exp / f"{model}-d-without-{device}-seed{seed}"
        run.mkdir(parents=True)
        test = {"n": 10, "mape": mdape, "median_ape": mdape, "eba_10": 0.5, "eba_30": 0.9,
                "coverage": {"coverage": 0.8} if model == "llmco2" else None}
        (run / "metrics.json").write_text(json.dumps({"model": model, "split": "s", "test": test}))
        (run / "split.json").write_text(json.dumps({"meta": {"holdout": device}}))
        (run / "config.yaml").write_text(f"seed: {seed}\n")
    text = summ.per_device(summ.load(tmp_path))
    lines = text.splitlines()
    assert lines[2].startswith("| a | 10 | 15.0% (10.0-20.0) | 80.0% (80.0-80.0) |") and lines[2].endswith("| 50.0% |")
    assert lines[3].startswith("| b | 10 | 30.0% |") and lines[3].endswith("| - |")
    assert lines[-1] == "| mean of the held-out devices (devices) | | 22.5% (2) | 80.0% (2) | 50.0% (1) |"
    lines = summ.per_device(summ.load(tmp_path), apart=("b",)).splitlines()
    assert lines[-2] == "| mean of the held-out devices but b (devices) | | 15.0% (1) | 80.0% (1) | 50.0% (1) |"
    assert lines[-1] == "| mean of every held-out device (devices) | | 22.5% (2) | 80.0% (2) | 50.0% (1) |"


def test_coverage_calibrated_on_the_other_held_out_devices(tmp_path: Path) -> None:
    """Device a's interval takes its out-of-domain ends from b's and c's residuals (not its own): with b and c
    off by up to +-20% and a by +-10% or +-50%, a's rows inside the calibrated interval are exactly the +-10% ones."""
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import summarize_datacentre as summ
    finally:
        sys.path.pop(0)
    exp = tmp_path / "lodo_datacenter"
    spread = {"a": [0.9, 1.1, 0.5, 1.5], "b": list(np.linspace(0.8, 1.2, 40)), "c": list(np.linspace(0.8, 1.2, 40))}
    for device, ratios in spread.items():
        run = exp / f"llmco2-d-without-{device}-seed0"
        run.mkdir(parents=True)
        pred = np.full(len(ratios), 100.0)
        # the run's own interval: an in-domain +-2% widened x UNCALIBRATED_WIDENING (what an uncalibrated run writes)
        w = summ.UNCALIBRATED_WIDENING * np.log(1.02)
        pd.DataFrame({"device": device, "phase": "total", "energy_j": pred * np.array(ratios), "predicted_j": pred,
                      "low_j": pred * np.exp(-w), "high_j": pred * np.exp(w)}).to_csv(run / "predictions.csv", index=False)
    lines = summ.calibrated_coverage(tmp_path, "lodo_datacenter").splitlines()
    assert lines[2] == "| a | 50.0% |"
    assert lines[-1] == "| mean of the held-out devices (within 10 points of 80%) | 76.7% (2 of 3) |"  # b, c: 90%
    assert summ.calibrated_coverage(tmp_path / "none", "lodo_datacenter") == ""
