"""Nemotron Nano 12B v2, Phi-3-small, Codestral 22B, DeepSeek-Coder 6.7B/33B and DeepSeek-Coder-V2-Lite:
their published config.json files read into the catalog entries, parameter counts match the
publishers' figures, caches match a hand count, and the ML.ENERGY rows that name them import."""

from __future__ import annotations

import pytest

from llmco2.analytic.layer import analyze_layer
from llmco2.analytic.model import model_totals
from llmco2.data.importers import mlenergy_v2, mlenergy_v3
from llmco2.data.importers.base import model_id as source_model_id
from llmco2.specs import Request, arch_from_hf_config, get_gpu, get_model, validate_request

# The fields of each published config.json that set the cost (URLs in each entry's sources["config"]).
NEMOTRON_NANO_12B_V2 = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "hidden_size": 5120, "intermediate_size": 20480,
    "num_hidden_layers": 62, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-", "mamba_num_heads": 128,
    "mamba_head_dim": 80, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "mlp_hidden_act": "relu2",
    "tie_word_embeddings": False, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
}
PHI3_SMALL_8K = {
    "model_type": "phi3small", "architectures": ["Phi3SmallForCausalLM"], "hidden_size": 4096, "ff_intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 100352,
    "max_position_embeddings": 8192, "hidden_act": "gegelu", "gegelu_limit": 20.0, "layer_norm_epsilon": 1e-5,
    "dense_attention_every_n_layers": 2, "blocksparse_block_size": 64, "blocksparse_num_local_blocks": 16,
    "blocksparse_vert_stride": 8, "blocksparse_homo_head_pattern": False, "rope_embedding_base": 1000000,
}
CODESTRAL_22B = {
    "model_type": "mistral", "architectures": ["MistralForCausalLM"], "hidden_size": 6144, "intermediate_size": 16384,
    "num_hidden_layers": 56, "num_attention_heads": 48, "num_key_value_heads": 8, "vocab_size": 32768,
    "max_position_embeddings": 32768, "sliding_window": None, "hidden_act": "silu", "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "rope_theta": 1000000.0,
}
DEEPSEEK_CODER_6_7B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32256,
    "max_position_embeddings": 16384, "rope_scaling": {"type": "linear", "factor": 4.0}, "rope_theta": 100000,
    "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}
DEEPSEEK_CODER_33B = DEEPSEEK_CODER_6_7B | {"hidden_size": 7168, "intermediate_size": 19200, "num_hidden_layers": 62,
                                            "num_attention_heads": 56, "num_key_value_heads": 8}
DEEPSEEK_CODER_V2_LITE = {
    "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048, "intermediate_size": 10944,
    "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
    "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 102400, "max_position_embeddings": 163840, "hidden_act": "silu", "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}

# id, config, published total (B): Nemotron report 12B, Phi-3-small HF safetensors 7.39B (the report's 7B
# is nominal), Mistral 22.2B, DeepSeek-Coder 6.7B / 33B, DeepSeek-V2-Lite 15.7B
MODELS = [
    ("nemotron-nano-12b-v2", NEMOTRON_NANO_12B_V2, 12.0),
    ("phi3-small", PHI3_SMALL_8K, 7.39),
    ("codestral-22b", CODESTRAL_22B, 22.2),
    ("deepseek-coder-6.7b", DEEPSEEK_CODER_6_7B, 6.7),
    ("deepseek-coder-33b", DEEPSEEK_CODER_33B, 33.0),
    ("deepseek-coder-v2-lite", DEEPSEEK_CODER_V2_LITE, 15.7),
]
COST_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
               "activation", "norm_type", "mlp_gated", "num_experts", "experts_per_token", "num_shared_experts",
               "tied_embeddings", "max_context", "attention_bias", "mlp_bias", "kv_lora_rank", "q_lora_rank",
               "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_dense_layers", "dense_intermediate_size",
               "sliding_window", "num_window_layers", "num_mamba_layers", "mamba_num_heads", "mamba_head_dim",
               "ssm_state_size", "mamba_groups", "conv_kernel", "num_mlp_free_layers", "num_mixer_free_layers")


def _kv_bytes(arch, prompt: int = 1024, gen: int = 128) -> float:
    """Cache bytes of one sequence (bf16) on one H100."""
    req = Request(batch_size=1, prompt_tokens=prompt, generated_tokens=gen, num_gpus=1, weight_dtype="bf16")
    validate_request(req, arch, get_gpu("h100"))
    cache = float(model_totals(analyze_layer(arch, req, get_gpu("h100"))).kv_cache_bytes_per_gpu[0])
    return round(cache, 3)  # the layer mix is held as shares of the layers: allow float rounding below a thousandth of a byte


@pytest.mark.parametrize("model, cfg, total_b", MODELS)
def test_published_config_reads_into_the_catalog_entry(model: str, cfg: dict, total_b: float) -> None:
    read, entry = arch_from_hf_config(cfg), get_model(model)
    assert {f: getattr(read, f) for f in COST_FIELDS} == {f: getattr(entry, f) for f in COST_FIELDS}
    assert read.param_count() == entry.param_count() == pytest.approx(total_b * 1e9, rel=0.03)
    assert entry.sources.get("config", "").startswith("https://huggingface.co/") and entry.sources.get("published_params_b")


