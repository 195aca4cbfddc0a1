"""Seed 001: tensor-core / CUDA-core / SFU FLOP split, matmul totals and MFU (hand-computed for Qwen2-7B)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmco2.analytic.flop_split import (
    LAYER_MODULES,
    ONCE_MODULES,
    FlopSplit,
    matmul_totals,
    mfu,
    model_flops,
    model_flops_utilization,
    module_flops,
)
from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import GPU
from llmco2.specs.models import ModelArch

QWEN2_7B = ModelArch(
    id="qwen2-7b", hidden_size=3584, intermediate_size=18944, num_layers=28, num_heads=28, num_kv_heads=4,
    head_dim=128, vocab_size=152064, attention_bias=True, max_context=32768,
)

A100_80GB = GPU(
    id="a100-sxm4-80gb", name="NVIDIA A100 80GB SXM", vendor="nvidia", architecture="ampere", form_factor="sxm4",
    memory_type="HBM2e", memory_size_gb=80.0, memory_bandwidth_gb_s=2039.0, interconnect="nvlink3",
    interconnect_bandwidth_gb_s=600.0, tdp_w=400.0, process_node_nm=7, gpus_per_node=8, release_year=2020,
    peak_dense_tops={"fp16": 312.0, "bf16": 312.0, "tf32": 156.0, "fp32": 19.5}, sources={},
)


# -- FlopSplit -----------------------------------------------------------------------------------------
def test_flop_split_total_and_add() -> None:
    a = FlopSplit(tensor_core=10, cuda_core=3, sfu=1)
    b = FlopSplit(tensor_core=5, cuda_core=2, sfu=7)
    assert a.total == 14
    assert a + b == FlopSplit(15, 5, 8)
    assert a.scaled(3) == FlopSplit(30, 9, 3)
    assert FlopSplit().total == 0


# -- per-module counts, Qwen2-7B prefill, B=1, S=512 ------------------------------------------------------
def test_qwen2_7b_prefill_modules_hand_computed() -> None:
    m = module_flops(QWEN2_7B, 1, 512, 512)
    # 3584*3584 = 12_845_056; x 1024 = 13_153_337_344
    assert m["q_proj"] == FlopSplit(tensor_core=2 * 1 * 512 * 3584 * (28 * 128), cuda_core=1 * 512 * (28 * 128))
    assert m["q_proj"].tensor_core == 13_153_337_344
    assert m["q_proj"].cuda_core == 1_835_008  # 512 * 3584 bias adds
    # k/v: 2*512*3584*512 = 1_879_048_192; bias 512*512 = 262_144
    assert m["k_proj"] == FlopSplit(tensor_core=2 * 1 * 512 * 3584 * (4 * 128), cuda_core=1 * 512 * (4 * 128))
    assert m["k_proj"].tensor_core == 1_879_048_192
    assert m["v_proj"] == m["k_proj"]
    # o_proj: same matmul as q_proj, no bias
    assert m["o_proj"] == FlopSplit(tensor_core=13_153_337_344)
    # attention: qk + pv = 4*B*(28*128)*512*512 = 3_758_096_384; scaling + softmax 4*28*512^2 = 29_360_128
    assert m["attention_interface"] == FlopSplit(
        tensor_core=4 * 1 * (28 * 128) * 512 * 512, cuda_core=4 * 1 * 28 * 512 * 512, sfu=1 * 28 * 512 * 512)
    assert m["attention_interface"].tensor_core == 3_758_096_384
    assert m["attention_interface"].sfu == 7_340_032
    # RoPE: 3*512*3584 + 3*512*512 = 5_505_024 + 786_432 = 6_291_456
    assert m["apply_rotary_pos_emb"] == FlopSplit(cuda_core=3 * 512 * (28 * 128) + 3 * 512 * (4 * 128))
    assert m["apply_rotary_pos_emb"].cuda_core == 6_291_456
    # MLP: 2*512*3584*18944 = 69_524_783_104 each
    for name in ("gate_proj", "up_proj", "down_proj"):
        assert m[name] == FlopSplit(tensor_core=2 * 1 * 512 * 3584 * 18944)
        assert m[name].tensor_core == 69_524_783_104
    assert m["act_fn"] == FlopSplit(cuda_core=2 * 512 * 18944, sfu=512 * 18944)  # 19_398_656 and 9_699_328
    # RMSNorm: 4*512*3584 + 2*512 = 7_340_032 + 1_024 = 7_341_056; SFU 512
    assert m["input_layernorm"] == FlopSplit(cuda_core=4 * 512 * 3584 + 2 * 512, sfu=512)
    assert m["input_layernorm"].cuda_core == 7_341_056
    assert m["post_attention_layernorm"] == m["input_layernorm"]
    assert m["residual"] == FlopSplit(cuda_core=2 * 512 * 3584)  # 3_670_016
    assert m["embed_tokens"] == FlopSplit()
    assert m["rotary_emb"] == FlopSplit(cuda_core=3584 * 512, sfu=3584 * 512)  # 1_835_008 each
    assert set(m) == set(ONCE_MODULES) | set(LAYER_MODULES)


def test_no_attention_bias_drops_qkv_cuda() -> None:
    arch = QWEN2_7B.with_overrides(attention_bias=False)
    m = module_flops(arch, 1, 512, 512)
    assert m["q_proj"].cuda_core == 0 and m["k_proj"].cuda_core == 0
    assert m["q_proj"].tensor_core == 13_153_337_344


# -- seed "Total" sections -----------------------------------------------------------------------------------
def test_prefill_matmul_totals_hand_computed() -> None:
    t = matmul_totals(QWEN2_7B, 1, 512, "prefill")
    assert t["q_proj"] == 2 * 1 * 512 * 28 * 3584 * (28 * 128) == 368_293_445_632  # 13_153_337_344 * 28
    assert t["k_proj"] == t["v_proj"] == 2 * 1 * 512 * 28 * 3584 * (4 * 128) == 52_613_349_376
    assert t["o_proj"] == t["q_proj"]
    assert t["qk"] == t["pv"] == 2 * 1 * 28 * 28 * 512**2 * 128 == 52_613_349_376
    assert t["self_attn_total"] == 947_040_288_768  # 28 * 33_822_867_456
    assert t["self_attn_total"] == t["q_proj"] + t["k_proj"] + t["v_proj"] + t["o_proj"] + t["qk"] + t["pv"]
    assert t["gate_proj"] == t["up_proj"] == t["down_proj"] == 2 * 1 * 512 * 28 * 3584 * 18944 == 1_946_693_926_912
    assert t["mlp_total"] == 6 * 1 * 512 * 28 * 3584 * 18944 == 5_840_081_780_736
    assert t["total"] == 6_787_122_069_504  # 28 * 242_397_216_768


def test_prefill_totals_equal_forward_tensor_core_of_model_flops() -> None:
    for batch, seq in ((1, 512), (4, 2048), (3, 7)):
        assert matmul_totals(QWEN2_7B, batch, seq, "prefill")["total"] == model_flops(QWEN2_7B, batch, seq, seq).tensor_core


def test_decode_matmul_totals_hand_computed() -> None:
    t = matmul_totals(QWEN2_7B, 8, 1024, "decode")
    assert t["q_proj"] == 2 * 8 * 28 * 3584 * (28 * 128) == 5_754_585_088  # 205_520_896 * 28
    assert t["k_proj"] == 2 * 8 * 28 * 3584 * (4 * 128) == 822_083_584
    assert t["qk"] == t["pv"] == 2 * 8 * 28 * 28 * 1024 * 128 == 1_644_167_168  # 58_720_256 * 28
    assert t["mlp_total"] == 6 * 8 * 28 * 3584 * 18944 == 91_251_277_824
    assert t["total"] == 107_692_949_504
    # decode with a KV cache: one new token per sequence, K/V projected for that token only
    assert model_flops(QWEN2_7B, 8, 1, 1024, kv_cache=True).tensor_core == t["total"]


def test_decode_module_flops_seqlen_q_1() -> None:
    m = module_flops(QWEN2_7B, 8, 1, 1024, kv_cache=True)
    assert m["attention_interface"].tensor_core == 4 * 8 * (28 * 128) * 1 * 1024  # 117_440_512
    assert m["k_proj"] == FlopSplit(tensor_core=2 * 8 * 3584 * 512, cuda_core=8 * 512)  # 29_360_128, 4_096
    assert m["act_fn"] == FlopSplit(cuda_core=2 * 8 * 18944, sfu=8 * 18944)  # the seed's 3*GBS*I in all
    # without the cache flag the seed's forward formulas project K/V over all 1024 positions
    assert module_flops(QWEN2_7B, 8, 1, 1024)["k_proj"].tensor_core == 2 * 8 * 1024 * 3584 * 512


def test_phase_rejects_unknown() -> None:
    with pytest.raises(InvalidInputError) as err:
        matmul_totals(QWEN2_7B, 1, 8, "train")
    assert err.value.field == "phase"


# -- backward --------------------------------------------------------------------------------------------
def test_mlp_backward_is_twice_forward_tensor_core() -> None:
    fwd = module_flops(QWEN2_7B, 2, 128, 128)
    bwd = module_flops(QWEN2_7B, 2, 128, 128, backward=True)
    for name in ("gate_proj", "up_proj", "down_proj", "q_proj", "k_proj", "v_proj", "o_proj", "attention_interface"):
        assert bwd[name].tensor_core == 2 * fwd[name].tensor_core
    assert bwd["gate_proj"].tensor_core == 4 * 2 * 128 * 3584 * 18944  # seed: dweight + dinput
    assert bwd["act_fn"] == FlopSplit(cuda_core=6 * 2 * 128 * 18944)
    assert bwd["input_layernorm"] == FlopSplit(cuda_core=11 * 2 * 128 * 3584 + 2 * 2 * 128)
    assert bwd["residual"] == fwd["residual"]
    assert bwd["rotary_emb"] == bwd["embed_tokens"] == FlopSplit()
    assert model_flops(QWEN2_7B, 2, 128, 128, backward=True).tensor_core == 2 * model_flops(QWEN2_7B, 2, 128, 128).tensor_core


# -- MFU -------------------------------------------------------------------------------------------------
def test_mfu_arithmetic() -> None:
    assert mfu(1.56e14, 1.0, 312e12) == pytest.approx(0.5)
    assert mfu(0, 2.0, 1.0) == 0.0


def test_model_flops_utilization_hand_computed() -> None:
    forward = 6_787_122_069_504  # matmul_totals(QWEN2_7B, 1, 512, "prefill")["total"]
    got = model_flops_utilization(QWEN2_7B, A100_80GB, "fp16", 1, 512, elapsed_s=0.05)
    assert got == pytest.approx(forward / 0.05 / 312e12)  # ~0.435
    both = model_flops_utilization(QWEN2_7B, A100_80GB, "fp16", 1, 512, elapsed_s=0.05, num_gpus=2, backward=True)
    assert both == pytest.approx(3 * forward / 0.05 / (2 * 312e12))


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: mfu(1.0, 0.0, 1.0), "elapsed_s"),
        (lambda: mfu(1.0, 1.0, 0.0), "peak_flops_per_s"),
        (lambda: mfu(-1.0, 1.0, 1.0), "achieved_flops"),
        (lambda: model_flops_utilization(QWEN2_7B, A100_80GB, "fp16", 1, 512, elapsed_s=-1.0), "elapsed_s"),
        (lambda: model_flops_utilization(QWEN2_7B, A100_80GB, "fp16", 0, 512, elapsed_s=1.0), "batch_size"),
        (lambda: model_flops_utilization(QWEN2_7B, A100_80GB, "fp16", 1, 512, elapsed_s=1.0, num_gpus=0), "num_gpus"),
        (lambda: model_flops_utilization(QWEN2_7B, A100_80GB, "fp8", 1, 512, elapsed_s=1.0), "dtype"),
        (lambda: module_flops(QWEN2_7B, 1, 0, 512), "seqlen_q"),
        (lambda: module_flops(QWEN2_7B, 1, 512, -3), "seqlen_kv"),
        (lambda: matmul_totals(QWEN2_7B, 1, 0, "prefill"), "seq_len"),
    ],
)
def test_bad_input_names_field(call, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        call()
    assert err.value.field == field


@given(batch=st.integers(1, 64), seq=st.integers(1, 4096))
def test_totals_agree_for_any_size(batch: int, seq: int) -> None:
    assert matmul_totals(QWEN2_7B, batch, seq, "prefill")["total"] == model_flops(QWEN2_7B, batch, seq, seq).tensor_core
    assert matmul_totals(QWEN2_7B, batch, seq, "decode")["total"] == model_flops(QWEN2_7B, batch, 1, seq, kv_cache=True).tensor_core
