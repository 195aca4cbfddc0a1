"""Graph embedding: shapes, node sets per variant, edges per graph, subsets, scaling and schema version."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.analytic.layer import LayerBatch, analyze_layer, analyze_layers
from llmco2.analytic.layer_dag import layer_graph
from llmco2.analytic.model import model_totals
from llmco2.errors import InvalidInputError
from llmco2.graph import GLOBAL_FEATURES, NODE_FEATURES, FeatureScaler, build_graph_arrays, subset
from llmco2.graph.features import graph_list
from llmco2.specs import ModelArch, Request


def arrays_for(items):
    analysis = analyze_layers(LayerBatch.from_items(items))
    return analysis, build_graph_arrays(analysis, model_totals(analysis))


def test_graphs_match_the_layer_dag(llama8b, a100) -> None:
    reqs = [Request(batch_size=1, prompt_tokens=64, generated_tokens=8),
            Request(batch_size=2, prompt_tokens=32, generated_tokens=4, num_gpus=2, flash_attention=False)]
    analysis, g = arrays_for([(llama8b, r, a100) for r in reqs])
    assert g.x.shape[1] == len(NODE_FEATURES) and g.u.shape == (2, len(GLOBAL_FEATURES))
    for req, graph in zip(reqs, graph_list(g), strict=True):
        dag = layer_graph(analyze_layer(llama8b, req, a100))
        assert graph["x"].shape[0] == len(dag["nodes"])
        onehot = graph["x"][:, : len(NODE_FEATURES) - 24].argmax(axis=1)
        from llmco2.analytic.layer import KERNEL_NAMES

        assert [KERNEL_NAMES[k] for k in onehot] == [n["name"] for n in dag["nodes"]]
        names = [n["name"] for n in dag["nodes"]]
        assert sorted(map(tuple, graph["edge_index"].T.tolist())) == sorted((names.index(s), names.index(d)) for s, d in dag["edges"])
        # prefill log_ops of q_proj is log1p of the analytic count
        q = names.index("q_proj")
        col = NODE_FEATURES.index("prefill_log_ops")
        assert graph["x"][q, col] == pytest.approx(np.log1p(dag["nodes"][q]["prefill"]["ops"]), rel=1e-6)


def test_edges_stay_inside_their_graph(llama8b, a100) -> None:
    moe = ModelArch(id="m", hidden_size=512, intermediate_size=256, num_layers=2, num_heads=8, num_kv_heads=2, head_dim=64,
                    vocab_size=100, num_experts=4, experts_per_token=2)
    items = [(llama8b if i % 2 else moe, Request(batch_size=1 + i % 3, prompt_tokens=16 + i, generated_tokens=2 + i,
                                                num_gpus=1 + (i % 2), flash_attention=bool(i % 3)), a100) for i in range(12)]
    _, g = arrays_for(items)
    assert np.array_equal(g.batch[g.edge_index[0]], g.batch[g.edge_index[1]])
    sub = subset(g, np.array([5, 2]))
    assert sub.num_graphs == 2 and np.array_equal(sub.u, g.u[[5, 2]])
    assert np.array_equal(sub.x[sub.batch == 0], g.x[g.batch == 5])
    assert sub.edge_index.max() < len(sub.x)


def test_scaler_round_trip_and_version_check(llama8b, a100) -> None:
    _, g = arrays_for([(llama8b, Request(batch_size=b, prompt_tokens=16 * b, generated_tokens=4), a100) for b in range(1, 6)])
    scaler = FeatureScaler.fit(g)
    scaled = scaler.transform(g)
    assert np.allclose(scaled.u[:, GLOBAL_FEATURES.index("log_batch")].mean(), 0.0, atol=1e-5)
    onehot = NODE_FEATURES.index("kernel_q_proj")
    assert set(np.unique(scaled.x[:, onehot])) <= {0.0, 1.0}  # one-hots are not standardised
    state = scaler.state_dict()
    assert np.allclose(FeatureScaler.from_state_dict(state).node_std, scaler.node_std)
    with pytest.raises(InvalidInputError, match="schema version"):
        FeatureScaler.from_state_dict({**state, "schema_version": 0})


def test_an_analysis_moved_to_other_gpus_equals_a_fresh_one() -> None:
    """on_hardware keeps the kernels' costs and recomputes their roofline: the same as analysing
    the requests on the other GPUs from scratch."""
    from dataclasses import replace as dc_replace

    from llmco2.analytic.layer import LayerBatch, analyze_layers, on_hardware
    from llmco2.specs import Request, get_gpu, get_model

    items = [(get_model(m), Request(batch_size=b, prompt_tokens=p, generated_tokens=64, num_gpus=g, tensor_parallel=g), get_gpu("h100-sxm"))
             for m, b, p, g in (("llama3.1-8b", 1, 512, 1), ("mixtral-8x7b", 8, 2048, 2), ("qwen2-0.5b", 32, 64, 1))]
    base = analyze_layers(LayerBatch.from_items(items))
    other = get_gpu("a100-80gb")
    batch = dc_replace(base.batch, peak_ops_per_s=np.full(3, other.peak_ops_per_s("bf16")),
                       mem_bw_bytes_per_s=np.full(3, other.memory_bandwidth_bytes_per_s),
                       net_bw_bytes_per_s=np.full(3, other.interconnect_bytes_per_s))
    moved, fresh = on_hardware(base, batch), analyze_layers(batch)
    for phase in fresh.roofline:
        for name, point in fresh.roofline[phase].items():
            assert np.array_equal(moved.roofline[phase][name].time_s, point.time_s)
    assert not np.array_equal(moved.roofline["decode"]["q_proj"].time_s, base.roofline["decode"]["q_proj"].time_s)
