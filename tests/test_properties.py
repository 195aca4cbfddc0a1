"""Property tests: TP splits per-chip work as the rules say, totals are per-chip x chips, linear
kernels grow linearly with generated tokens, and the vectorised batch equals one-by-one analysis."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmco2.analytic.layer import KERNEL_NAMES, LayerBatch, analyze_layer, analyze_layers
from llmco2.analytic.model import head_costs, model_totals
from llmco2.analytic.parallel import attention_cost
from llmco2.specs import GPU, ModelArch, Request

SPLIT_BY_TP = ("q_proj", "k_proj", "v_proj", "fuse_attn", "out_proj", "gate_proj", "up_proj", "act_mlp", "down_proj")
REPLICATED = ("norm_attn", "add_attn", "norm_mlp", "add_mlp")
LINEAR = ("q_proj", "k_proj", "v_proj", "out_proj", "gate_proj", "up_proj", "down_proj", "norm_attn", "add_attn", "act_mlp")

archs = st.builds(
    lambda kv, group, dh, mult, layers, inter_mult, gated: ModelArch(
        id="prop", hidden_size=kv * group * dh, intermediate_size=kv * group * dh * inter_mult // 2 * 2, num_layers=layers,
        num_heads=kv * group, num_kv_heads=kv, head_dim=dh, vocab_size=1000 * mult, mlp_gated=gated, max_context=1 << 20),
    kv=st.sampled_from([4, 8]), group=st.sampled_from([1, 2, 4]), dh=st.sampled_from([32, 64, 128]),
    mult=st.integers(1, 50), layers=st.integers(1, 40), inter_mult=st.integers(2, 4), gated=st.booleans(),
)
requests = st.fixed_dictionaries(dict(
    batch_size=st.integers(1, 16), prompt_tokens=st.integers(1, 4096), generated_tokens=st.integers(1, 1024),
    flash_attention=st.booleans()))


def _gpu() -> GPU:
    return GPU(id="g", name="g", vendor="v", architecture="a", form_factor="SXM", memory_type="HBM", memory_size_gb=80.0,
               memory_bandwidth_gb_s=2000.0, interconnect="nv", interconnect_bandwidth_gb_s=600.0, tdp_w=400.0,
               process_node_nm=7, gpus_per_node=8, release_year=2020, peak_dense_tops={"fp16": 300.0}, sources={})


@settings(max_examples=40, deadline=None)
@given(arch=archs, req=requests, tp=st.sampled_from([2, 4]))
def test_tp_splits_sharded_kernels_and_replicates_the_rest(arch, req, tp) -> None:
    gpu = _gpu()
    one = analyze_layer(arch, Request(**req), gpu)
    many = analyze_layer(arch, Request(**req, num_gpus=tp), gpu)
    for phase in ("prefill", "decode"):
        for name in SPLIT_BY_TP:
            if not one.present[name][0]:
                continue
            a, b = one.costs[phase][name], many.costs[phase][name]
            assert np.isclose(b.ops[0] * tp, a.ops[0])
            assert np.isclose(b.weight_bytes[0] * tp, a.weight_bytes[0])
            assert np.isclose(b.kv_store_bytes[0] * tp, a.kv_store_bytes[0])
            assert np.isclose(b.kv_load_bytes[0] * tp, a.kv_load_bytes[0])
        for name in REPLICATED:
            assert np.isclose(many.costs[phase][name].ops[0], one.costs[phase][name].ops[0])
        assert many.costs[phase]["all_reduce_attn"].net_bytes[0] >= 0
        assert one.costs[phase]["all_reduce_attn"].net_bytes[0] == 0


@settings(max_examples=40, deadline=None)
@given(arch=archs, req=requests, tp=st.sampled_from([1, 2, 4]))
def test_model_totals_are_per_chip_times_chips(arch, req, tp) -> None:
    analysis = analyze_layer(arch, Request(**req, num_gpus=tp), _gpu())
    totals = model_totals(analysis)
    for phase in ("prefill", "decode"):
        per_chip = analysis.total(phase, "ops")[0] * arch.num_layers + sum(c.ops[0] for c in head_costs(analysis.batch, phase).values())
        assert np.isclose(totals.totals[phase]["ops"][0], per_chip * tp)


@settings(max_examples=40, deadline=None)
@given(arch=archs, req=requests, extra=st.integers(1, 200))
def test_linear_kernels_grow_linearly_with_generated_tokens(arch, req, extra) -> None:
    gpu = _gpu()
    g1 = req["generated_tokens"] + 1
    a = analyze_layer(arch, Request(**{**req, "generated_tokens": g1}), gpu)
    b = analyze_layer(arch, Request(**{**req, "generated_tokens": g1 + extra}), gpu)
    for name in LINEAR:
        if not a.present[name][0]:
            continue
        per_step = a.costs["decode"][name].ops[0] / (g1 - 1)
        assert np.isclose(b.costs["decode"][name].ops[0], per_step * (g1 + extra - 1))
        assert np.isclose(b.costs["decode"][name].mem_bytes[0] / (g1 + extra - 1), a.costs["decode"][name].mem_bytes[0] / (g1 - 1))
        assert b.costs["prefill"][name].ops[0] == a.costs["prefill"][name].ops[0]


@settings(max_examples=15, deadline=None)
@given(items=st.lists(st.tuples(archs, requests, st.sampled_from([1, 2])), min_size=1, max_size=6))
def test_vectorised_batch_equals_one_by_one(items) -> None:
    gpu = _gpu()
    triples = [(arch, Request(**req, num_gpus=tp), gpu) for arch, req, tp in items]
    batch = analyze_layers(LayerBatch.from_items(triples))
    for i, (arch, req, g) in enumerate(triples):
        single = analyze_layer(arch, req, g)
        assert single.present == {k: v[i:i + 1] for k, v in batch.present.items()} or all(
            bool(single.present[k][0]) == bool(batch.present[k][i]) for k in KERNEL_NAMES)
        for phase in ("prefill", "decode"):
            for q in ("ops", "mem_bytes", "net_bytes", "time_s"):
                assert np.isclose(batch.total(phase, q)[i], single.total(phase, q)[0])


@settings(max_examples=50, deadline=None)
@given(h=st.sampled_from([8, 16, 32]), dh=st.sampled_from([32, 64]), b=st.integers(1, 8), s_mult=st.integers(1, 64),
       tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2, 4]), phase=st.sampled_from(["prefill", "decode"]),
       mode=st.sampled_from(["kv-sharded", "kv-allgather"]))
def test_attention_totals_are_per_chip_times_chips(h, dh, b, s_mult, tp, cp, phase, mode) -> None:
    seq = 4 * s_mult * (1 if phase == "prefill" else 1)
    kwargs = dict(hidden_size=h * dh, num_heads=h, batch_size=b, seq_len=seq, phase=phase, tp=tp, cp=cp, cp_mode=mode,
                  **({"kv_len": "past"} if phase == "decode" else {}))  # kv_len is a decode option (refused in a prefill)
    c = attention_cost(**kwargs)
    chips = tp * cp
    assert c.flops_total == c.flops_per_chip * chips
    assert c.weight_memory_total == c.weight_memory_per_chip * chips
    assert c.kv_cache_total == c.kv_cache_per_chip * chips
    base = attention_cost(**{**kwargs, "tp": 1, "cp": 1})
    # KV cache is sharded over TP and CP: the whole cache is the same however it is split
    assert c.kv_cache_total == base.kv_cache_total
    # weights are sharded over TP, replicated over CP
    assert c.weight_memory_per_chip * tp == base.weight_memory_per_chip
    if phase == "prefill":  # compute is split exactly over all chips
        assert c.flops_total == base.flops_total
