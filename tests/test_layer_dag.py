"""Structure of the layer DAG: node sets per variant, edges, acyclicity, JSON shape."""

from __future__ import annotations

import pytest

from llmco2.analytic.layer import KERNEL_KINDS, analyze_layer
from llmco2.analytic.layer_dag import layer_graph
from llmco2.specs import ModelArch, Request

FLASH_NODES = ["norm_attn", "q_proj", "k_proj", "v_proj", "fuse_attn", "out_proj", "add_attn", "norm_mlp",
               "gate_proj", "up_proj", "act_mlp", "down_proj", "add_mlp"]


def graph(arch, gpu, **req):
    return layer_graph(analyze_layer(arch, Request(batch_size=1, prompt_tokens=32, generated_tokens=8, **req), gpu))


def names(g):
    return [n["name"] for n in g["nodes"]]


def is_acyclic(nodes, edges) -> bool:
    indeg = {n: 0 for n in nodes}
    for _, dst in edges:
        indeg[dst] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for src, dst in edges:
            if src == n:
                indeg[dst] -= 1
                if indeg[dst] == 0:
                    ready.append(dst)
    return seen == len(nodes)


def test_flash_single_gpu_nodes(llama8b, a100) -> None:
    g = graph(llama8b, a100)
    assert names(g) == FLASH_NODES
    edges = {tuple(e) for e in g["edges"]}
    assert {("norm_attn", "q_proj"), ("q_proj", "fuse_attn"), ("v_proj", "fuse_attn"), ("fuse_attn", "out_proj"),
            ("out_proj", "add_attn"), ("add_attn", "norm_mlp"), ("gate_proj", "act_mlp"), ("up_proj", "act_mlp"),
            ("act_mlp", "down_proj"), ("down_proj", "add_mlp"), ("add_attn", "add_mlp")} <= edges
    assert is_acyclic(names(g), g["edges"])


def test_unfused_attention_nodes(llama8b, a100) -> None:
    g = graph(llama8b, a100, flash_attention=False)
    assert "fuse_attn" not in names(g)
    assert names(g)[4:7] == ["matmul_qk", "softmax", "matmul_sv"]
    edges = {tuple(e) for e in g["edges"]}
    assert {("q_proj", "matmul_qk"), ("k_proj", "matmul_qk"), ("matmul_qk", "softmax"), ("softmax", "matmul_sv"),
            ("v_proj", "matmul_sv"), ("matmul_sv", "out_proj")} <= edges


def test_all_reduce_only_with_several_gpus(llama8b, a100) -> None:
    g = graph(llama8b, a100, num_gpus=4)
    assert {"all_reduce_attn", "all_reduce_mlp"} <= set(names(g))
    edges = {tuple(e) for e in g["edges"]}
    assert ("out_proj", "all_reduce_attn") in edges and ("all_reduce_attn", "add_attn") in edges
    assert ("out_proj", "add_attn") not in edges
    assert is_acyclic(names(g), g["edges"])


def test_ungated_mlp_has_no_gate_proj(a100) -> None:
    bloom = ModelArch(id="bloom-test", hidden_size=1024, intermediate_size=4096, num_layers=24, num_heads=16,
                      num_kv_heads=16, head_dim=64, vocab_size=250880, mlp_gated=False, norm_type="layernorm",
                      activation="gelu", position_encoding="alibi", max_context=2048)
    g = graph(bloom, a100)
    assert "gate_proj" not in names(g)
    assert ("up_proj", "act_mlp") in {tuple(e) for e in g["edges"]}


def test_moe_has_router(a100) -> None:
    moe = ModelArch(id="moe-test", hidden_size=1024, intermediate_size=512, num_layers=4, num_heads=16, num_kv_heads=4,
                    head_dim=64, vocab_size=1000, num_experts=8, experts_per_token=2)
    g = graph(moe, a100)
    assert names(g).index("router") == names(g).index("norm_mlp") + 1
    assert {("norm_mlp", "router"), ("router", "gate_proj"), ("router", "up_proj")} <= {tuple(e) for e in g["edges"]}


def test_parallel_attention_mlp_reads_layer_input(a100) -> None:
    falcon = ModelArch(id="par-test", hidden_size=1024, intermediate_size=4096, num_layers=4, num_heads=16, num_kv_heads=1,
                       head_dim=64, vocab_size=1000, mlp_gated=False, parallel_attention=True, norm_type="layernorm")
    g = graph(falcon, a100)
    assert ("add_attn", "norm_mlp") not in {tuple(e) for e in g["edges"]}


@pytest.mark.parametrize("flash", [True, False])
def test_node_json_shape(llama8b, a100, flash: bool) -> None:
    g = graph(llama8b, a100, num_gpus=2, flash_attention=flash)
    for node in g["nodes"]:
        assert node["kind"] in KERNEL_KINDS
        for phase in ("prefill", "decode"):
            rec = node[phase]
            assert {"ops", "mem_bytes", "net_bytes", "perf"} <= set(rec)
            assert rec["mem_bytes"] == rec["weight_bytes"] + rec["act_load_bytes"] + rec["act_store_bytes"] + \
                rec["kv_load_bytes"] + rec["kv_store_bytes"]
            assert (rec["net_bytes"] > 0) == (node["kind"] == "all_reduce")
