"""The serving-engine catalog: ids, aliases, graceful unknowns, and the Request field."""

import pytest

from llmco2.errors import InvalidInputError
from llmco2.specs import DEFAULT_ENGINE, Request, engine_catalog, engine_id, engine_ids, get_engine


def test_every_engine_number_has_a_source_and_unknown_is_a_level():
    ids = engine_ids()
    assert "unknown" in ids and DEFAULT_ENGINE == "vllm" and len(ids) == len(set(ids))
    for e in engine_catalog():
        assert e.launch_overhead_us > 0 and e.step_overhead_ms > 0
        assert set(e.sources) >= {"launch_overhead_us", "step_overhead_ms"}


@pytest.mark.parametrize(("name", "expected"), [("HF-Transformers", "hf"), ("vLLM", "vllm"), ("TRT-LLM", "tensorrt-llm"),
                                                ("deepspeed-mii", "deepspeed"), ("vllm_enforce_eager", "vllm-eager")])
def test_aliases_resolve(name, expected):
    assert get_engine(name).id == expected
    assert engine_id(name) == expected


def test_unknown_names_degrade_for_data_and_fail_for_users():
    assert engine_id("my-inhouse-engine") == "unknown"
    assert engine_id(None) == "unknown" and engine_id(float("nan")) == "unknown"
    with pytest.raises(InvalidInputError, match="did you mean vllm"):
        get_engine("vlm")


def test_request_engine_defaults_to_vllm_and_is_canonical():
    assert Request().engine == "vllm"
    assert Request(engine="transformers").engine == "hf"
    with pytest.raises(InvalidInputError, match="engine"):
        Request(engine="nonsense-engine")
