"""An inference request: batch, prompt and generated tokens, GPUs and their parallel layout (tensor, expert,
pipeline), dtypes, weight quantisation, attention kernel."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.specs.dtypes import DTYPE_BYTES, canonical_dtype
from llmco2.specs.engines import DEFAULT_ENGINE, get_engine
from llmco2.specs.gpus import GPU
from llmco2.specs.limits import MAX_EXACT_INT, REQUEST_LIMITS, check_int
from llmco2.specs.models import ModelArch
from llmco2.specs.quantisation import METHODS, quant_path, resolve_quantisation

WEIGHT_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")
ACTIVATION_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8")
#: Activation dtypes of bitsandbytes layers (they quantise 16/32-bit activations themselves).
BNB_ACTIVATION_DTYPES = ("fp32", "fp16", "bf16")


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an integer from ``minimum`` to the field's limit (:data:`REQUEST_LIMITS`)."""
    return check_int(value, name, minimum, REQUEST_LIMITS.get(name, MAX_EXACT_INT))


@dataclass(frozen=True)
class Request:
    """One LLM inference request on a group of GPUs.

    Attributes:
        batch_size: sequences processed together.
        prompt_tokens: prompt length per sequence (the prefill covers these tokens).
        generated_tokens: output tokens per sequence, the first one produced by the prefill; the
            decode phase runs ``generated_tokens - 1`` steps.
        num_gpus: GPUs serving the request: ``tensor_parallel * attention_dp * pipeline_parallel``.
        tensor_parallel: tensor-parallel degree (Megatron-style head/column/row sharding);
            ``None`` means all ``num_gpus``.
        expert_parallel: expert-parallel degree of the mixture-of-experts layers (``None``: 1, the
            experts sharded by ``tensor_parallel`` like every other matrix). As vLLM's
            ``--tensor-parallel-size T --data-parallel-size D --enable-expert-parallel`` (EP size =
            T x D): a multiple of ``tensor_parallel``; attention and the dense layers run
            tensor-parallel over ``tensor_parallel`` GPUs and data-parallel over ``attention_dp =
            expert_parallel / tensor_parallel`` such groups (the batch spread over them), and each of
            the ``expert_parallel`` GPUs holds ``num_experts / expert_parallel`` routed experts whole.
            It divides ``num_gpus`` (the rest are pipeline stages); the model must be a
            mixture of experts whose expert count it divides (:func:`validate_request`).
        weight_dtype / activation_dtype / kv_dtype: storage types (``None``: derived; the weights
            are ``fp16``, or the quantisation method's dtype when only the method is given).
        compute_dtype: type the matrix units run in (``None``: weight dtype for float and int8
            weights, the activation dtype for 4-bit weight-only quantisation; with a method, see
            ``quantisation``).
        flash_attention: fused attention kernel (FlashAttention) or the three-kernel version.
        causal: count prefill attention over the causal triangle ``L(L+1)/2`` instead of the
            full ``L^2`` square that the paper and the seed notes use.
        engine: serving engine id from :mod:`llmco2.specs.engines` (``vllm`` by default; aliases
            are resolved, an unknown name is an error; ``unknown`` is the level for data rows whose
            engine is not in the catalog).
        quantisation: weight quantisation method, a name of :data:`llmco2.specs.quantisation.QUANTISATIONS`
            (aliases resolved), or ``None``: the kernels the weight dtype implies (``int4``/``fp4``:
            weight-only, 16-bit arithmetic; ``int8``/``fp8``: 8-bit arithmetic). With a method, the
            weight dtype defaults to the method's (awq/gptq/bnb-nf4/bnb-fp4: int4, bnb-int8: int8,
            fp8: fp8, mxfp4/nvfp4: fp4, none: fp16) and another the method does not store is refused;
            the matrix units run the activation dtype for weight-only and bitsandbytes 4-bit methods,
            int8 for bnb-int8 and the weight dtype otherwise.
    """

    batch_size: int = 1
    prompt_tokens: int = 128
    generated_tokens: int = 128
    num_gpus: int = 1
    tensor_parallel: int | None = None
    expert_parallel: int | None = None
    weight_dtype: str | None = None
    activation_dtype: str | None = None
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    flash_attention: bool = True
    causal: bool = False
    engine: str = DEFAULT_ENGINE
    quantisation: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "batch_size", _positive_int(self.batch_size, "batch_size"))
        set_(self, "prompt_tokens", _positive_int(self.prompt_tokens, "prompt_tokens"))
        set_(self, "generated_tokens", _positive_int(self.generated_tokens, "generated_tokens"))
        set_(self, "num_gpus", _positive_int(self.num_gpus, "num_gpus"))
        tp = self.num_gpus if self.tensor_parallel is None else _positive_int(self.tensor_parallel, "tensor_parallel")
        if self.num_gpus % tp:
            raise InvalidInputError(f"tensor_parallel {tp} must divide num_gpus {self.num_gpus}", field="tensor_parallel")
        set_(self, "tensor_parallel", tp)
        ep = 1 if self.expert_parallel is None else _positive_int(self.expert_parallel, "expert_parallel")
        if ep > 1 and ep % tp:
            raise InvalidInputError(f"expert_parallel {ep} must be a multiple of tensor_parallel {tp} (as in vLLM, the "
                                    "expert-parallel group is the tensor-parallel groups of data-parallel attention)",
                                    field="expert_parallel")
        if self.num_gpus % ep:
            raise InvalidInputError(f"expert_parallel {ep} must divide num_gpus {self.num_gpus}", field="expert_parallel")
        set_(self, "expert_parallel", ep)
        q, w = resolve_quantisation(self.quantisation, self.weight_dtype)
        if w not in WEIGHT_DTYPES:
            raise InvalidInputError(f"weights cannot be {w}; expected one of {', '.join(WEIGHT_DTYPES)}", field="weight_dtype")
        set_(self, "weight_dtype", w)
        a = self.activation_dtype
        a = canonical_dtype(a, "activation_dtype") if a is not None else (w if w in ("fp32", "fp16", "bf16") else "fp16")
        if a not in ACTIVATION_DTYPES:
            raise InvalidInputError(f"activations cannot be {a}; expected one of {', '.join(ACTIVATION_DTYPES)}", field="activation_dtype")
        if quant_path(q).startswith("bnb") and a not in BNB_ACTIVATION_DTYPES:
            raise InvalidInputError(f"{q} runs its layers on {'/'.join(BNB_ACTIVATION_DTYPES)} activations, not {a}",
                                    field="quantisation")
        set_(self, "activation_dtype", a)
        kv = canonical_dtype(self.kv_dtype, "kv_dtype") if self.kv_dtype is not None else a
        if kv not in ACTIVATION_DTYPES:
            raise InvalidInputError(f"KV cache cannot be {kv}; expected one of {', '.join(ACTIVATION_DTYPES)}", field="kv_dtype")
        set_(self, "kv_dtype", kv)
        c = self.compute_dtype
        if c is None and q is not None:
            c = {"weight-only": a, "bnb-4bit": a, "bnb-int8": "int8"}.get(quant_path(q), w)
        elif c is None:
            c = a if w in ("int4", "fp4") else w
        set_(self, "compute_dtype", canonical_dtype(c, "compute_dtype"))
        set_(self, "flash_attention", bool(self.flash_attention))
        set_(self, "causal", bool(self.causal))
        set_(self, "engine", get_engine(self.engine).id)
        set_(self, "quantisation", q)

    @property
    def attention_dp(self) -> int:
        """Data-parallel attention groups of the expert-parallel group: ``expert_parallel /
        tensor_parallel`` when experts are spread wider than the tensor-parallel group, else 1."""
        ep, tp = self.expert_parallel, self.tensor_parallel
        return ep // tp if ep > tp else 1  # type: ignore[operator]

    @property
    def pipeline_parallel(self) -> int:
        return self.num_gpus // (self.tensor_parallel * self.attention_dp)  # type: ignore[operator]

    @property
    def decode_steps(self) -> int:
        """Decode iterations: the first generated token comes out of the prefill."""
        return self.generated_tokens - 1

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight as stored: the dtype's size plus the method's block scales (bitsandbytes 4-bit)."""
        size = DTYPE_BYTES[self.weight_dtype]  # type: ignore[index]
        return size + METHODS[self.quantisation].scale_bytes if self.quantisation else size

    @property
    def quant_path(self) -> str:
        """Kernel path of the linear layers (:data:`llmco2.specs.quantisation.QUANT_PATHS`)."""
        return quant_path(self.quantisation)

    @property
    def activation_bytes(self) -> float:
        return DTYPE_BYTES[self.activation_dtype]  # type: ignore[index]

    @property
    def kv_bytes(self) -> float:
        return DTYPE_BYTES[self.kv_dtype]  # type: ignore[index]

    def replace(self, **changes: Any) -> Request:
        return replace(self, **changes)


def validate_request(request: Request, arch: ModelArch, gpu: GPU, check_context: bool = True) -> None:
    """Check that ``request`` can run ``arch`` on ``gpu``; `InvalidInputError` names the field."""
    tp = request.tensor_parallel
    assert tp is not None
    check_expert_parallel(request, arch, gpu)
    if arch.num_heads % tp:
        raise InvalidInputError(f"tensor parallel degree {tp} must divide num_heads {arch.num_heads} of {arch.id}", field="tensor_parallel")
    if arch.num_kv_heads % tp and tp % arch.num_kv_heads:  # above the KV heads, engines replicate them (vLLM, SGLang)
        raise InvalidInputError(f"tensor parallel degree {tp} must divide num_kv_heads {arch.num_kv_heads} of {arch.id}, "
                                "or be a multiple of it", field="tensor_parallel")
    if arch.intermediate_size % tp:
        raise InvalidInputError(f"tensor parallel degree {tp} must divide intermediate_size {arch.intermediate_size} of {arch.id}", field="tensor_parallel")
    if request.pipeline_parallel > arch.num_layers:
        raise InvalidInputError(f"{request.pipeline_parallel} pipeline stages exceed the {arch.num_layers} layers of {arch.id}", field="num_gpus")
    if tp > max(gpu.gpus_per_node, 1):
        raise InvalidInputError(f"tensor parallel degree {tp} exceeds the {gpu.gpus_per_node} GPUs of one {gpu.id} node", field="tensor_parallel")
    if tp > 1 and gpu.interconnect_bandwidth_gb_s <= 0:
        raise InvalidInputError(f"{gpu.id} has no GPU-to-GPU interconnect; use `gpus=1`", field="num_gpus")
    if not gpu.supports(request.compute_dtype):  # type: ignore[arg-type]
        hint = ("; an FP8 checkpoint runs there with 16-bit arithmetic, as vLLM runs it (`quantisation='fp8-marlin'`)"
                if request.compute_dtype == "fp8" and request.weight_dtype == "fp8" else "")
        raise InvalidInputError(
            f"{gpu.id} has no {request.compute_dtype} throughput; supported: {', '.join(sorted(gpu.peak_dense_tops))}{hint}",
            field="dtype",
        )
    if check_context and request.prompt_tokens + request.generated_tokens > arch.max_context:
        raise InvalidInputError(
            f"prompt_tokens + generated_tokens = {request.prompt_tokens + request.generated_tokens} exceeds the "
            f"{arch.max_context}-token context of {arch.id}",
            field="prompt_tokens",
        )


def check_expert_parallel(request: Request, arch: ModelArch, gpu: GPU | None = None) -> None:
    """Expert parallelism needs a mixture-of-experts model whose routed experts it divides, and (given
    ``gpu``) one node with a GPU-to-GPU link: the all-to-all between nodes is not modelled."""
    ep = request.expert_parallel
    assert ep is not None
    if ep == 1:
        return
    if not arch.is_moe:
        raise InvalidInputError(f"{arch.id} is a dense model; expert parallelism needs a mixture-of-experts model "
                                "(leave expert parallelism at 1)", field="expert_parallel")
    if arch.num_experts % ep:
        raise InvalidInputError(f"expert parallel degree {ep} must divide the {arch.num_experts} experts of {arch.id}",
                                field="expert_parallel")
    if gpu is not None and ep > max(gpu.gpus_per_node, 1):
        raise InvalidInputError(f"expert parallel degree {ep} exceeds the {gpu.gpus_per_node} GPUs of one {gpu.id} node "
                                "(an all-to-all across nodes is not modelled)", field="expert_parallel")
    if gpu is not None and gpu.interconnect_bandwidth_gb_s <= 0:
        raise InvalidInputError(f"{gpu.id} has no GPU-to-GPU interconnect for the experts' all-to-all; leave expert "
                                "parallelism at 1", field="expert_parallel")
