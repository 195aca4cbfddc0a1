"""Internals of the fast prediction path: feature log, forward threads, blocks and any width,
pipelined steps, columnar head and notes, Arrow conversions, request-file chunks and output."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import llmco2.analytic.request_files as rf
from llmco2.analytic.layer import analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.analytic.table import RequestTable
from llmco2.prediction.inference import load_inference
from llmco2.specs import get_gpu
from llmco2.training.train import GNNPredictor
from tests.fast_predict_support import REQUEST_CSV, assert_same, mixed_items, modules_after, train_small_checkpoint
from tests.helpers import run_cli as run


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small checkpoint trained here on synthetic rows of two devices and two engines."""
    return train_small_checkpoint(tmp_path_factory.mktemp("ckpt"))


def test_feature_log_equals_log1p_in_float32() -> None:
    from llmco2.graph.features import _INTENSITY_CAP, _log

    rng = np.random.default_rng(0)
    q = np.concatenate([10 ** rng.uniform(-12, 18, 200_000), rng.integers(0, 10**12, 50_000).astype(float),
                        [0.0, -0.0, -1.0, 0.5, 1.0, 1e-300, np.nan, np.inf, -np.inf]])
    expected = np.log1p(np.maximum(np.nan_to_num(q, posinf=_INTENSITY_CAP), 0.0))
    got = _log(q)
    assert np.array_equal(got.astype(np.float32), expected.astype(np.float32))  # the features are float32
    assert np.array_equal(_log(q.copy(), overwrite=True), got)
    np.testing.assert_array_max_ulp(got, expected, maxulp=4)
    assert got[-3] == 0.0 and got[-2] == np.log1p(_INTENSITY_CAP) and got[-1] == 0.0


def test_forward_same_for_any_threads_and_block(checkpoint: Path, monkeypatch) -> None:
    import llmco2.prediction.numpy_forward as nf

    model = load_inference(checkpoint)
    items = mixed_items() * 7
    analysis = analyze_layers(RequestTable.from_items(items).layer_batch())
    g = model.graphs(analysis, model_totals(analysis))
    monkeypatch.setattr(nf, "FORWARD_BLOCK", 3)  # many blocks, shared out to the threads
    one = model.net(g, threads=1)
    assert np.array_equal(model.net(g, threads=3), one)
    assert np.ptp(one[:, 0]) > 0.01


def test_pipelined_prediction_equals_steps_and_reference(checkpoint: Path, monkeypatch) -> None:
    import llmco2.prediction.inference as inference

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
    assert_same(model.predict(items), GNNPredictor.load(checkpoint).predict(items))  # items: the other branch


def test_domain_note_lists_equal_one_by_one() -> None:
    from llmco2.prediction.domain_notes import domain_note_lists, domain_notes

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
    assert modules_after(args) == set()
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
    from llmco2.prediction.numpy_forward import SageForward

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


def test_columnar_head_equals_items_and_plain_loops(checkpoint: Path) -> None:
    from llmco2.physics.priors import PhaseInputs
    from llmco2.prediction.domain_notes import domain_note_lists, domain_notes
    from llmco2.prediction.head import device_group
    from llmco2.prediction.intervals import UNCALIBRATED_WIDENING

    model, items = load_inference(checkpoint), mixed_items() * 3
    table = RequestTable.from_items(items)
    analysis = analyze_layers(table.layer_batch())
    totals, z = model_totals(analysis), model.outputs(analysis, model_totals(analysis))
    by_table, by_items = PhaseInputs.build(table, analysis, totals), PhaseInputs.build(items, analysis, totals)
    for f in fields(PhaseInputs):
        a, b = getattr(by_table, f.name), getattr(by_items, f.name)
        if f.name == "hardware":  # per-row arrays of the GPUs' power-relevant figures
            assert all(np.array_equal(getattr(a, g.name), getattr(b, g.name)) for g in fields(a)), f.name
            continue
        assert np.array_equal(a, b), f.name
    assert by_table.groups == [device_group(it) for it in items] and by_table.devices == [g.id for _, _, g in items]
    physics, head = model.head.physics, model.head
    expected = [physics.efficiency.get(d) or physics.efficiency.get(g) or [0.5, 0.5] for d, g in zip(by_table.devices, by_table.groups, strict=True)]
    assert np.array_equal(physics.efficiencies([str(d) for d in by_table.devices], np.array(by_table.groups)), expected)
    launch, _, _ = physics.overheads(by_table.engines)
    assert np.array_equal(launch, [physics.launch_us.get(e, physics.launch_us.get("unknown", 8.0)) * 1e-6 for e in by_table.engines])
    flags = [i % 2 == 0 for i in range(len(items))]
    lo, hi = head.intervals.log_bounds(by_table.groups, flags)
    cal = head.intervals
    for i, (group, out) in enumerate(zip(by_table.groups, flags, strict=True)):  # the interval rule one row at a time
        for p, name in enumerate(("prefill", "decode")):
            b, o = cal._in(name, group), cal.out_of_domain.get(name)
            b = ([min(b[0], o[0]), max(b[1], o[1])] if o else [UNCALIBRATED_WIDENING * v for v in b]) if out else b
            assert (lo[i, p], hi[i, p]) == (b[0], b[1])
    notes = domain_note_lists(head.domain, table, analysis.batch.params)
    assert notes == domain_note_lists(head.domain, items) == [domain_notes(head.domain, it) for it in items]
    a, b = head.finish(z, table, analysis, totals), head.finish(z, items, analysis, totals)
    for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.notes == b.notes


