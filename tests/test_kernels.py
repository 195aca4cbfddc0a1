"""Hand-computed kernel costs (paper Appendix A, with the fixes listed in PAPER_DEVIATIONS).

Llama-3.1-8B (H=4096, I=14336, 32 heads, 8 KV heads, d_h=128), B=2, L=512, G=129 (128 decode
steps), FP16 everywhere, one A100: prefill processes T=B*L=1024 tokens, decode T=B*(G-1)=256.
"""

from __future__ import annotations

import pytest

from llmco2.analytic.kernels import PAPER_DEVIATIONS, attended_positions, experts_touched
from llmco2.analytic.layer import analyze_layer
from llmco2.specs import ModelArch, Request

B, L, G = 2, 512, 129


@pytest.fixture
def layer(llama8b, a100):
    return analyze_layer(llama8b, Request(batch_size=B, prompt_tokens=L, generated_tokens=G), a100)


def cost(layer, phase, name):
    return layer.costs[phase][name]


def test_q_proj_prefill_is_eq15(layer) -> None:
    c = cost(layer, "prefill", "q_proj")
    assert c.ops[0] == 2 * B * 4096 * 4096 * L == 34_359_738_368
    assert c.weight_bytes[0] == 4096 * 4096 * 2
    assert c.act_load_bytes[0] == 4096 * B * L * 2
    assert c.act_store_bytes[0] == 4096 * B * L * 2
    assert c.kv_store_bytes[0] == 0 and c.kv_load_bytes[0] == 0
    assert c.mem_bytes[0] == 4096 * 4096 * 2 + 2 * (4096 * B * L * 2)


def test_k_proj_stores_to_kv_cache(layer) -> None:
    c = cost(layer, "prefill", "k_proj")
    assert c.ops[0] == 2 * B * 4096 * 1024 * L
    assert c.kv_store_bytes[0] == 1024 * B * L * 2
    assert c.act_store_bytes[0] == 0


def test_q_proj_decode_is_eq9_and_eq10(layer) -> None:
    c = cost(layer, "decode", "q_proj")
    assert c.ops[0] == 2 * B * 4096 * 4096 * (G - 1) == 8_589_934_592
    assert c.weight_bytes[0] == 4096 * 4096 * 2 * (G - 1)  # weights stream once per decode step
    assert c.act_load_bytes[0] == 4096 * B * 2 * (G - 1)


