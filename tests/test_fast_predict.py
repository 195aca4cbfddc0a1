"""The torch-free prediction path: equal to the training-side predictor, a rewritten checkpoint
read again, columnar request handling, streaming of request files, lazy imports of the CLI."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import llmco2.analytic.request_files as rf
from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.analytic.request_files import iter_request_chunks
from llmco2.analytic.table import RequestTable
from llmco2.data.dataset import from_items
from llmco2.prediction.inference import load_inference
from llmco2.prediction.loading import default_checkpoint_path
from llmco2.training.train import GNNPredictor, load_reference_predictor
from tests.fast_predict_support import REQUEST_CSV, assert_same, mixed_items, modules_after, train_small_checkpoint
from tests.helpers import run_cli as run
from tests.test_gnn import synthetic_table


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small checkpoint trained here on synthetic rows of two devices and two engines."""
    return train_small_checkpoint(tmp_path_factory.mktemp("ckpt"))


def test_numpy_network_matches_torch(checkpoint: Path) -> None:
    ref = GNNPredictor.load(checkpoint)
    fast = load_inference(checkpoint)
    items = mixed_items()
    z_ref = ref.network_outputs(ref.scaler.transform(ref._graphs(from_items(items))))
    table = RequestTable.from_items(items)
    analysis = analyze_layers(table.layer_batch())
    z_fast = fast.outputs(analysis, model_totals(analysis))
    assert z_fast.shape == z_ref.shape
    np.testing.assert_allclose(z_fast, z_ref, rtol=0, atol=1e-5)
    assert np.ptp(z_ref[:, 0]) > 0.01  # the outputs vary: the comparison is not between constants


def test_fast_predictions_equal_the_reference(checkpoint: Path) -> None:
    items = mixed_items()
    assert_same(load_inference(checkpoint).predict(items), GNNPredictor.load(checkpoint).predict(items))


def test_shipped_checkpoint_fast_equals_reference() -> None:
    path = default_checkpoint_path()
    try:
        ref = load_reference_predictor(None)
    except Exception as exc:  # noqa: BLE001 - a checkpoint of another feature schema is skipped, not failed
        pytest.skip(f"shipped checkpoint does not load here: {exc}")
    items = mixed_items()
    assert_same(load_inference(path).predict(items), ref.predict(items))


def test_rewritten_checkpoint_is_read_again(tmp_path: Path, checkpoint: Path) -> None:
    path = tmp_path / "c.safetensors"
    path.write_bytes(checkpoint.read_bytes())
    first = load_inference(path)
    other = GNNPredictor.load(checkpoint)
    assert other.net is not None
    with torch.no_grad():
        for p in other.net.parameters():
            p.mul_(1.5)
    other.save(path)
    load_inference.cache_clear()
    second = load_inference(path)
    items = mixed_items()
    assert not np.allclose(first.predict(items).energy_j, second.predict(items).energy_j)
    assert_same(second.predict(items), GNNPredictor.load(path).predict(items))


def test_layer_batch_from_items_equals_one_by_one() -> None:
    items = mixed_items() + [(a, r.replace(batch_size=r.batch_size + 1), g) for a, r, g in mixed_items()]
    together = LayerBatch.from_items(items)
    alone = [LayerBatch.from_items([it]) for it in items]
    columnar = RequestTable.from_items(items).layer_batch()
    for f in fields(LayerBatch):
        expected = np.concatenate([getattr(b, f.name) for b in alone])
        assert np.array_equal(getattr(together, f.name), expected), f.name
        assert np.array_equal(getattr(columnar, f.name), expected), f.name
        assert getattr(together, f.name).dtype == expected.dtype


def test_request_table_round_trip() -> None:
    items = mixed_items()
    assert RequestTable.from_items(items).items() == items


def test_predict_file_chunks_give_the_same_rows(tmp_path: Path, checkpoint: Path, capsys) -> None:
    src = tmp_path / "req.csv"
    src.write_text(REQUEST_CSV)
    whole = pd.DataFrame()
    for rows in (2, 1000):
        out = tmp_path / f"pred{rows}.csv"
        old, rf.CHUNK_ROWS = rf.CHUNK_ROWS, rows
        try:
            code, _, err = run(["predict", "--requests", str(src), "--out", str(out), "--checkpoint", str(checkpoint)], capsys)
        finally:
            rf.CHUNK_ROWS = old
        assert code == 0, err
        frame = pd.read_csv(out)
        if whole.empty:
            whole = frame
        pd.testing.assert_frame_equal(frame, whole)
    assert list(whole["model"]) == [line.split(",")[0] for line in REQUEST_CSV.splitlines()[1:]]
    assert (whole["total_j_low"] <= whole["total_j"]).all() and (whole["total_j"] <= whole["total_j_high"]).all()
    assert whole.loc[1, "decode_j"] == 0
    items = list(iter_request_chunks(src))[0].table.items()
    expected = load_inference(checkpoint).predict(items).energy_j.sum(axis=1)
    np.testing.assert_allclose(whole["total_j"], expected, rtol=1e-6)  # float32 sums differ slightly by batch
    assert not list(tmp_path.glob(".pred*"))  # no temporary file left