def test_value_codes_compare_by_value() -> None:
    from llmco2.analytic.table import value_codes

    words = ["".join(w) for w in (("h", "1"), ("a", "1"), ("h", "1"))]  # equal strings, distinct objects
    assert words[0] is not words[2]
    for given in (words, tuple(words), np.array(words)):
        values, code = value_codes(given)
        assert [values[c] for c in code] == words and len(values) == 2
    values, code = value_codes([])
    assert values == [] and len(code) == 0


def test_request_chunks_have_exactly_chunk_rows() -> None:
    import pyarrow as pa

    batches = [pa.record_batch({"a": pa.array([str(i) for i in range(lo, lo + k)])}) for lo, k in ((0, 3), (3, 0), (3, 5), (8, 1), (9, 7))]
    out = list(rf._rebatch(iter(batches), 4))
    assert [b.num_rows for b in out] == [4, 4, 4, 4] and pa.concat_arrays([b["a"] for b in out]).to_pylist() == [str(i) for i in range(16)]
    assert [b.num_rows for b in rf._rebatch(iter(batches), 6)] == [6, 6, 4]


def test_node_features_of_a_batch_equal_one_request_at_a_time() -> None:
    from llmco2.graph.features import KERNEL_NAMES, build_graph_arrays

    items = mixed_items()
    analysis = analyze_layers(RequestTable.from_items(items).layer_batch())
    together = build_graph_arrays(analysis, model_totals(analysis))
    alone = []
    for it in items:
        one = analyze_layers(RequestTable.from_items([it]).layer_batch())
        alone.append(build_graph_arrays(one, model_totals(one)).x)
    expected = np.concatenate(alone)
    k = len(KERNEL_NAMES)
    assert np.array_equal(together.x[:, :k], expected[:, :k]) and (together.x[:, :k].sum(axis=1) == 1).all()
    np.testing.assert_allclose(together.x, expected, rtol=1e-6, atol=0)  # every row written: no stale memory


def test_file_gpus_read_only_when_they_can_change_the_default_pue() -> None:
    from llmco2.api.files import first_chunk_gpus_suffice, first_chunk_limit
    from llmco2.api.options import Assumptions, FileJob

    plain, pue = FileJob("in.csv", "out.csv"), FileJob("in.csv", "out.csv", assumptions=Assumptions(pue="1.2"))
    edge, dc, full = [get_gpu("jetson-orin")], [get_gpu("jetson-orin"), get_gpu("a100-40gb")], first_chunk_limit()
    assert first_chunk_gpus_suffice(edge, full - 1, plain) and first_chunk_gpus_suffice(dc, full, plain)
    assert first_chunk_gpus_suffice(edge, full, pue)
    assert not first_chunk_gpus_suffice(edge, full, plain)


def test_cache_halves_only_splits_into_large_products() -> None:
    from llmco2.prediction.numpy_forward import BIAS_IN_PRODUCT, CACHE_BLOCK, cache_halves

    block = np.arange(256, dtype=np.int64)
    halves = cache_halves(block, 14, 43)  # the shipped network: 43 node features, hidden 128
    assert [len(h) for h in halves] == [128, 128] and np.array_equal(np.concatenate(halves), block)
    for h in halves:
        assert 43 * len(h) * 14 * 2 * 43 >= BIAS_IN_PRODUCT
    assert len(cache_halves(block[:CACHE_BLOCK], 14, 43)) == 1  # small enough already
    assert len(cache_halves(block, 14, 4)) == 1  # halves too small for the large-product path


def test_requests_on_gpus_the_network_never_saw_skip_their_graphs(monkeypatch) -> None:
    """With the shipped checkpoint (which saw the H100 and the A100 80GB, not the T4 or the L4), a T4 or L4
    request is predicted by the step physics alone: the head never reads its network outputs, so they are not
    computed, and a batch mixing both kinds, reordered into steps and back, predicts what the network run on every
    request gives, in the requests' order."""
    import llmco2.prediction.inference as inference
    from llmco2.prediction.loading import default_checkpoint_path
    from llmco2.specs import Request, get_model

    model = load_inference(default_checkpoint_path())
    spec = [("llama3.1-8b", "t4", 1), ("llama3.1-8b", "h100-sxm", 4), ("qwen2-1.5b", "l4", 2), ("qwen2-1.5b", "a100-80gb", 8),
            ("mistral-7b", "l4", 3), ("mistral-7b", "h100-sxm", 1)] * 3
    items = [(get_model(m), Request(batch_size=b, prompt_tokens=100 + 37 * i, generated_tokens=20 + i), get_gpu(g))
             for i, (m, g, b) in enumerate(spec)]
    skip = model.head.correction_unused(items)
    assert skip.tolist() == [g in ("t4", "l4") for _, g, _ in spec]
    analysis = analyze_layers(RequestTable.from_items(items).layer_batch())
    totals = model_totals(analysis)
    z = model.net(model.graphs(analysis, totals, items))  # the network on every request
    full = model.head.finish(z, items, analysis, totals)
    other = z.copy()
    other[skip] = 7.0  # outputs the head sets aside: any value gives the same prediction
    assert_same(model.head.finish(other, items, analysis, totals), full)
    assert np.array_equal(model.outputs(analysis, totals, items)[skip], np.zeros((skip.sum(), z.shape[1]), np.float32))
    monkeypatch.setattr(inference, "PIPELINE_ROWS", 4)  # reordered into steps of four, then put back
    for threads in ("1", "2"):
        monkeypatch.setenv("LLMCO2_THREADS", threads)
        assert_same(model.predict(items), full)
        assert_same(model.predict(RequestTable.from_items(items)), full)
