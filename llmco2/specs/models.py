"""LLM architecture catalog: typed records from ``specs/data/models.toml`` or a HF ``config.json``.

The parameter count is computed from the architecture (:func:`ModelArch.param_count`) and the
catalog test checks it against the publisher's figure (within 2%).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.specs.lookup import Catalog
from llmco2.specs.toml_cache import load_toml

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")
NORM_TYPES = ("rmsnorm", "layernorm")
POSITION_ENCODINGS = ("rope", "alibi", "learned")


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer. Sizes are element counts; ``published_params_b`` is billions."""

    id: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    activation: str = "silu"
    norm_type: str = "rmsnorm"
    mlp_gated: bool = True
    num_experts: int = 1
    experts_per_token: int = 1
    num_shared_experts: int = 0
    position_encoding: str = "rope"
    tied_embeddings: bool = False
    max_context: int = 4096
    attention_bias: bool = False
    mlp_bias: bool = False
    parallel_attention: bool = False
    name: str = ""
    hf_id: str = ""
    family: str = ""
    aliases: tuple[str, ...] = ()
    published_params_b: float | None = None
    active_params_b: float | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_arch(self)

    # -- shapes ----------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection output (heads x head_dim)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projection outputs (KV heads x head_dim)."""
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    # -- parameter counts ------------------------------------------------------------------
    def attention_params(self) -> int:
        """Parameters of one attention block: Wq, Wk, Wv, Wo (+ biases)."""
        h, q, kv = self.hidden_size, self.q_dim, self.kv_dim
        n = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            n += q + 2 * kv + (h if self.mlp_bias else 0)
        return n

    def expert_params(self) -> int:
        """Parameters of one MLP (one expert): gate/up/down matrices (+ biases)."""
        h, i = self.hidden_size, self.intermediate_size
        n = (3 if self.mlp_gated else 2) * h * i
        if self.mlp_bias:
            n += (2 * i if self.mlp_gated else i) + h
        return n

    def mlp_params(self) -> int:
        """Parameters of one layer's MLP: all experts, router and shared experts."""
        n = self.num_experts * self.expert_params() + self.num_shared_experts * self.expert_params()
        if self.is_moe:
            n += self.hidden_size * self.num_experts
        return n

    def norm_params(self) -> int:
        """Parameters of one layer's two norms (LayerNorm has a bias too)."""
        return 2 * self.hidden_size * (2 if self.norm_type == "layernorm" else 1)

    def layer_params(self) -> int:
        return self.attention_params() + self.mlp_params() + self.norm_params()

    def embedding_params(self) -> int:
        """Token embedding, LM head (unless tied), final norm and learned position table."""
        n = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        n += self.hidden_size * (2 if self.norm_type == "layernorm" else 1)
        if self.position_encoding == "learned":
            n += self.max_context * self.hidden_size
        return n

    def param_count(self) -> int:
        """Total parameters (all experts)."""
        return self.num_layers * self.layer_params() + self.embedding_params()

    def active_param_count(self) -> int:
        """Parameters touched per token (only ``experts_per_token`` experts of each MoE layer)."""
        if not self.is_moe:
            return self.param_count()
        per_layer = self.layer_params() - (self.num_experts - self.experts_per_token) * self.expert_params()
        return self.num_layers * per_layer + self.embedding_params()

    def with_overrides(self, **changes: Any) -> ModelArch:
        """A perturbed copy (validated), e.g. ``arch.with_overrides(num_layers=30)``."""
        return replace(self, **changes)


def _require(cond: bool, message: str, field_name: str) -> None:
    if not cond:
        raise InvalidInputError(message, field=field_name)


def validate_arch(arch: ModelArch) -> None:
    """Raise `InvalidInputError` naming the first invalid field of ``arch``."""
    for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size"):
        value = getattr(arch, name)
        _require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                 f"must be a positive integer, got {value!r}", name)
    _require(arch.num_heads % arch.num_kv_heads == 0,
             f"num_kv_heads {arch.num_kv_heads} must divide num_heads {arch.num_heads}", "num_kv_heads")
    _require(arch.num_experts >= 1, f"must be >= 1 (1 for a dense model), got {arch.num_experts}", "num_experts")
    _require(1 <= arch.experts_per_token <= arch.num_experts,
             f"must be between 1 and num_experts={arch.num_experts}, got {arch.experts_per_token}", "experts_per_token")
    _require(arch.activation in ACTIVATIONS, f"unknown activation {arch.activation!r}; expected one of {', '.join(ACTIVATIONS)}", "activation")
    _require(arch.norm_type in NORM_TYPES, f"unknown norm {arch.norm_type!r}; expected one of {', '.join(NORM_TYPES)}", "norm_type")
    _require(arch.position_encoding in POSITION_ENCODINGS,
             f"unknown position encoding {arch.position_encoding!r}; expected one of {', '.join(POSITION_ENCODINGS)}", "position_encoding")
    _require(arch.max_context > 0, f"must be positive, got {arch.max_context}", "max_context")


_ARCH_FIELDS = {f.name for f in fields(ModelArch)}


def arch_from_dict(raw: dict[str, Any], origin: str = "models.toml") -> ModelArch:
    """Build a `ModelArch` from one ``[[model]]`` table (unknown keys are an error)."""
    unknown = set(raw) - _ARCH_FIELDS
    if unknown:
        raise ValueError(f"{origin}: model {raw.get('id')!r} has unknown keys {sorted(unknown)}")
    data = dict(raw)
    data["aliases"] = tuple(str(a).lower() for a in data.get("aliases", ()))
    return ModelArch(**data)


def load_model_file(path: str | Path) -> list[ModelArch]:
    doc = load_toml(path)
    return [arch_from_dict(entry, origin=str(path)) for entry in doc.get("model", [])]


