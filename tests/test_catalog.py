"""The shipped GPU and model catalogs: every entry loads, has sources, and parameter counts match
the published figures within 2%; lookups accept aliases and fail with close matches; a Hugging Face
config.json loads into the same type."""

from __future__ import annotations

import pytest

from llmco2.errors import UnknownIdError
from llmco2.specs import arch_from_hf_config, get_gpu, get_model, gpu_catalog, model_catalog
from llmco2.specs.gpus import gpu_from_dict

REQUIRED_GPUS = ["t4", "l4", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gh200", "v100", "a10",
                 "l40s", "jetson-orin", "rk3588-npu"]
# Further common accelerators with their sourced figures: (memory GB, bandwidth GB/s, dense bf16 TFLOP/s, TDP W).
# Each number is quoted in the entry's [gpu.sources] (NVIDIA datasheets with sparse figures halved, the GA102/Ada
# whitepapers with FP32 accumulate for GeForce, AMD ROCm docs / launch tables, Intel's Hot Chips 2024 deck).
ADDED_GPUS = {
    "a40": (48.0, 696.0, 149.7, 300.0),
    "rtx-a6000": (48.0, 768.0, 154.8, 300.0),
    "rtx-6000-ada": (48.0, 960.0, 364.0, 300.0),
    "l40": (48.0, 864.0, 181.05, 300.0),
    "a30": (24.0, 933.0, 165.0, 165.0),
    "h100-nvl": (94.0, 3900.0, 835.5, 400.0),
    "h20": (96.0, 4000.0, 148.0, 400.0),
    "rtx-4090": (24.0, 1008.0, 165.2, 450.0),
    "rtx-3090": (24.0, 936.0, 71.2, 350.0),
    "mi250x": (128.0, 3200.0, 383.0, 560.0),
    "mi300x": (192.0, 5300.0, 1307.4, 750.0),
    "gaudi3": (128.0, 3670.0, 1835.0, 900.0),
}
# Vendors publish no die area for these packages, so their embodied carbon is unknown (like gaudi2's).
NO_PUBLISHED_DIE_AREA = {"gaudi2", "gaudi3", "mi250x", "mi300x"}
PAPER_MODELS = ["bloom-560m", "bloom-1b1", "bloom-1b7", "bloom-3b", "bloom-7b1", "gemma-2b", "gemma-7b", "gemma2-2b",
                "gemma2-9b", "gemma2-27b", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b", "qwen2-72b", "llama3.1-8b",
                "llama3.1-70b", "mixtral-8x7b"]
EDGE_MODELS = ["tinyllama-1.1b", "qwen1.5-0.5b", "qwen2-1.5b", "internlm2-1.8b"]
DATACENTER_MODELS = ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "mistral-7b", "falcon-7b",
                     "falcon-40b", "qwen3-8b", "qwen3-14b", "gemma3-12b", "gemma3-27b", "mixtral-8x22b"]


