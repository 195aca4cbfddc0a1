"""Causal LMs for measurement, built from a catalog architecture with Hugging Face transformers.

:func:`hf_config_for` maps a :class:`~llmco2.specs.ModelArch` onto a transformers model type
and its config keys:

* gated RMSNorm models (Llama, Mistral, Qwen, Gemma, Phi-3, ...) -> ``llama`` (exact shapes);
* mixtures of experts -> ``mixtral``;
* LayerNorm + ALiBi (BLOOM) -> ``bloom``; LayerNorm + parallel attention/MLP (Falcon, GPT-J)
  -> ``falcon``; other LayerNorm + RoPE models -> ``gpt_neox`` (or ``starcoder2`` with grouped
  KV heads); LayerNorm + learned positions (OPT) -> ``opt``;
* anything else -> a llama-style approximation, with a warning and a note in the results.

:func:`build_model` instantiates it with random weights (``AutoModelForCausalLM.from_config``;
nothing is downloaded) in the requested dtype on one device, or split layer-wise across several
GPUs (a pipeline; true tensor parallelism needs another engine such as vLLM). Real weights come
from a local checkpoint folder (``model_path``). transformers is imported lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from llmco2.errors import InvalidInputError
from llmco2.measure.errors import MeasurementError, UnsupportedConfigError
from llmco2.specs import ModelArch

log = logging.getLogger(__name__)

#: Weight dtypes the hf-transformers runner can run (quantised types need another backend).
TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_HF_ACT = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a canonical weight dtype; `UnsupportedConfigError` for quantised ones."""
    if dtype not in TORCH_DTYPES:
        raise UnsupportedConfigError(f"dtype {dtype} needs a quantisation backend that the hf-transformers runner does not set up; "
                                     f"it runs {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[dtype]


def transformers_module() -> Any:
    """``transformers``, imported on first use."""
    try:
        import transformers
    except ImportError:
        raise InvalidInputError("transformers is not installed; pip install transformers (the measurement runner needs it)") from None
    return transformers


@dataclass(frozen=True)
class HFSpec:
    """A transformers model type and config keys for an architecture, with the approximations made."""

    model_type: str
    kwargs: dict[str, Any]
    notes: tuple[str, ...] = ()

    @property
    def approximate(self) -> bool:
        return bool(self.notes)


def _common(arch: ModelArch) -> dict[str, Any]:
    return {"vocab_size": arch.vocab_size, "max_position_embeddings": arch.max_context, "tie_word_embeddings": arch.tied_embeddings,
            "use_cache": True, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def _standard_heads(arch: ModelArch) -> bool:
    return arch.head_dim * arch.num_heads == arch.hidden_size


def _llama(arch: ModelArch, notes: list[str]) -> HFSpec:
    inter = arch.intermediate_size
    if not arch.mlp_gated:
        inter = max(1, round(2 * inter / 3))
        notes.append(f"ungated MLP approximated by a gated one of width {inter} (same weights and FLOPs)")
    if arch.norm_type != "rmsnorm":
        notes.append("LayerNorm approximated by RMSNorm")
    if arch.position_encoding != "rope":
        notes.append(f"{arch.position_encoding} positions approximated by RoPE")
    if arch.parallel_attention:
        notes.append("parallel attention/MLP run one after the other")
    kw = _common(arch) | {
        "hidden_size": arch.hidden_size, "intermediate_size": inter, "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads, "num_key_value_heads": arch.num_kv_heads, "head_dim": arch.head_dim,
        "hidden_act": _HF_ACT[arch.activation], "attention_bias": arch.attention_bias, "mlp_bias": arch.mlp_bias,
    }
    return HFSpec("llama", kw, tuple(notes))


def _mixtral(arch: ModelArch) -> HFSpec:
    notes = []
    if arch.num_shared_experts:
        notes.append(f"{arch.num_shared_experts} shared expert(s) left out")
    if arch.attention_bias or arch.mlp_bias:
        notes.append("biases left out")
    if not arch.mlp_gated or arch.norm_type != "rmsnorm":
        notes.append("experts approximated by gated MLPs with RMSNorm")
    kw = _common(arch) | {
        "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads, "num_key_value_heads": arch.num_kv_heads, "head_dim": arch.head_dim,
        "hidden_act": _HF_ACT[arch.activation], "num_local_experts": arch.num_experts, "num_experts_per_tok": arch.experts_per_token,
    }
    return HFSpec("mixtral", kw, tuple(notes))


def _layernorm_spec(arch: ModelArch) -> HFSpec | None:
    """A native LayerNorm model type for ``arch`` where one matches its shapes, else None."""
    if arch.mlp_gated or not _standard_heads(arch):
        return None
    act = _HF_ACT[arch.activation]
    bias = arch.attention_bias or arch.mlp_bias
    notes = [] if arch.attention_bias == arch.mlp_bias else ["attention and MLP biases share one switch"]
    mha = arch.num_kv_heads == arch.num_heads
    if arch.position_encoding == "alibi":
        if not mha or arch.intermediate_size != 4 * arch.hidden_size:
            return None
        if arch.activation != "gelu_tanh":
            notes.append(f"{arch.activation} approximated by BLOOM's tanh GELU")
        return HFSpec("bloom", _common(arch) | {"hidden_size": arch.hidden_size, "n_layer": arch.num_layers, "n_head": arch.num_heads},
                      tuple(notes))
    if arch.position_encoding == "learned":
        if not mha:
            return None
        return HFSpec("opt", _common(arch) | {
            "hidden_size": arch.hidden_size, "ffn_dim": arch.intermediate_size, "num_hidden_layers": arch.num_layers,
            "num_attention_heads": arch.num_heads, "activation_function": act, "enable_bias": bias,
            "word_embed_proj_dim": arch.hidden_size}, tuple(notes))
    if arch.parallel_attention:
        kw = _common(arch) | {
            "hidden_size": arch.hidden_size, "num_hidden_layers": arch.num_layers, "num_attention_heads": arch.num_heads,
            "ffn_hidden_size": arch.intermediate_size, "activation": act, "bias": bias, "parallel_attn": True, "alibi": False}
        if mha:
            kw |= {"new_decoder_architecture": False, "multi_query": False}
        elif arch.num_kv_heads == 1:
            kw |= {"new_decoder_architecture": False, "multi_query": True}
        else:
            kw |= {"new_decoder_architecture": True, "num_kv_heads": arch.num_kv_heads}
        return HFSpec("falcon", kw, tuple(notes))
    if mha:
        return HFSpec("gpt_neox", _common(arch) | {
            "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_layers,
            "num_attention_heads": arch.num_heads, "hidden_act": act, "use_parallel_residual": False,
            "attention_bias": arch.attention_bias}, tuple(notes))
    return HFSpec("starcoder2", _common(arch) | {
        "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size, "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads, "num_key_value_heads": arch.num_kv_heads, "hidden_act": act, "use_bias": bias},
        tuple(notes))


def hf_config_for(arch: ModelArch) -> HFSpec:
    """The transformers model type and config keys that reproduce ``arch`` (see the module doc)."""
    if arch.is_moe:
        return _mixtral(arch)
    if arch.norm_type == "rmsnorm" and arch.mlp_gated:
        notes = []
        if arch.position_encoding != "rope":
            notes.append(f"{arch.position_encoding} positions approximated by RoPE")
        if arch.parallel_attention:
            notes.append("parallel attention/MLP run one after the other")
        return _llama(arch, notes)
    spec = _layernorm_spec(arch) if arch.norm_type == "layernorm" else None
    if spec is not None:
        return spec
    return _llama(arch, ["no native transformers type matches; llama-style approximation"])


def hf_config(arch: ModelArch) -> tuple[Any, HFSpec]:
    """A transformers config object for ``arch`` (``AutoConfig.for_model``) and its spec."""
    spec = hf_config_for(arch)
    if spec.approximate:
        log.warning("%s: %s", arch.id, "; ".join(spec.notes))
    config = transformers_module().AutoConfig.for_model(spec.model_type, **spec.kwargs)
    return config, spec


@dataclass
class BuiltModel:
    """A model ready to run: where its inputs go, what it is and how far it approximates the catalog entry."""

    model: torch.nn.Module
    input_device: torch.device
    vocab_size: int
    weights: str  # "random" or "checkpoint"
    model_type: str
    notes: tuple[str, ...] = ()
    device_map: dict[str, str] = field(default_factory=dict)
    param_count: int = 0


def _dtype_kwarg(dtype: torch.dtype) -> dict[str, Any]:
    major = int(str(transformers_module().__version__).split(".")[0])
    return {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype}


def _from_config(config: Any, dtype: torch.dtype, attn: str) -> torch.nn.Module:
    auto = transformers_module().AutoModelForCausalLM
    try:
        return auto.from_config(config, attn_implementation=attn, **_dtype_kwarg(dtype))
    except (ValueError, ImportError) as exc:
        if attn == "eager":
            raise
        log.warning("%s attention unavailable for %s (%s); using eager attention", attn, type(config).__name__,
                    str(exc).split(". ")[0])
        return auto.from_config(config, attn_implementation="eager", **_dtype_kwarg(dtype))


def layer_stack(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """Name and module of the decoder-layer list (the ``ModuleList`` holding most parameters)."""
    best: tuple[str, torch.nn.ModuleList] | None = None
    best_size = -1
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module):
            size = sum(p.numel() for p in module.parameters())
            if size > best_size:
                best, best_size = (name, module), size
    if best is None:
        raise MeasurementError(f"{type(model).__name__} has no list of decoder layers to split across GPUs")
    return best


def pipeline_device_map(model: torch.nn.Module, devices: Sequence[torch.device]) -> dict[str, torch.device]:
    """Module name -> device for a layer-wise (pipeline) split over ``devices``.

    Decoder layers are cut into contiguous, equally sized groups, one per device; modules that
    come before the layer list (embeddings) go to the first device, those after it (final norm,
    LM head) to the last — except an LM head tied to the input embedding, which stays with it.
    """
    if not devices:
        raise ValueError("no device given")
    stack_name, stack = layer_stack(model)
    n_layers, n_dev = len(stack), len(devices)
    if n_dev > n_layers:
        raise UnsupportedConfigError(f"{n_dev} GPUs but only {n_layers} layers to split across them")
    mapping: dict[str, torch.device] = {f"{stack_name}.{i}" if stack_name else str(i): devices[i * n_dev // n_layers]
                                        for i in range(n_layers)}
    path = stack_name.split(".") if stack_name else []
    parent: torch.nn.Module = model
    prefix = ""
    for part in path:
        seen = False
        for child_name, _ in parent.named_children():
            if child_name == part:
                seen = True
                continue
            mapping[prefix + child_name] = devices[-1] if seen else devices[0]
        parent = getattr(parent, part)
        prefix += part + "."
    head, embed = _output_and_input_embeddings(model)
    if head is not None and embed is not None and head.weight is embed.weight:
        for name, module in model.named_modules():
            if module is head and name in mapping:
                mapping[name] = devices[0]
    return mapping


def _output_and_input_embeddings(model: torch.nn.Module) -> tuple[Any, Any]:
    try:
        return model.get_output_embeddings(), model.get_input_embeddings()  # type: ignore[operator]
    except (AttributeError, NotImplementedError):
        return None, None


def _initialise(model: torch.nn.Module) -> None:
    """Random weights (the model's own init scheme) for a model materialised from the meta device."""
    if hasattr(model, "initialize_weights"):
        model.initialize_weights()  # type: ignore[operator]
    else:  # transformers 4.x
        model.apply(model._init_weights)  # type: ignore[operator,arg-type]
        for module in model.modules():
            if hasattr(module, "inv_freq") and hasattr(module, "rope_init_fn"):
                inv_freq, _ = module.rope_init_fn(module.config, module.inv_freq.device)
                module.inv_freq.copy_(inv_freq)


def check_finite(model: torch.nn.Module) -> None:
    """`MeasurementError` naming the first parameter or buffer holding NaN/inf or left on meta."""
    for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor in items:
            if tensor is None or not tensor.is_floating_point():
                continue
            if tensor.is_meta:
                raise MeasurementError(f"{kind} {name} was never placed on a device")
            if not bool(torch.isfinite(tensor).all()):
                raise MeasurementError(f"{kind} {name} holds non-finite values after random initialisation")


def _split_random_model(config: Any, dtype: torch.dtype, attn: str, devices: Sequence[torch.device]) -> tuple[torch.nn.Module, dict]:
    with torch.device("meta"):
        model = _from_config(config, dtype, attn)
    mapping = pipeline_device_map(model, devices)
    for name, dev in mapping.items():
        model.get_submodule(name).to_empty(device=dev, recurse=True)
    leftovers = [n for n, p in [*model.named_parameters(), *model.named_buffers()] if p.is_meta]
    if leftovers:
        raise MeasurementError(f"no device for {', '.join(leftovers[:3])}")
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    with torch.no_grad():
        _initialise(model)
    if len(set(devices)) > 1:
        try:
            from accelerate import dispatch_model
        except ImportError:
            raise UnsupportedConfigError("splitting a model across GPUs needs accelerate; pip install accelerate") from None
        dispatch_model(model, device_map={n: (d.index if d.type == "cuda" else str(d)) for n, d in mapping.items()})
    return model, mapping


def build_model(arch: ModelArch, dtype: str, devices: Sequence[torch.device], *, flash_attention: bool = True,
                model_path: str | Path | None = None, seed: int = 0) -> BuiltModel:
    """Instantiate ``arch`` in ``dtype`` on ``devices`` (one device, or a layer-wise split).

    Random weights (seeded) unless ``model_path`` names a local checkpoint folder. ``flash_attention``
    selects PyTorch's fused SDPA attention (FlashAttention kernels where the GPU and dtype allow),
    else the eager three-kernel attention.
    """
    if not devices:
        raise InvalidInputError("no device to build the model on", field="gpus")
    tdtype = torch_dtype(dtype)
    attn = "sdpa" if flash_attention else "eager"
    torch.manual_seed(seed)
    devices = [torch.device(d) for d in devices]
    if model_path is not None:
        return _load_checkpoint(arch, Path(model_path), tdtype, attn, devices)
    config, spec = hf_config(arch)
    mapping: dict[str, torch.device] = {}
    if len(devices) == 1:
        with devices[0]:
            model = _from_config(config, tdtype, attn)
    else:
        model, mapping = _split_random_model(config, tdtype, attn, devices)
    model.eval()
    check_finite(model)
    n_params = sum(p.numel() for p in model.parameters())
    notes = list(spec.notes)
    expected = arch.param_count()
    if abs(n_params - expected) > 0.02 * expected:
        notes.append(f"{n_params:,} parameters instead of {expected:,}")
        log.warning("%s: the %s model has %s parameters, the catalog architecture %s", arch.id, spec.model_type, f"{n_params:,}", f"{expected:,}")
    input_device = next(model.parameters()).device if not mapping else devices[0]
    return BuiltModel(model=model, input_device=input_device, vocab_size=arch.vocab_size, weights="random", model_type=spec.model_type,
                      notes=tuple(notes), device_map={k: str(v) for k, v in mapping.items()}, param_count=n_params)


def _load_checkpoint(arch: ModelArch, path: Path, dtype: torch.dtype, attn: str, devices: Sequence[torch.device]) -> BuiltModel:
    if not (path / "config.json").is_file():
        raise InvalidInputError(f"{path} is not a checkpoint folder (no config.json)", field="model_path")
    auto = transformers_module().AutoModelForCausalLM
    if len(devices) == 1:
        device_map: Any = {"": devices[0]}
        max_memory = None
    else:
        device_map = "auto"
        max_memory = {d.index: torch.cuda.get_device_properties(d).total_memory for d in devices if d.type == "cuda"} or None
    model = auto.from_pretrained(path, local_files_only=True, attn_implementation=attn, device_map=device_map,
                                 max_memory=max_memory, **_dtype_kwarg(dtype))
    model.eval()
    notes: list[str] = []
    cfg = model.config
    if getattr(cfg, "num_hidden_layers", arch.num_layers) != arch.num_layers or getattr(cfg, "hidden_size", arch.hidden_size) != arch.hidden_size:
        notes.append(f"checkpoint {path.name} does not match the configured architecture")
        log.warning("%s: checkpoint %s has a different architecture than the configuration", arch.id, path)
    mapping = {str(k): str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()}
    return BuiltModel(model=model, input_device=devices[0], vocab_size=int(getattr(cfg, "vocab_size", arch.vocab_size)),
                      weights="checkpoint", model_type=str(getattr(cfg, "model_type", "")), notes=tuple(notes), device_map=mapping,
                      param_count=sum(p.numel() for p in model.parameters()))