@functools.cache
def model_catalog() -> Catalog[ModelArch]:
    """The shipped model catalog (cached)."""
    path = resources.files("llmco2.specs") / "data" / "models.toml"
    with resources.as_file(path) as real:
        return Catalog("model", load_model_file(real))


# -- Hugging Face config.json --------------------------------------------------------------------
_LAYERNORM_TYPES = {"bloom", "falcon", "gpt2", "gptj", "gpt_neox", "opt", "starcoder2", "phi", "gpt_bigcode", "RefinedWeb", "RefinedWebModel"}
_UNGATED_TYPES = {"bloom", "falcon", "gpt2", "gptj", "gpt_neox", "opt", "starcoder2", "phi", "gpt_bigcode", "RefinedWeb", "RefinedWebModel"}
_LEARNED_POS_TYPES = {"gpt2", "opt", "gpt_bigcode"}
_PARALLEL_TYPES = {"gptj", "phi"}
_ACT_ALIASES = {
    "silu": "silu", "swish": "silu", "swiglu": "silu",
    "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
    "gelu_tanh": "gelu_tanh", "relu": "relu", "geglu": "gelu_tanh",
}


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def arch_from_hf_config(cfg: dict[str, Any], model_id: str | None = None) -> ModelArch:
    """Map a Hugging Face ``config.json`` (as a dict) onto `ModelArch`.

    Handles the common key spellings (``n_embd``/``d_model``, ``n_layer``, ``n_head``,
    ``num_key_value_heads``/``num_kv_heads``/``multi_query``), MoE keys (``num_local_experts``,
    ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``) and nested
    ``text_config`` (multimodal wrappers). Missing required keys raise `InvalidInputError`.
    """
    if isinstance(cfg.get("text_config"), dict):
        outer = cfg
        cfg = {**cfg["text_config"]}
        cfg.setdefault("_name_or_path", outer.get("_name_or_path"))
    model_type = str(cfg.get("model_type", ""))
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    vocab = _first(cfg, "vocab_size", "padded_vocab_size")
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads), ("vocab_size", vocab)):
        if value is None:
            raise InvalidInputError(f"config.json has no {key} (or an equivalent key)", field=key)
    hidden, layers, heads, vocab = int(hidden), int(layers), int(heads), int(vocab)
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        kv_heads = 1
    else:
        kv_heads = int(_first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads))
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise InvalidInputError(f"num_heads {heads} does not divide hidden_size {hidden} and no head_dim is given",
                                    field="num_heads")
        head_dim = hidden // heads
    num_experts = int(_first(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1) or 1)
    if num_experts > 1:
        inter = _first(cfg, "moe_intermediate_size", "intermediate_size", "ffn_hidden_size")
    else:
        inter = _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
    if inter is None:
        inter = 4 * hidden
    act_raw = str(_first(cfg, "hidden_activation", "hidden_act", "activation_function", "activation", default="silu")).lower()
    activation = _ACT_ALIASES.get(act_raw, act_raw if act_raw in ACTIVATIONS else "gelu")
    norm = "layernorm" if model_type in _LAYERNORM_TYPES or "layer_norm_epsilon" in cfg and "rms_norm_eps" not in cfg else "rmsnorm"
    gated = model_type not in _UNGATED_TYPES
    if model_type == "bloom" or cfg.get("alibi"):
        pos = "alibi"
    elif model_type in _LEARNED_POS_TYPES:
        pos = "learned"
    else:
        pos = "rope"
    max_ctx = int(_first(cfg, "max_position_embeddings", "seq_length", "n_positions", "max_sequence_length", default=2048))
    name = model_id or str(cfg.get("_name_or_path") or model_type or "hf-model")
    return ModelArch(
        id=name.lower(),
        name=name,
        hf_id=str(cfg.get("_name_or_path") or ""),
        family=model_type,
        hidden_size=hidden,
        intermediate_size=int(inter),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        vocab_size=vocab,
        activation=activation,
        norm_type=norm,
        mlp_gated=gated,
        num_experts=num_experts,
        experts_per_token=int(_first(cfg, "num_experts_per_tok", "num_experts_per_token", "moe_topk", default=1)) if num_experts > 1 else 1,
        num_shared_experts=int(cfg.get("n_shared_experts") or 0),
        position_encoding=pos,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", model_type in {"bloom", "gemma", "gemma2", "gemma3_text"})),
        max_context=max_ctx,
        attention_bias=bool(_first(cfg, "attention_bias", "bias", "qkv_bias", default=model_type in {"qwen2", "bloom"})),
        mlp_bias=bool(_first(cfg, "mlp_bias", "bias", default=model_type in {"bloom", "starcoder2", "gptj", "opt"})),
        parallel_attention=bool(cfg.get("parallel_attn", model_type in _PARALLEL_TYPES)),
    )


def load_hf_config(path: str | Path) -> ModelArch:
    """Load a HF ``config.json`` file (or a folder holding one) as a `ModelArch`."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise InvalidInputError(f"no such file {str(p)!r}; give a model id or a path to a config.json", field="model")
    try:
        cfg = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{p} is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})", field="model") from None
    if not isinstance(cfg, dict):
        raise InvalidInputError(f"{p} does not hold a JSON object", field="model")
    return arch_from_hf_config(cfg, model_id=p.parent.name or p.stem)


def get_model(name: str | ModelArch) -> ModelArch:
    """A model by catalog id/alias, or from a HF ``config.json`` path; close matches on failure."""
    if isinstance(name, ModelArch):
        return name
    text = str(name)
    path = Path(text)
    if text.endswith(".json") or (path.is_dir() and (path / "config.json").is_file()):
        return load_hf_config(path)
    return model_catalog().get(text, field="model")
