"""Request validation: each invalid field raises one clear error naming it."""

from __future__ import annotations

import pytest

from llmco2.errors import InvalidInputError
from llmco2.specs import ModelArch, Request, validate_request


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(prompt_tokens=-1), "prompt_tokens"),
        (dict(generated_tokens=0), "generated_tokens"),
        (dict(prompt_tokens=1.5), "prompt_tokens"),
        (dict(num_gpus=4, tensor_parallel=3), "tensor_parallel"),
        (dict(weight_dtype="fp12"), "weight_dtype"),
        (dict(activation_dtype="int4"), "activation_dtype"),
    ],
)
def test_request_field_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        Request(**kwargs)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_dtype_defaults() -> None:
    r = Request(weight_dtype="int4")
    assert (r.activation_dtype, r.kv_dtype, r.compute_dtype) == ("fp16", "fp16", "fp16")  # W4A16
    r = Request(weight_dtype="int8")
    assert r.compute_dtype == "int8"
    r = Request(weight_dtype="bfloat16")
    assert (r.weight_dtype, r.activation_dtype, r.weight_bytes) == ("bf16", "bf16", 2.0)
    assert Request(generated_tokens=1).decode_steps == 0


@pytest.mark.parametrize(
    "arch_kwargs, field",
    [
        (dict(hidden_size=0), "hidden_size"),
        (dict(num_kv_heads=3), "num_kv_heads"),
        (dict(experts_per_token=3), "experts_per_token"),
        (dict(activation="swishy"), "activation"),
    ],
)
def test_arch_field_errors(arch_kwargs: dict, field: str) -> None:
    base = dict(id="t", hidden_size=1024, intermediate_size=4096, num_layers=2, num_heads=16, num_kv_heads=4, head_dim=64,
                vocab_size=100)
    with pytest.raises(InvalidInputError) as err:
        ModelArch(**{**base, **arch_kwargs})
    assert err.value.field == field


def test_request_against_model_and_gpu(llama8b, a100) -> None:
    validate_request(Request(num_gpus=8), llama8b, a100)
    with pytest.raises(InvalidInputError) as err:
        validate_request(Request(num_gpus=16), llama8b, a100)  # 32 heads but one node has 8 GPUs
    assert err.value.field == "tensor_parallel"
    with pytest.raises(InvalidInputError) as err:
        validate_request(Request(num_gpus=2, tensor_parallel=1), llama8b.with_overrides(num_layers=1), a100)
    assert err.value.field == "num_gpus"
    with pytest.raises(InvalidInputError) as err:
        validate_request(Request(weight_dtype="fp8"), llama8b, a100)  # A100 has no FP8
    assert err.value.field == "dtype"
    with pytest.raises(InvalidInputError) as err:
        validate_request(Request(prompt_tokens=131072, generated_tokens=1), llama8b, a100)
    assert err.value.field == "prompt_tokens"
    validate_request(Request(prompt_tokens=131072, generated_tokens=1), llama8b, a100, check_context=False)
