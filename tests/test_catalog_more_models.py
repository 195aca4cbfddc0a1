"""Golden shapes of the models added for the checkpoints people serve most (Qwen2.5, small Qwen3,
Mistral Small 3, Phi-4, small Gemma 3, OLMo 2), and lookup by a model's Hugging Face repository name."""

from __future__ import annotations

import pytest

from llmco2.specs import get_model, model_catalog
from llmco2.specs.models import arch_from_dict

# (hidden, intermediate, layers, heads, kv heads, head dim, vocab, tied embeddings) from each config.json
GOLDEN = {
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 64, 151936, True),
    "qwen2.5-7b": (3584, 18944, 28, 28, 4, 128, 152064, False),
    "qwen2.5-72b": (8192, 29568, 80, 64, 8, 128, 152064, False),
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128, 151936, True),
    "qwen3-4b": (2560, 9728, 36, 32, 8, 128, 151936, True),
    "mistral-small-24b": (5120, 32768, 40, 32, 8, 128, 131072, False),
    "phi-4": (5120, 17920, 40, 40, 10, 128, 100352, False),
    "gemma3-1b": (1152, 6912, 26, 4, 1, 256, 262144, True),
    "gemma3-4b": (2560, 10240, 34, 8, 4, 256, 262208, True),
    "olmo2-7b": (4096, 11008, 32, 32, 32, 128, 100352, False),
    "olmo2-13b": (5120, 13824, 40, 40, 40, 128, 100352, False),
}


@pytest.mark.parametrize("model_id", sorted(GOLDEN))
def test_golden_shapes_and_published_size(model_id: str) -> None:
    arch = get_model(model_id)
    shape = (arch.hidden_size, arch.intermediate_size, arch.num_layers, arch.num_heads, arch.num_kv_heads,
             arch.head_dim, arch.vocab_size, arch.tied_embeddings)
    assert shape == GOLDEN[model_id]
    assert arch.param_count() / 1e9 == pytest.approx(arch.published_params_b, rel=0.02)
    assert arch.sources["config"].startswith("https://huggingface.co/") and arch.sources["config"].endswith("config.json")


def test_gemma3_1b_keeps_its_own_window() -> None:
    """Gemma 3 1B bands 22 of its 26 layers at 512 tokens; 4B (like 12B) 29 of 34 at 1,024."""
    small, four = get_model("gemma3-1b"), get_model("gemma3-4b")
    assert (small.sliding_window, small.num_window_layers) == (512, 22)
    assert (four.sliding_window, four.num_window_layers) == (1024, 29)


@pytest.mark.parametrize("name, model_id", [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("qwen/qwen2.5-72b", "qwen2.5-72b"), ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("google/gemma-3-12b-it", "gemma3-12b"), ("mistralai/Mistral-Small-24B-Instruct-2501", "mistral-small-24b"),
    ("microsoft/phi-4", "phi-4"), ("allenai/OLMo-2-1124-13B", "olmo2-13b"), ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"),
])
def test_a_models_hugging_face_name_finds_it(name: str, model_id: str) -> None:
    assert get_model(name).id == model_id


def test_every_catalog_model_is_found_by_its_hf_id() -> None:
    missing = [m.id for m in model_catalog() if m.hf_id and get_model(m.hf_id).id != m.id]
    assert not missing


def test_hf_id_becomes_an_alias_once() -> None:
    raw = {"id": "x", "name": "x", "hf_id": "Org/X-1B", "aliases": ["org/x-1b", "x1"], "family": "x", "hidden_size": 64,
           "intermediate_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 4, "head_dim": 16, "vocab_size": 100}
    assert arch_from_dict(raw).aliases == ("org/x-1b", "x1")
    assert arch_from_dict({**raw, "aliases": []}).aliases == ("org/x-1b",)
