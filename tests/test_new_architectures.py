"""Golden counts of the architectures beyond the dense/GQA transformer: multi-head latent attention,
DeepSeek-style and Llama-4 MoE layer mixes, banded and chunked attention, Mamba-2 and gated-DeltaNet
layers, tensor parallelism above the KV heads, and config.json read without silent errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmco2.analytic.layer import analyze_layer
from llmco2.analytic.mixers import windowed_pairs
from llmco2.analytic.model import model_totals
from llmco2.errors import InvalidInputError
from llmco2.specs import Request, arch_from_hf_config, get_gpu, get_model, validate_request
from tests.helpers import run_cli

# DeepSeek-V3's published config.json (deepseek-ai/DeepSeek-V3), the fields that set its cost
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "num_nextn_predict_layers": 1,
}


def _totals(arch, gpu: str, gpus: int, batch: int = 1, prompt: int = 1024, gen: int = 128, **kw):
    req = Request(batch_size=batch, prompt_tokens=prompt, generated_tokens=gen, num_gpus=gpus, weight_dtype="bf16", **kw)
    validate_request(req, arch, get_gpu(gpu))
    analysis = analyze_layer(arch, req, get_gpu(gpu))
    return analysis, model_totals(analysis)


def test_deepseek_v3_parameters_and_latent_cache() -> None:
    arch = arch_from_hf_config(DEEPSEEK_V3)
    assert arch.id == "deepseekv3forcausallm"  # named from the config, not from a folder
    assert arch.param_count() == pytest.approx(671e9, rel=0.03)  # published: 671B without the MTP module
    assert arch.active_param_count() == pytest.approx(37e9, rel=0.08)  # published: 37B activated
    assert (arch.num_dense_layers, arch.num_moe_layers, arch.num_shared_experts) == (3, 58, 1)
    _, totals = _totals(arch, "h200", 8)
    # one 576-wide latent (512 + 64) per token and layer, replicated on every tensor-parallel rank
    assert totals.kv_cache_bytes_per_gpu[0] == 1152 * 61 * 576 * 2
    assert not totals.fits_in_memory[0]  # 671B bf16 weights over 8 x 141 GB


def test_mla_decode_is_absorbed_attention_over_the_latent() -> None:
    arch = arch_from_hf_config(DEEPSEEK_V3)
    analysis, _ = _totals(arch, "h200", 8, prompt=1000, gen=2)  # one decode step attending 1001 positions
    att = analysis.costs["decode"]["fuse_attn"]
    heads_local, pairs = 128 / 8, 1001
    # scores over the 576-wide latent, output in the 512-wide latent, softmax 5 per score
    assert att.ops[0] == pytest.approx((2 * 576 + 2 * 512 + 5) * heads_local * pairs)
    assert att.kv_load_bytes[0] == pytest.approx(576 * pairs * 2)  # every head reads the one shared latent entry
    v = analysis.costs["decode"]["v_proj"]  # kv_b_proj absorbed: the same FLOPs and weights as the up-projection
    assert v.ops[0] == pytest.approx(2 * 512 * 128 * (128 + 128) / 8)


def test_banded_and_chunked_positions_by_hand() -> None:
    one = np.array([1.0])
    causal = np.array([True])
    sliding, chunked = np.array([False]), np.array([True])
    # prefill of 10 tokens, window 4: 1 + 2 + 3 + 4 * 7 = 34; chunks of 4: 1,2,3,4,1,2,3,4,1,2 = 23
    assert windowed_pairs(10 * one, 1 * one, "prefill", causal, 4 * one, sliding)[0] == 34
    assert windowed_pairs(10 * one, 1 * one, "prefill", causal, 4 * one, chunked)[0] == 23
    # decode steps at positions 11 and 12: 4 + 4 (sliding); 3 + 4 (chunked: 11 -> 3rd of its chunk, 12 -> 4th)
    assert windowed_pairs(10 * one, 3 * one, "decode", causal, 4 * one, sliding)[0] == 8
    assert windowed_pairs(10 * one, 3 * one, "decode", causal, 4 * one, chunked)[0] == 7


def test_gpt_oss_cache_holds_full_and_banded_layers() -> None:
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
           "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128, "attention_bias": True,
           "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072}
    arch = arch_from_hf_config(cfg)
    _, totals = _totals(arch, "h100", 8)
    # 18 full layers of 1,152 tokens + 18 banded layers of 128; 8 KV heads of 64 split over 8 GPUs, K and V, 2 bytes
    assert totals.kv_cache_bytes_per_gpu[0] == (18 * 1152 + 18 * 128) * (8 // 8) * 64 * 2 * 2


def _nemotron_like() -> dict:
    return {"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 6,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
            "hybrid_override_pattern": "M-M*-M", "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 32,
            "n_groups": 2, "conv_kernel": 4, "tie_word_embeddings": False, "max_position_embeddings": 4096}


def test_mamba_hybrid_parameters_by_hand() -> None:
    arch = arch_from_hf_config(_nemotron_like())
    assert (arch.num_mamba_layers, arch.num_attention_layers, arch.num_mlp_layers) == (3, 1, 2)
    d, conv = 8 * 16, 8 * 16 + 2 * 2 * 32
    mamba = 64 * (d + conv + 8) + conv * (4 + 1) + 3 * 8 + d + d * 64
    attention = 64 * 64 + 2 * 64 * 32 + 64 * 64
    mlp = 2 * 64 * 256  # Nemotron-H MLP blocks: up and down projections, squared ReLU, no gate
    expected = 3 * mamba + attention + 2 * mlp + 6 * 2 * 64 + 2 * 1000 * 64 + 64
    assert arch.param_count() == expected


def test_state_cache_is_constant_in_context() -> None:
    cfg = _nemotron_like() | {"hybrid_override_pattern": "M-M-M-", "max_position_embeddings": 100000}
    arch = arch_from_hf_config(cfg)
    short, long = (_totals(arch, "h100", 1, prompt=p, gen=10)[1].kv_cache_bytes_per_gpu[0] for p in (100, 10000))
    state = 8 * 16 * 32 + (8 * 16 + 2 * 2 * 32) * 3  # SSM state + conv window per layer and sequence
    assert short == long == 3 * state * 2


def test_qwen3_next_linear_layers_and_gated_attention() -> None:
    cfg = {"model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 48,
           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "num_experts": 512, "num_experts_per_tok": 10,
           "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "full_attention_interval": 4,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_conv_kernel_dim": 4, "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 262144}
    arch = arch_from_hf_config(cfg)
    assert (arch.num_linear_layers, arch.num_attention_layers, arch.num_shared_experts, arch.attn_output_gate) == (36, 12, 1, True)
    assert arch.param_count() == pytest.approx(80e9, rel=0.03)
    _, short = _totals(arch, "h100", 1, prompt=1000, gen=10)
    _, long = _totals(arch, "h100", 1, prompt=9000, gen=10)
    per_token = 12 * 2 * 2 * 256 * 2  # only the 12 full-attention layers grow with the context
    assert long.kv_cache_bytes_per_gpu[0] - short.kv_cache_bytes_per_gpu[0] == 8000 * per_token


def test_llama4_interleaved_moe_and_chunked_attention() -> None:
    cfg = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
           "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
           "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 8192,
           "vocab_size": 202048, "tie_word_embeddings": False, "max_position_embeddings": 1048576}
    arch = arch_from_hf_config(cfg)
    assert (arch.num_moe_layers, arch.num_dense_layers, arch.dense_mlp_width) == (24, 24, 16384)
    assert (arch.num_window_layers, arch.sliding_window, arch.window_kind) == (36, 8192, "chunked")
    assert arch.param_count() == pytest.approx(400e9, rel=0.03)  # Llama 4 Maverick: 400B total, 17B active
    assert arch.active_param_count() == pytest.approx(17e9, rel=0.08)


def test_tensor_parallel_above_the_kv_heads_replicates_them() -> None:
    arch = get_model("qwen3-235b-a22b")  # 4 KV heads
    analysis, totals = _totals(arch, "h100", 8, prompt=512, gen=64)
    k = analysis.costs["prefill"]["k_proj"]
    assert k.kv_store_bytes[0] == 512 * 1 * arch.head_dim * 2  # one KV head per rank, not half of one
    assert totals.kv_cache_bytes_per_gpu[0] == 2 * arch.num_layers * (512 + 64) * 1 * arch.head_dim * 2
    with pytest.raises(InvalidInputError, match="must divide num_kv_heads"):
        validate_request(Request(batch_size=1, prompt_tokens=8, generated_tokens=2, num_gpus=6, tensor_parallel=6),
                         arch.with_overrides(num_heads=96), get_gpu("h100"))


def test_plain_models_are_not_special() -> None:
    analysis, _ = _totals(get_model("llama3.1-8b"), "h100", 1)
    assert not analysis.batch.special[0] and analysis.batch.f_attn[0] == 1.0


def test_unmodelled_config_is_refused_or_approximated(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "t5", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
                                "vocab_size": 32000, "_name_or_path": "google/t5-small"}))
    args = ["predict", "--model", str(path), "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "16", "--gen-tokens", "4"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "model_type 't5'" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run_cli([*args, "--approximate", "--json"], capsys)
    record = json.loads(out)
    assert code == 0 and record["model"] == "google/t5-small" and any("approximated" in n for n in record["notes"])
    bad = dict(DEEPSEEK_V3, num_hidden_layers=32.7)
    with pytest.raises(InvalidInputError, match="num_hidden_layers"):
        arch_from_hf_config(bad)


def test_request_that_does_not_fit_gets_a_note(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "dsv3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    code, out, _ = run_cli(["predict", "--model", str(folder / "config.json"), "--gpu", "h200", "--gpus", "8",
                            "--batch-size", "1", "--prompt-tokens", "1024", "--gen-tokens", "128", "--dtype", "bf16", "--json"], capsys)
    record = json.loads(out)
    assert code == 0 and record["model"] != "dsv3"
    assert any(n.startswith("does not fit") for n in record["notes"])
