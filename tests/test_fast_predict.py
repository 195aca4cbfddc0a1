"""The torch-free prediction path: equal to the training-side predictor, sidecar export and
refresh, columnar request handling, streaming of request files, lazy imports of the CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
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
from llmco2.models.dataset import energy_data, from_items
from llmco2.models.export import export_inference, sidecar_path
from llmco2.models.inference import load_inference
from llmco2.models.predict import default_checkpoint_path, load_reference_predictor
from llmco2.models.train import GNNPredictor, TrainConfig
from llmco2.specs import Request, get_gpu, get_model
from tests.helpers import run_cli as run
from tests.test_gnn import synthetic_table

ROOT = Path(__file__).resolve().parents[1]


def mixed_items() -> list:
    """Requests of every DAG variant: dense, MoE, parallel attention, layernorm, no FlashAttention,
    tensor parallel, int8, several engines, one generated token."""
    spec = [
        ("qwen2-0.5b", "jetson-orin", dict(batch_size=1, prompt_tokens=64, generated_tokens=16, engine="unknown")),
        ("qwen2-1.5b", "jetson-orin", dict(batch_size=2, prompt_tokens=300, generated_tokens=1)),
        ("tinyllama-1.1b", "a100-40gb", dict(batch_size=4, prompt_tokens=128, generated_tokens=64, engine="hf")),
        ("llama3.1-8b", "h100-sxm", dict(batch_size=8, prompt_tokens=1024, generated_tokens=128, num_gpus=2)),
        ("mixtral-8x7b", "h100-sxm", dict(batch_size=1, prompt_tokens=512, generated_tokens=32, num_gpus=4, engine="sglang")),
        ("falcon-7b", "a100-80gb", dict(batch_size=3, prompt_tokens=700, generated_tokens=100, flash_attention=False)),
        ("bloom-7b1", "l4", dict(batch_size=1, prompt_tokens=200, generated_tokens=20, weight_dtype="int8")),
        ("llama3.1-70b", "a100-80gb", dict(batch_size=16, prompt_tokens=2000, generated_tokens=300, num_gpus=8,
                                           tensor_parallel=4, engine="tensorrt-llm")),
        ("gemma-2b", "t4", dict(batch_size=5, prompt_tokens=198, generated_tokens=111, engine="vllm-eager")),
    ]
    return [(get_model(m), Request(**kw), get_gpu(g)) for m, g, kw in spec]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small checkpoint trained here on synthetic rows of two devices and two engines."""
    table = synthetic_table(90)
    table["device"] = np.where(np.arange(len(table)) // 2 % 2 == 0, "jetson-orin", "a100-40gb")
    table["engine"] = np.where(np.arange(len(table)) // 2 % 3 == 0, "hf", "vllm")
    table["latency_s"] = np.where(table["phase"] == "prefill", 0.05, 1.0)
    model = GNNPredictor(TrainConfig(hidden=24, max_epochs=4, seed=1))
    model.fit(energy_data(table), energy_data(synthetic_table(30, seed=2)))
    return model.save(tmp_path_factory.mktemp("ckpt") / "small.pt")


def _assert_same(fast, ref) -> None:
    for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j"):
        np.testing.assert_allclose(getattr(fast, name), getattr(ref, name), rtol=1e-6, atol=0, err_msg=name)
    assert fast.notes == ref.notes and fast.levels == ref.levels


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
    _assert_same(load_inference(checkpoint).predict(items), GNNPredictor.load(checkpoint).predict(items))


def test_shipped_checkpoint_fast_equals_reference() -> None:
    path = default_checkpoint_path()
    try:
        ref = load_reference_predictor(None)
    except Exception as exc:  # noqa: BLE001 - a checkpoint of another feature schema is skipped, not failed
        pytest.skip(f"shipped checkpoint does not load here: {exc}")
    items = mixed_items()
    _assert_same(load_inference(path).predict(items), ref.predict(items))


def test_sidecar_written_then_refreshed_when_stale(tmp_path: Path, checkpoint: Path, caplog) -> None:
    pt = tmp_path / "c.pt"
    pt.write_bytes(checkpoint.read_bytes())
    with caplog.at_level(logging.WARNING, logger="llmco2.models.inference"):
        first = load_inference(pt)
    assert sidecar_path(pt).is_file() and "writing the inference weights" in caplog.text
    caplog.clear()
    load_inference.cache_clear()
    load_inference(pt)
    assert "writing" not in caplog.text  # fresh sidecar: read, not rewritten
    other = GNNPredictor.load(checkpoint)
    assert other.net is not None
    with torch.no_grad():
        for p in other.net.parameters():
            p.mul_(1.5)
    other.save(pt)
    load_inference.cache_clear()
    with caplog.at_level(logging.WARNING, logger="llmco2.models.inference"):
        second = load_inference(pt)
    assert "writing the inference weights" in caplog.text
    items = mixed_items()
    assert not np.allclose(first.predict(items).energy_j, second.predict(items).energy_j)
    _assert_same(second.predict(items), GNNPredictor.load(pt).predict(items))


def test_export_refuses_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.pt"
    bad.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not an llmco2 checkpoint"):
        export_inference(bad)


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


REQUEST_CSV = ("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,engine,dtype\n"
               "qwen2-0.5b,jetson-orin,1,1,64,16,unknown,\n"
               "qwen2-1.5b,jetson-orin,1,2,300,1,,\n"
               "llama3.1-8b,h100,2,8,1024,128,hf,\n"
               "mixtral-8x7b,h100-sxm,4,1,512,32,sglang,\n"
               "falcon-7b,a100-80gb,1,3,700,100,,\n"
               "bloom-7b1,l4,1,1,200,20,,int8\n"
               "gemma-2b,t4,1,5,198,111,vllm-eager,\n")


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


def _modules_after(args: list[str], env_extra: dict[str, str] | None = None) -> set[str]:
    code = ("import sys\nfrom llmco2.cli import main\ntry:\n    main(" + repr(args) + ")\nexcept SystemExit:\n    pass\n"
            "print('MODULES', ' '.join(m for m in ('torch', 'torch_geometric', 'pandas') if m in sys.modules))")
    env = {**os.environ, **(env_extra or {})}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES"))
    return set(line.split()[1:])


def test_help_and_catalog_do_not_import_torch() -> None:
    assert _modules_after(["--help"]) == set()
    assert _modules_after(["catalog", "gpus"]) & {"torch", "torch_geometric"} == set()


def test_single_prediction_imports_neither_torch_nor_pandas(checkpoint: Path) -> None:
    load_inference(checkpoint)  # the sidecar exists: prediction reads it without torch
    args = ["predict", "--model", "qwen2-0.5b", "--gpu", "jetson-orin", "--batch-size", "1", "--prompt-tokens", "64",
            "--gen-tokens", "16", "--json", "--checkpoint", str(checkpoint)]
    assert _modules_after(args) == set()


def test_feature_log_equals_log1p_in_float32() -> None:
    from llmco2.graph.features import _INTENSITY_CAP, _log

    rng = np.random.default_rng(0)
    q = np.concatenate([10 ** rng.uniform(-12, 18, 200_000), rng.integers(0, 10**12, 50_000).astype(float),
                        [0.0, -0.0, -1.0, 0.5, 1.0, 1e-300, np.nan, np.inf, -np.inf]])
    expected = np.log1p(np.maximum(np.nan_to_num(q, posinf=_INTENSITY_CAP), 0.0))
    got = _log(q)
    assert np.array_equal(got.astype(np.float32), expected.astype(np.float32))  # the features are float32
    np.testing.assert_array_max_ulp(got, expected, maxulp=4)
    assert got[-3] == 0.0 and got[-2] == np.log1p(_INTENSITY_CAP) and got[-1] == 0.0


def test_forward_same_for_any_threads_and_block(checkpoint: Path, monkeypatch) -> None:
    import llmco2.models.numpy_forward as nf

    model = load_inference(checkpoint)
    items = mixed_items() * 7
    analysis = analyze_layers(RequestTable.from_items(items).layer_batch())
    g = model.graphs(analysis, model_totals(analysis))
    monkeypatch.setattr(nf, "FORWARD_BLOCK", 3)  # many blocks, shared out to the threads
    one = model.net(g, threads=1)
    assert np.array_equal(model.net(g, threads=3), one)
    assert np.ptp(one[:, 0]) > 0.01


def test_pipelined_prediction_equals_steps_and_reference(checkpoint: Path, monkeypatch) -> None:
    import llmco2.models.inference as inference

    items = mixed_items() * 3
    model = load_inference(checkpoint)
    monkeypatch.setattr(inference, "PIPELINE_ROWS", 4)
    monkeypatch.setenv("LLMCO2_THREADS", "2")
    table = RequestTable.from_items(items)
    whole = model.predict(table)
    steps = [model.predict(table.take(slice(lo, lo + 4))) for lo in range(0, len(items), 4)]
    for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j"):
        assert np.array_equal(getattr(whole, name), np.concatenate([getattr(p, name) for p in steps])), name
    assert whole.notes == [n for p in steps for n in p.notes]
    _assert_same(model.predict(items), GNNPredictor.load(checkpoint).predict(items))  # items: the other branch


def test_domain_note_lists_equal_one_by_one() -> None:
    from llmco2.models.head import domain_note_lists, domain_notes

    domain = {"devices": ["a100-40gb", "h100-sxm"], "engines": ["vllm"], "params": [5e8, 1e10],
              "prompt_tokens": [10, 1100], "generated_tokens": [1, 200], "batch_size": [1, 8], "num_gpus": [1, 2]}
    items = mixed_items() * 2
    notes = domain_note_lists(domain, items)
    assert notes == [domain_notes(domain, it) for it in items]
    assert any(len(n) >= 3 for n in notes) and any(n == [] for n in notes)
    notes[0].append("x")
    assert notes[9] == domain_notes(domain, items[9])  # every row owns its list
    assert domain_note_lists({}, items) == [[] for _ in items] and domain_note_lists(domain, []) == []


def test_arrow_conversions_round_trip() -> None:
    import pyarrow as pa

    from llmco2.analytic.arrow_arrays import arrow_array, empty_strings, numpy_values, string_array, string_scalar

    values = np.array([1.5, np.nan, -2.0, 4.0])
    arr = arrow_array(values, ~np.isnan(values))
    assert arr.to_pylist() == [1.5, None, -2.0, 4.0]
    flags = arrow_array(np.array([True, False, True, True, False, False, True, True, True]))
    assert numpy_values(flags.slice(3)).tolist() == [True, False, False, True, True, True]
    ints = arrow_array(np.arange(10, dtype=np.int64))
    assert numpy_values(ints.slice(4, 3)).tolist() == [4, 5, 6]
    assert empty_strings(3).to_pylist() == ["", "", ""] and string_array(["a", "", "bé"]).to_pylist() == ["a", "", "bé"]
    assert string_scalar("x").as_py() == "x" and string_scalar("x").type == pa.string()
    with pytest.raises(ValueError):
        numpy_values(arr)


def test_request_file_prediction_imports_neither_torch_nor_pandas(tmp_path: Path, checkpoint: Path) -> None:
    load_inference(checkpoint)
    src = tmp_path / "req.csv"
    src.write_text(REQUEST_CSV)
    args = ["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"), "--checkpoint", str(checkpoint)]
    assert _modules_after(args) == set()
    assert (tmp_path / "out.csv").read_text().count("\n") == REQUEST_CSV.count("\n")


def test_request_file_cells_with_commas_are_quoted_in_the_output(tmp_path: Path, checkpoint: Path, capsys) -> None:
    import csv

    src = tmp_path / "req.csv"
    src.write_text('model,gpu,batch_size,prompt_tokens,generated_tokens,comment\n'
                   'qwen2-0.5b,jetson-orin,1,64,16,plain\nqwen2-0.5b,jetson-orin,1,64,16,"a, ""b"""\n')
    out = tmp_path / "p.csv"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out), "--checkpoint", str(checkpoint)], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(out.open(newline="")))
    assert [r["comment"] for r in rows] == ["plain", 'a, "b"'] and float(rows[1]["total_j"]) > 0


