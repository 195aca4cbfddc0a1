"""FP8 checkpoints on GPUs without FP8 tensor cores: W8A16 through vLLM's FP8 Marlin kernel."""

from __future__ import annotations

import pytest

import llmco2
from llmco2.cli.flags import command_line_text
from llmco2.errors import InvalidInputError
from llmco2.specs import Request
from llmco2.specs.quantisation import canonical_quantisation, quant_path


@pytest.mark.parametrize("name", ["fp8-marlin", "FP8_W8A16", "w8a16-fp8", "fp8 weight-only"])
def test_names(name: str) -> None:
    assert canonical_quantisation(name) == "fp8-marlin"


def test_weights_are_fp8_and_the_arithmetic_is_the_activations() -> None:
    req = Request(quantisation="fp8-marlin")
    assert (req.weight_dtype, req.compute_dtype, quant_path(req.quantisation)) == ("fp8", "fp16", "weight-only")


def test_fp8_on_an_ampere_gpu_is_refused_with_the_method_to_name() -> None:
    with pytest.raises(InvalidInputError, match=r"a100-80gb has no fp8 throughput.*`quantisation='fp8-marlin'`") as err:
        llmco2.predict("llama3.1-8b", "a100-80gb", prompt_tokens=512, generated_tokens=64, dtype="fp8")
    assert command_line_text(str(err.value)).endswith("(--quantisation fp8-marlin)")


def test_w8a16_decode_streams_half_the_bytes_of_bf16() -> None:
    """Memory-bound decode of FP8 weights takes less time than of 16-bit ones; compute-bound prefill, at the
    weight-only GEMMs' share of the 16-bit rate, no less."""
    kw = dict(prompt_tokens=512, generated_tokens=128, batch_size=8)
    w8 = llmco2.predict("llama3.1-8b", "a100-80gb", quantisation="fp8-marlin", **kw)
    bf = llmco2.predict("llama3.1-8b", "a100-80gb", dtype="bf16", **kw)
    assert 0.5 < w8.latency_s["decode"] / bf.latency_s["decode"] < 0.9
    assert w8.latency_s["prefill"] >= bf.latency_s["prefill"]
    assert w8.energy_j["decode"] < bf.energy_j["decode"]