def test_deepseek_coder_v2_lite_latent_attention_and_experts() -> None:
    arch = arch_from_hf_config(DEEPSEEK_CODER_V2_LITE)
    assert arch.is_mla and arch.q_lora_rank == 0 and (arch.num_dense_layers, arch.num_moe_layers) == (1, 26)
    # per MoE layer 6 routed + 2 shared experts of 3 x 2048 x 1408, router 2048 x 64; layer 0 dense 3 x 2048 x 10944;
    # MLA without a query low rank: 2048 x 16 x 192 + 2048 x 576 + 512 + 512 x 16 x 256 + 16 x 128 x 2048
    mla = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    moe = 8 * 3 * 2048 * 1408 + 2048 * 64
    active = 27 * mla + 26 * moe + 3 * 2048 * 10944 + 27 * 2 * 2048 + 2 * 102400 * 2048 + 2048
    assert arch.active_param_count() == active
    entry = get_model("deepseek-coder-v2-lite")  # DeepSeek counts the LM head, not the input embedding table
    assert entry.active_param_count() == active - 102400 * 2048 == pytest.approx(2.4e9, rel=0.03)
    assert entry.active_params_b == 2.4
    # one 576-wide latent (512 + 64) per token and layer, 2 bytes: 27 x 1,152 x 576 x 2
    assert _kv_bytes(arch) == 27 * 1152 * 576 * 2


def test_nemotron_nano_12b_v2_hybrid_cache() -> None:
    arch = arch_from_hf_config(NEMOTRON_NANO_12B_V2)
    assert (arch.num_mamba_layers, arch.num_attention_layers, arch.num_mlp_layers) == (28, 6, 28)
    attention = 6 * 1152 * 2 * 8 * 128 * 2  # 6 attention layers: K and V of 8 heads x 128 for 1,152 tokens
    state = 28 * (128 * 80 * 128 + (128 * 80 + 2 * 8 * 128) * 3) * 2  # SSM state + 3-tap conv window per Mamba layer
    assert _kv_bytes(arch) == attention + state == 103_776_256


def test_phi3_small_blocksparse_layers_are_a_noted_band() -> None:
    arch = arch_from_hf_config(PHI3_SMALL_8K)
    assert (arch.num_window_layers, arch.sliding_window, arch.window_kind) == (16, 1024, "sliding")
    assert arch.approximations and "blocksparse" in arch.approximations[0]
    assert get_model("phi3-small").approximations == arch.approximations
    # 16 dense layers hold 4,224 tokens, 16 banded layers 1,024; 8 KV heads x 128, K and V, 2 bytes
    assert _kv_bytes(arch, prompt=4096, gen=128) == (16 * 4224 + 16 * 1024) * 8 * 128 * 2 * 2
    # qkv (4096 -> 6144) and dense with biases, gated up (2 x 14336) and down with biases, 2 LayerNorms with bias
    layer = 4096 * 6144 + 6144 + 4096 * 4096 + 4096 + 3 * 4096 * 14336 + 2 * 14336 + 4096 + 2 * 2 * 4096
    assert arch.param_count() == 32 * layer + 100352 * 4096 + 2 * 4096  # tied embeddings, final LayerNorm


@pytest.mark.parametrize("cfg, layers, kv_heads", [(CODESTRAL_22B, 56, 8), (DEEPSEEK_CODER_6_7B, 32, 32),
                                                   (DEEPSEEK_CODER_33B, 62, 8)])
def test_dense_models_cache(cfg: dict, layers: int, kv_heads: int) -> None:
    arch = arch_from_hf_config(cfg)
    assert arch.num_window_layers == 0 and not arch.is_moe
    assert _kv_bytes(arch) == layers * 1152 * 2 * kv_heads * 128 * 2


@pytest.mark.parametrize("name, model", [
    ("nvidia/NVIDIA-Nemotron-Nano-12B-v2", "nemotron-nano-12b-v2"), ("nvidia/NVIDIA-Nemotron-Nano-12B-v2-Base", "nemotron-nano-12b-v2"),
    ("nvidia/NVIDIA-Nemotron-Nano-12B-v2-FP8", "nemotron-nano-12b-v2"),
    ("microsoft/Phi-3-small-8k-instruct", "phi3-small"), ("microsoft/Phi-3-small-128k-instruct", "phi3-small"),
    ("mistralai/Codestral-22B-v0.1", "codestral-22b"), ("bartowski/Codestral-22B-v0.1-GGUF", "codestral-22b"),
    ("deepseek-ai/deepseek-coder-6.7b-instruct", "deepseek-coder-6.7b"), ("TheBloke/deepseek-coder-6.7B-instruct-AWQ", "deepseek-coder-6.7b"),
    ("deepseek-ai/deepseek-coder-33b-base", "deepseek-coder-33b"), ("TheBloke/deepseek-coder-33B-instruct-GPTQ", "deepseek-coder-33b"),
    ("deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct", "deepseek-coder-v2-lite"),
    ("deepseek-ai/DeepSeek-Coder-V2-Lite-Base", "deepseek-coder-v2-lite"),
])
def test_source_names_resolve(name: str, model: str) -> None:
    assert source_model_id(name) == model


@pytest.mark.parametrize("name", ["Qwen/Qwen3-VL-235B-A22B-Instruct-FP8", "nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16",
                                  "deepseek-ai/deepseek-coder-7b-instruct-v1.5"])
def test_other_architectures_do_not_resolve(name: str) -> None:
    # a vision-language wrapper or another architecture is not the text model, whatever its suffix
    assert source_model_id(name) is None


@pytest.mark.parametrize("module, name, model, rows", [
    (mlenergy_v2, "mlenergy_v2_2024.csv", "phi3-small", 14),
    (mlenergy_v3, "mlenergy_v3_2025.csv", "nemotron-nano-12b-v2", 15),
])
def test_mlenergy_text_rows_of_these_models_import(shared_data, module, name: str, model: str, rows: int) -> None:
    path = shared_data / "datacenter" / name
    if not path.is_file():
        pytest.skip(f"{path} is not in this copy of the shared data")
    table, dropped = module.serving_rows(path)
    assert (table["model"] == model).sum() == rows
    assert all(reason.startswith("multimodal task") for reason in dropped), dropped