@pytest.mark.parametrize("layers, hidden", [(1, 16), (3, 8)])
def test_forward_any_depth_and_width_equals_plain_loops(layers: int, hidden: int) -> None:
    from llmco2.graph.features import build_graph_arrays
    from llmco2.models.numpy_forward import SageForward

    analysis = analyze_layers(RequestTable.from_items(mixed_items()).layer_batch())
    g = build_graph_arrays(analysis, model_totals(analysis))
    x = (g.x - g.x.mean(axis=0)) / (g.x.std(axis=0) + 1.0)
    rng = np.random.default_rng(3)
    weights, width = {}, x.shape[1]
    for i in range(layers):
        weights |= {f"convs.{i}.lin_l.weight": rng.normal(0, 0.3, (hidden, width)), f"convs.{i}.lin_l.bias": rng.normal(0, 0.1, hidden),
                    f"convs.{i}.lin_r.weight": rng.normal(0, 0.3, (hidden, width))}
        width = hidden
    weights |= {"head.0.weight": rng.normal(0, 0.3, (5, 2 * hidden + g.u.shape[1])), "head.0.bias": rng.normal(0, 0.1, 5),
                "head.2.weight": rng.normal(0, 0.3, (2, 5)), "head.2.bias": np.zeros(2)}
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    net = SageForward.from_state_dict(weights, layers, True)
    got = net(type(g)(x=x.astype(np.float32), edge_index=g.edge_index, batch=g.batch, u=g.u, num_graphs=g.num_graphs))
    expected = []
    for i in range(g.num_graphs):  # one graph at a time, SAGEConv's formula as written
        nodes = np.flatnonzero(g.batch == i)
        h = x[nodes].astype(np.float64)
        edges = [(s - nodes[0], d - nodes[0]) for s, d in g.edge_index.T if g.batch[d] == i]
        for j in range(layers):
            agg = np.zeros_like(h)
            for d in range(len(nodes)):
                srcs = [s for s, dd in edges if dd == d]
                if srcs:
                    agg[d] = h[srcs].mean(axis=0)
            h = np.maximum(agg @ weights[f"convs.{j}.lin_l.weight"].T + weights[f"convs.{j}.lin_l.bias"]
                           + h @ weights[f"convs.{j}.lin_r.weight"].T, 0.0)
        z = np.concatenate([h.mean(axis=0), h.max(axis=0), g.u[i]])
        z = np.maximum(z @ weights["head.0.weight"].T + weights["head.0.bias"], 0.0)
        expected.append(z @ weights["head.2.weight"].T + weights["head.2.bias"])
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-4, atol=1e-4)
    assert np.ptp(got[:, 0]) > 1e-3
