"""Engine names that carry the software's version, and names spelt with spaces."""

from __future__ import annotations

import pytest

from llmco2.errors import InvalidInputError
from llmco2.specs import get_engine, get_gpu
from llmco2.specs.engines import engine_id, versioned_engine
from llmco2.specs.lookup import normalise_key


@pytest.mark.parametrize("name, engine", [
    ("vllm 0.6.3", "vllm-v0"), ("vLLM==0.7.3", "vllm-v0"), ("vllm-0.5.4.post1", "vllm-v0"),
    ("vllm 0.8.0", "vllm"), ("vllm==0.10.1.post1", "vllm"), ("vLLM v0.11.0", "vllm"),
    ("sglang v0.4.6", "sglang"), ("tgi@2.4", "tgi"), ("TensorRT-LLM 0.12.0", "tensorrt-llm"), ("transformers 4.46", "hf"),
])
def test_a_version_selects_the_engine_that_release_ran(name: str, engine: str) -> None:
    assert get_engine(name).id == engine
    assert engine_id(name) == engine


def test_catalog_names_win_over_the_version_reading() -> None:
    """``vllm-v0`` and ``vllm-0`` are catalog names, not vLLM 0."""
    assert versioned_engine("vllm-v0") == "vllm-v0"  # read as vLLM 0.x: the V0 engine as well
    assert get_engine("vllm-v0").id == get_engine("vllm-0").id == "vllm-v0"


def test_an_unknown_engine_with_a_version_is_still_unknown() -> None:
    assert versioned_engine("lmdeploy 0.6") is None
    assert engine_id("lmdeploy 0.6") == "unknown"
    with pytest.raises(InvalidInputError, match="unknown engine 'lmdeploy 0.6'"):
        get_engine("lmdeploy 0.6")


def test_spaces_read_as_hyphens() -> None:
    assert normalise_key("  HF   Transformers ") == normalise_key("hf_transformers") == "hf-transformers"
    assert get_engine("hf transformers").id == "hf"
    assert get_gpu("RTX 4090").id == get_gpu("rtx_4090").id == "rtx-4090"