def test_fused_attention_prefill(layer) -> None:
    c = cost(layer, "prefill", "fuse_attn")
    pairs = L * L
    assert c.ops[0] == (2 * 2 * 128 + 5) * 32 * B * pairs == 8_673_820_672
    assert c.act_load_bytes[0] == B * L * 32 * 128 * 2  # Q
    assert c.act_store_bytes[0] == B * L * 32 * 128 * 2  # O
    assert c.kv_load_bytes[0] == 2 * B * 8 * 128 * (L * (L // 128)) * 2  # K and V once per 128-query tile


def test_fused_attention_decode(layer) -> None:
    c = cost(layer, "decode", "fuse_attn")
    pairs = (G - 1) * (2 * L + G) // 2  # sum over decode steps j=1..G-1 of (L + j)
    assert pairs == sum(L + j for j in range(1, G)) == 73_792
    assert c.ops[0] == (4 * 128 + 5) * 32 * B * pairs
    assert c.kv_load_bytes[0] == 2 * B * 8 * 128 * pairs * 2 == 604_504_064


def test_norm_add_and_activation(layer) -> None:
    t = B * L
    assert cost(layer, "prefill", "norm_attn").ops[0] == 4 * t * 4096 + 2 * t  # RMSNorm
    add = cost(layer, "prefill", "add_attn")
    assert add.ops[0] == t * 4096 and add.act_load_bytes[0] == 2 * t * 4096 * 2 and add.act_store_bytes[0] == t * 4096 * 2
    act = cost(layer, "prefill", "act_mlp")
    assert act.ops[0] == 2 * t * 14336
    assert act.act_load_bytes[0] == 2 * t * 14336 * 2 and act.act_store_bytes[0] == t * 14336 * 2


def test_mlp_projections(layer) -> None:
    assert cost(layer, "prefill", "gate_proj").ops[0] == 2 * B * L * 4096 * 14336 == 120_259_084_288
    down = cost(layer, "decode", "down_proj")
    assert down.ops[0] == 2 * B * (G - 1) * 14336 * 4096
    assert down.weight_bytes[0] == 14336 * 4096 * 2 * (G - 1)


def test_tensor_parallel_two_gpus(llama8b, a100) -> None:
    one = analyze_layer(llama8b, Request(batch_size=B, prompt_tokens=L, generated_tokens=G), a100)
    two = analyze_layer(llama8b, Request(batch_size=B, prompt_tokens=L, generated_tokens=G, num_gpus=2), a100)
    q1, q2 = one.costs["prefill"]["q_proj"], two.costs["prefill"]["q_proj"]
    assert q2.ops[0] * 2 == q1.ops[0] and q2.weight_bytes[0] * 2 == q1.weight_bytes[0]
    assert q2.act_load_bytes[0] == q1.act_load_bytes[0]  # column-parallel: input replicated
    o1, o2 = one.costs["prefill"]["out_proj"], two.costs["prefill"]["out_proj"]
    assert o2.act_load_bytes[0] * 2 == o1.act_load_bytes[0]  # row-parallel: input split
    assert o2.act_store_bytes[0] == o1.act_store_bytes[0]  # full-width partial sum
    ar = two.costs["prefill"]["all_reduce_attn"]
    t = B * L
    assert ar.ops[0] == t * 4096 / 2  # Eq 3
    assert ar.mem_bytes[0] == 2 * ar.ops[0] * 2  # Eq 5
    assert ar.net_bytes[0] == t / 2 * 4096 * (2 - 1) * 2  # Eq 7
    ard = two.costs["decode"]["all_reduce_mlp"]
    assert ard.net_bytes[0] == B / 2 * 4096 * 1 * 2 * (G - 1)  # Eq 6
    assert two.costs["prefill"]["norm_attn"].ops[0] == one.costs["prefill"]["norm_attn"].ops[0]  # replicated
    assert one.costs["prefill"]["all_reduce_attn"].ops[0] == 0


def test_unfused_attention_prefill(llama8b, a100) -> None:
    res = analyze_layer(llama8b, Request(batch_size=B, prompt_tokens=L, generated_tokens=G, flash_attention=False), a100)
    qk, sm, sv = (res.costs["prefill"][n] for n in ("matmul_qk", "softmax", "matmul_sv"))
    scores = B * 32 * L * L
    assert qk.ops[0] == 2 * 128 * scores == 4_294_967_296
    assert qk.act_store_bytes[0] == scores * 2 and sm.act_load_bytes[0] == scores * 2
    assert sm.ops[0] == 5 * scores
    assert qk.kv_load_bytes[0] == B * 8 * 128 * L * 2 == sv.kv_load_bytes[0]
    assert sv.act_store_bytes[0] == B * L * 32 * 128 * 2


def test_causal_option_halves_prefill_attention(llama8b, a100) -> None:
    full = analyze_layer(llama8b, Request(batch_size=1, prompt_tokens=256, generated_tokens=2), a100)
    causal = analyze_layer(llama8b, Request(batch_size=1, prompt_tokens=256, generated_tokens=2, causal=True), a100)
    assert causal.costs["prefill"]["fuse_attn"].ops[0] == full.costs["prefill"]["fuse_attn"].ops[0] * (257 / 2) / 256
    assert causal.costs["decode"]["fuse_attn"].ops[0] == full.costs["decode"]["fuse_attn"].ops[0]
    assert attended_positions(256, 2, "prefill", True) == 256 * 257 / 2


def test_moe_router_and_expert_weights(a100) -> None:
    mixtral = ModelArch(id="mixtral-test", hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
                        num_kv_heads=8, head_dim=128, vocab_size=32000, num_experts=8, experts_per_token=2, max_context=32768)
    res = analyze_layer(mixtral, Request(batch_size=1, prompt_tokens=64, generated_tokens=11), a100)
    gate_d = res.costs["decode"]["gate_proj"]
    # one token per decode step touches exactly its 2 experts: E*(1-(1-k/E)^1) = 2
    assert gate_d.weight_bytes[0] == pytest.approx(2 * 4096 * 14336 * 2 * 10)
    assert gate_d.ops[0] == 2 * 10 * 2 * 4096 * 14336
    assert res.costs["prefill"]["router"].ops[0] == 2 * 64 * 4096 * 8
    assert experts_touched(8, 2, 64) == pytest.approx(8 * (1 - 0.75**64))
    assert experts_touched(1, 1, 5) == 1.0 and experts_touched(1, 1, 0) == 0.0


def test_single_token_generation_has_empty_decode(llama8b, a100) -> None:
    res = analyze_layer(llama8b, Request(batch_size=1, prompt_tokens=16, generated_tokens=1), a100)
    assert res.total("decode", "ops")[0] == 0 and res.total("decode", "mem_bytes")[0] == 0
    assert res.total("decode", "time_s")[0] == 0


def test_deviation_table_covers_the_known_typos() -> None:
    eqs = " ".join(row[0] for row in PAPER_DEVIATIONS)
    for eq in ("Eq 32", "Eq 31, 42", "Table 7", "Eq 12-13"):
        assert eq in eqs
