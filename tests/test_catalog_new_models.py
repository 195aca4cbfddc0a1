"""Large MoE, latent-attention and hybrid catalog entries: each loads and its computed total and
active parameter counts match the publisher's figures."""

from __future__ import annotations

import pytest

from llmco2.data.importers.base import model_id as source_model_id
from llmco2.specs import get_model

# id, published total (B), published active (B), tolerance on total, tolerance on active
NEW_MODELS = [
    ("deepseek-v3", 671.0, 37.0, 0.03, 0.08),
    ("kimi-k2", 1030.0, 32.0, 0.03, 0.08),
    ("qwen3-coder-480b-a35b", 480.0, 35.0, 0.03, 0.08),
    ("qwen3-next-80b-a3b", 80.0, 3.0, 0.03, 0.12),
    ("llama4-scout", 109.0, 17.0, 0.03, 0.08),
    ("llama4-maverick", 400.0, 17.0, 0.03, 0.08),
]
DENSE_MODELS = [("mistral-large-2407", 123.0), ("codegemma-2b", 2.506), ("codegemma-7b", 8.538), ("llama3.2-1b", 1.23),
                ("llama3.2-3b", 3.21)]


@pytest.mark.parametrize("model_id, total_b, active_b, tol_total, tol_active", NEW_MODELS)
def test_new_model_counts(model_id: str, total_b: float, active_b: float, tol_total: float, tol_active: float) -> None:
    arch = get_model(model_id)
    assert arch.id == model_id and arch.sources.get("config") and arch.sources.get("active_params_b")
    assert abs(arch.param_count() / 1e9 / total_b - 1) < tol_total, (model_id, arch.param_count())
    assert abs(arch.active_param_count() / 1e9 / active_b - 1) < tol_active, (model_id, arch.active_param_count())
    assert arch.active_params_b == pytest.approx(active_b)


@pytest.mark.parametrize("model_id, total_b", DENSE_MODELS)
def test_new_dense_model_counts(model_id: str, total_b: float) -> None:
    arch = get_model(model_id)
    assert not arch.is_moe and arch.active_param_count() == arch.param_count()
    assert abs(arch.param_count() / 1e9 / total_b - 1) < 0.03, (model_id, arch.param_count())


def test_llama32_tied_embedding_counted_once() -> None:
    # Llama 3.2 1B/3B tie the lm_head to the input embedding: the HF safetensors totals hold one table
    for model_id, total in (("llama3.2-1b", 1_235_814_400), ("llama3.2-3b", 3_212_749_824)):
        arch = get_model(model_id)
        assert arch.tied_embeddings and arch.max_context == 131072 and arch.param_count() == total, model_id


def test_nemotron_nano_9b_v2_hybrid() -> None:
    arch = get_model("nemotron-nano-9b-v2")
    assert abs(arch.param_count() / 1e9 / 9.0 - 1) < 0.06 and arch.active_param_count() == arch.param_count()
    assert (arch.num_mamba_layers, arch.num_attention_layers, arch.num_mlp_layers) == (27, 4, 25)


@pytest.mark.parametrize("alias, model_id", [
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("deepseek-r1-0528", "deepseek-v3"), ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"), ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "qwen3-coder-480b-a35b"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3-next-80b-a3b"), ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4-scout"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama4-maverick"),
    ("mistralai/Mistral-Large-Instruct-2407", "mistral-large-2407"), ("google/codegemma-1.1-2b", "codegemma-2b"),
    ("google/codegemma-7b", "codegemma-7b"), ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "nemotron-nano-9b-v2"),
    ("meta-llama/Llama-3.2-1B", "llama3.2-1b"), ("meta-llama/Llama-3.2-1B-Instruct", "llama3.2-1b"),
    ("meta-llama/Llama-3.2-3B", "llama3.2-3b"), ("meta-llama/Llama-3.2-3B-Instruct", "llama3.2-3b"),
])
def test_new_model_names_resolve(alias: str, model_id: str) -> None:
    # source names resolve through aliases or hf_id, as the importers do
    assert source_model_id(alias) == model_id


def test_layer_mixes() -> None:
    ds, kimi = get_model("deepseek-v3"), get_model("kimi-k2")
    assert ds.is_mla and ds.num_moe_layers == 58 and kimi.num_moe_layers == 60
    nxt = get_model("qwen3-next-80b-a3b")
    assert nxt.num_attention_layers == 12 and nxt.num_linear_layers == 36 and nxt.active_params_excludes == "embeddings"
    scout, mav = get_model("llama4-scout"), get_model("llama4-maverick")
    assert scout.window_kind == mav.window_kind == "chunked" and scout.num_window_layers == 36
    assert scout.num_moe_layers == 48 and mav.num_moe_layers == 24 and mav.dense_mlp_width == 16384


@pytest.mark.parametrize("model_id, window, layers", [
    ("gpt-oss-120b", 128, 18), ("gpt-oss-20b", 128, 12), ("gemma2-9b", 4096, 21), ("gemma3-27b", 1024, 52), ("mistral-7b", 4096, 32),
])
def test_banded_attention_entries(model_id: str, window: int, layers: int) -> None:
    arch = get_model(model_id)
    assert (arch.sliding_window, arch.num_window_layers) == (window, layers) and arch.sources.get("sliding_window")


def test_gpt_oss_active_counts_leave_out_the_input_embedding() -> None:
    for model_id in ("gpt-oss-20b", "gpt-oss-120b"):
        arch = get_model(model_id)
        assert arch.active_params_excludes == "input_embedding"
        assert abs(arch.active_param_count() / 1e9 / arch.active_params_b - 1) < 0.02


@pytest.mark.parametrize("model_id, layers", [("gemma2-9b", 20), ("mistral-7b", 7), ("nemotron-nano-9b-v2", 10),
                                              ("llama4-maverick", 3), ("qwen3-next-80b-a3b", 1)])
def test_fewer_layers_keep_a_valid_layer_mix(model_id: str, layers: int) -> None:
    base = get_model(model_id)
    arch = base.with_overrides(num_layers=layers)  # validated on construction
    assert arch.num_layers == layers and arch.num_window_layers <= arch.num_attention_layers
    if base.num_window_layers == base.num_attention_layers:
        assert arch.num_window_layers == arch.num_attention_layers