@pytest.mark.parametrize("gpu_id", REQUIRED_GPUS)
def test_required_gpus_load(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.id == gpu_id
    assert gpu.memory_bandwidth_gb_s > 0 and gpu.memory_size_gb > 0 and gpu.tdp_w > 0
    assert gpu.peak_dense_tops, "every device needs at least one dense peak"
    assert gpu.process_node_nm > 0


def test_every_gpu_number_has_a_source() -> None:
    for gpu in gpu_catalog():
        for key in ("memory_size_gb", "memory_bandwidth_gb_s", "tdp_w", "process_node_nm"):
            assert key in gpu.sources, (gpu.id, key)
        for dtype in gpu.peak_dense_tops:
            assert f"peak_dense_tops.{dtype}" in gpu.sources, (gpu.id, dtype)


def test_required_discrete_gpus_have_die_area() -> None:
    # (embodied carbon needs it; Intel has not published the Gaudi2 die area, so it is not required)
    for gpu in map(get_gpu, REQUIRED_GPUS):
        if gpu.form_factor not in ("module", "SoC"):
            assert gpu.die_area_mm2 and gpu.die_area_mm2 > 100, gpu.id


@pytest.mark.parametrize("gpu_id", sorted(ADDED_GPUS))
def test_added_gpus_match_their_sourced_figures(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    memory, bandwidth, bf16, tdp = ADDED_GPUS[gpu_id]
    assert (gpu.id, gpu.memory_size_gb, gpu.memory_bandwidth_gb_s, gpu.tdp_w) == (gpu_id, memory, bandwidth, tdp)
    assert gpu.peak_dense_tops["bf16"] == pytest.approx(bf16)
    for key in ("memory_size_gb", "memory_bandwidth_gb_s", "tdp_w", "peak_dense_tops.bf16", "gpus_per_node", "release_year"):
        assert "http" in gpu.sources[key], (gpu_id, key)
    assert (gpu.die_area_mm2 is None) == (gpu_id in NO_PUBLISHED_DIE_AREA)
    assert gpu.interconnect_bandwidth_gb_s > 0 and gpu.gpus_per_node > 1 and gpu.release_year >= 2020


def test_added_gpus_dense_peaks_are_half_the_sparse_datasheet_figures() -> None:
    # NVIDIA prints sparse tensor figures; the catalog keeps half of them.
    assert get_gpu("h100-nvl").peak_dense_tops["fp16"] * 2 == pytest.approx(1671.0)
    assert get_gpu("a40").peak_dense_tops["bf16"] * 2 == pytest.approx(299.4)
    assert get_gpu("l40").peak_dense_tops["fp8"] * 2 == pytest.approx(724.0)
    # GeForce: FP32-accumulate rate, half the FP16-accumulate one (Ada whitepaper: 330.3 with FP16 accumulate).
    assert get_gpu("rtx-4090").peak_dense_tops["fp16"] * 2 == pytest.approx(330.4)
    # AMD matrix figures are dense as published: MI300X FP8 is twice its FP16.
    mi300x = get_gpu("mi300x").peak_dense_tops
    assert mi300x["fp8"] == pytest.approx(2 * mi300x["fp16"], rel=1e-3)


@pytest.mark.parametrize("alias, gpu_id", [
    ("NVIDIA A40", "a40"), ("rtx a6000", "rtx-a6000"), ("A6000", "rtx-a6000"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"), ("rtx 6000 ada", "rtx-6000-ada"), ("NVIDIA L40", "l40"),
    ("l40", "l40"), ("l40s", "l40s"), ("NVIDIA A30", "a30"), ("NVIDIA H100 NVL", "h100-nvl"), ("h20", "h20"),
    ("h200", "h200"), ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("rtx 4090", "rtx-4090"), ("RTX_3090", "rtx-3090"),
    ("AMD Instinct MI250X", "mi250x"), ("AMD Instinct MI300X", "mi300x"), ("Intel Gaudi 3", "gaudi3"),
    ("HL-325L", "gaudi3"),
])
def test_added_gpu_aliases(alias: str, gpu_id: str) -> None:
    assert get_gpu(alias).id == gpu_id


def test_added_gpus_close_matches() -> None:
    with pytest.raises(UnknownIdError, match="did you mean.*rtx-4090"):
        get_gpu("rtx-4070")
    with pytest.raises(UnknownIdError, match="did you mean.*mi300x"):
        get_gpu("mi300")


def test_paper_table2_is_recorded_but_dense_peaks_are_used() -> None:
    a100 = get_gpu("a100-80gb")
    assert a100.paper_table2 is not None and a100.paper_table2["fp16_tops"] == 624.0  # sparse in the paper
    assert a100.peak_dense_tops["fp16"] == 312.0
    h100 = get_gpu("h100-sxm")
    assert h100.paper_table2["fp16_tops"] == 1979.0
    assert h100.peak_dense_tops["fp16"] == pytest.approx(989.4, abs=1.0)
    for gpu_id in ("t4", "l4"):
        assert get_gpu(gpu_id).paper_table2 is not None


def test_gpu_without_source_is_rejected() -> None:
    raw = {"id": "x", "name": "x", "vendor": "v", "architecture": "a", "form_factor": "PCIe", "memory_type": "m",
           "memory_size_gb": 1.0, "memory_bandwidth_gb_s": 1.0, "interconnect": "none", "interconnect_bandwidth_gb_s": 0.0,
           "tdp_w": 1.0, "process_node_nm": 7, "gpus_per_node": 1, "release_year": 2020,
           "peak_dense_tops": {"fp16": 1.0}, "sources": {"memory_size_gb": "s"}}
    with pytest.raises(ValueError, match="without a source"):
        gpu_from_dict(raw)


@pytest.mark.parametrize("alias, gpu_id", [("h100", "h100-sxm"), ("H100-SXM", "h100-sxm"), ("A100_80GB", "a100-80gb")])
def test_gpu_aliases(alias: str, gpu_id: str) -> None:
    assert get_gpu(alias).id == gpu_id


def test_unknown_gpu_lists_close_matches() -> None:
    with pytest.raises(UnknownIdError, match="did you mean.*h100"):
        get_gpu("h10")


@pytest.mark.parametrize("model_id", PAPER_MODELS + EDGE_MODELS + DATACENTER_MODELS)
def test_required_models_load(model_id: str) -> None:
    assert get_model(model_id).id == model_id


def test_parameter_counts_within_two_percent_of_published() -> None:
    for arch in model_catalog():
        assert arch.published_params_b, arch.id
        computed = arch.param_count() / 1e9
        assert abs(computed / arch.published_params_b - 1) < 0.02, (arch.id, computed, arch.published_params_b)
        assert arch.sources.get("config") and arch.sources.get("published_params_b"), arch.id


def test_model_aliases_and_close_matches() -> None:
    assert get_model("meta-llama/Llama-3.1-8B-Instruct").id == "llama3.1-8b"
    assert get_model("LLAMA3.1-8B").id == "llama3.1-8b"
    with pytest.raises(UnknownIdError, match="did you mean"):
        get_model("llama3.1-9b")


def test_hf_config_loads_into_the_same_type() -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
           "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
           "_name_or_path": "meta-llama/Llama-3.1-8B"}
    arch = arch_from_hf_config(cfg)
    ref = get_model("llama3.1-8b")
    for field in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
                  "activation", "norm_type", "mlp_gated", "num_experts", "tied_embeddings", "max_context"):
        assert getattr(arch, field) == getattr(ref, field), field
    assert arch.param_count() == ref.param_count()


def test_hf_config_variants() -> None:
    mixtral = arch_from_hf_config({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                   "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert (mixtral.num_experts, mixtral.experts_per_token) == (8, 2)
    assert abs(mixtral.param_count() / 46.7e9 - 1) < 0.02
    falcon = arch_from_hf_config({"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
                                  "vocab_size": 65024, "multi_query": True, "parallel_attn": True, "bias": False})
    assert falcon.num_kv_heads == 1 and falcon.parallel_attention and not falcon.mlp_gated and falcon.norm_type == "layernorm"
    gemma = arch_from_hf_config({"text_config": {"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360,
                                                 "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 8,
                                                 "head_dim": 256, "vocab_size": 262208}})
    assert gemma.head_dim == 256 and gemma.q_dim == 4096