def test_engine_column_and_option_change_predictions(tmp_path: Path, checkpoint: Path, capsys) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,engine\nqwen2-0.5b,jetson-orin,1,64,16,hf\n"
                   "qwen2-0.5b,jetson-orin,1,64,16,\n")
    out = tmp_path / "p.csv"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out), "--engine", "tensorrt-llm", "--checkpoint",
                        str(checkpoint)], capsys)
    assert code == 0, err
    frame = pd.read_csv(out)
    assert frame.loc[0, "latency_s"] != frame.loc[1, "latency_s"]  # hf vs the --engine default for the empty cell
    request = ["predict", "--model", "qwen2-0.5b", "--gpu", "jetson-orin", "--batch-size", "1", "--prompt-tokens", "64",
               "--gen-tokens", "16", "--checkpoint", str(checkpoint), "--json"]
    code, text, _ = run([*request, "--engine", "hf"], capsys)
    doc = json.loads(text)
    assert code == 0 and doc["engine"] == "hf" and doc["assumptions"]["engine"]["id"] == "hf"
    band = doc["energy_j_interval"]
    for phase in ("prefill", "decode", "total"):
        assert band[phase][0] <= doc["energy_j"][phase] <= band[phase][1]
    assert band["total"][0] == pytest.approx(band["prefill"][0] + band["decode"][0])
    code, _, err = run([*request, "--engine", "warp-drive"], capsys)
    assert code == 2 and "warp-drive" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("body, mention", [
    ("qwen2-0.5b,jetson-orin,1,x,16\n", "line 3: prompt_tokens"),
    ("qwen2-0.5b,jetson-orin,1,64,16\nnope-1b,jetson-orin,1,64,16\n", "line 4"),
    ("qwen2-0.5b,atlantis-gpu,1,64,16\n", "line 3"),
    ("qwen2-0.5b,jetson-orin,1,64\n", "line 3: malformed CSV row"),
])
def test_bad_request_rows_name_their_line(tmp_path: Path, checkpoint: Path, capsys, body: str, mention: str) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens\nqwen2-0.5b,jetson-orin,1,64,16\n" + body)
    out = tmp_path / "p.csv"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out), "--checkpoint", str(checkpoint)], capsys)
    assert code == 2 and mention in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_evaluate_with_no_usable_rows_exits_2(tmp_path: Path, checkpoint: Path, capsys) -> None:
    table = synthetic_table(3)
    table["prompt_tokens"] = np.nan  # steady-state averages: no prompt length
    path = tmp_path / "rows.csv"
    table.to_csv(path, index=False)
    code, _, err = run(["evaluate", "--data", str(path), "--checkpoint", str(checkpoint), "--json"], capsys)
    assert code == 2 and "no usable rows" in err and len(err.strip().splitlines()) == 1, err
    assert "left out: 6 no integral batch size" in err


def test_evaluate_reports_interval_coverage(tmp_path: Path, checkpoint: Path, capsys) -> None:
    path = tmp_path / "rows.csv"
    synthetic_table(20, seed=5).to_csv(path, index=False)
    code, out, err = run(["evaluate", "--data", str(path), "--checkpoint", str(checkpoint), "--json"], capsys)
    assert code == 0, err
    iv = json.loads(out)["interval"]
    assert iv["n"] == 40 and 0.0 <= iv["coverage"] <= 1.0 and iv["below"] + iv["above"] == pytest.approx(1 - iv["coverage"])
    assert set(iv["per_phase"]) == {"prefill", "decode"}


def test_help_and_catalog_do_not_import_torch() -> None:
    assert modules_after(["--help"]) == set()
    assert modules_after(["catalog", "gpus"]) & {"torch", "torch_geometric"} == set()


def test_single_prediction_imports_neither_torch_nor_pandas(checkpoint: Path) -> None:
    load_inference(checkpoint)  # the sidecar exists: prediction reads it without torch
    args = ["predict", "--model", "qwen2-0.5b", "--gpu", "jetson-orin", "--batch-size", "1", "--prompt-tokens", "64",
            "--gen-tokens", "16", "--json", "--checkpoint", str(checkpoint)]
    assert modules_after(args) == set()
