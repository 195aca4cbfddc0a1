"""LLM architecture catalog: typed records from ``specs/data/models.toml`` or a HF ``config.json``.

The parameter count is computed from the architecture (:func:`ModelArch.param_count`) and the
catalog test checks it against the publisher's figure (within 2%).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.specs.limits import arch_limit
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
    # -- multi-head latent attention (DeepSeek-V2/V3, Kimi K2); kv_lora_rank 0 = ordinary attention
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: queries projected directly from the hidden state
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    attn_output_gate: bool = False  # Qwen3-Next gated attention: q_proj also emits a per-head gate
    # -- banded attention: num_window_layers layers see at most sliding_window past tokens
    sliding_window: int = 0
    window_kind: str = "sliding"  # sliding (the last W tokens) | chunked (Llama 4: tokens of the same W-chunk)
    num_window_layers: int = 0
    # -- layer mix: which layers hold which block (counts; the rest are attention + MLP layers)
    num_dense_layers: int = 0  # MoE models: layers with a dense MLP (first_k_dense_replace, interleaving)
    dense_intermediate_size: int = 0  # their width (0: intermediate_size)
    num_mamba_layers: int = 0  # Mamba-2 (SSD) mixers instead of attention
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    ssm_state_size: int = 0
    mamba_groups: int = 0
    conv_kernel: int = 0  # causal conv1d taps of Mamba-2 and gated-DeltaNet layers
    num_linear_layers: int = 0  # gated DeltaNet (linear attention) mixers instead of attention
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    num_mlp_free_layers: int = 0  # blocks with a mixer and no MLP (Nemotron-H 'M' and '*' blocks)
    num_mixer_free_layers: int = 0  # blocks with an MLP and no mixer (Nemotron-H '-' blocks)
    # what the publisher leaves out of its active-parameter figure: "" (nothing), "input_embedding"
    # (the lookup table: one row per token, e.g. gpt-oss) or "embeddings" (lookup table and LM head)
    active_params_excludes: str = ""
    name: str = ""
    approximations: tuple[str, ...] = ()  # what the entry or a config.json read approximates (reported with predictions)
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

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    # -- layer mix ---------------------------------------------------------------------------
    @property
    def num_attention_layers(self) -> int:
        """Layers whose token mixer is softmax attention (full or banded)."""
        return self.num_layers - self.num_mamba_layers - self.num_linear_layers - self.num_mixer_free_layers

    @property
    def num_mlp_layers(self) -> int:
        return self.num_layers - self.num_mlp_free_layers

    @property
    def num_moe_layers(self) -> int:
        return self.num_mlp_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def dense_mlp_width(self) -> int:
        return self.dense_intermediate_size or self.intermediate_size

    @property
    def mamba_inner(self) -> int:
        """Mamba-2 inner width (heads x head dim)."""
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the Mamba-2 causal conv1d: x, B and C."""
        return self.mamba_inner + 2 * self.mamba_groups * self.ssm_state_size

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    # -- parameter counts ------------------------------------------------------------------
    def attention_params(self) -> int:
        """Parameters of one attention block: Wq, Wk, Wv, Wo (+ biases); MLA: the low-rank
        query and joint KV projections with their norms, the KV up-projection and Wo."""
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.num_heads * qk if self.q_lora_rank
                 else h * self.num_heads * qk)
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            up = self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + up + self.num_heads * self.v_head_dim * h
        q, kv = self.q_dim, self.kv_dim
        n = h * q * (2 if self.attn_output_gate else 1) + 2 * h * kv + q * h
        if self.attention_bias:
            n += q + 2 * kv + (h if self.mlp_bias else 0)
        return n

    def mamba_params(self) -> int:
        """Parameters of one Mamba-2 mixer: in_proj (z, x, B, C, dt), conv1d with bias, A, D,
        dt bias, gated norm and out_proj."""
        h, d, conv = self.hidden_size, self.mamba_inner, self.mamba_conv_dim
        in_proj = h * (d + conv + self.mamba_num_heads)
        return in_proj + conv * (self.conv_kernel + 1) + 3 * self.mamba_num_heads + d + d * h

    def linear_attention_params(self) -> int:
        """Parameters of one gated-DeltaNet mixer: in_proj (q, k, v, z and b, a), conv1d, A and dt
        bias, gated norm and out_proj."""
        h, kd, vd, nv = self.hidden_size, self.linear_key_dim, self.linear_value_dim, self.linear_num_value_heads
        conv = 2 * kd + vd
        return h * (2 * kd + 2 * vd + 2 * nv) + conv * self.conv_kernel + 2 * nv + self.linear_value_head_dim + vd * h

    def expert_params(self, width: int | None = None) -> int:
        """Parameters of one MLP (one expert) of ``width`` (default: intermediate_size)."""
        h, i = self.hidden_size, width or self.intermediate_size
        n = (3 if self.mlp_gated else 2) * h * i
        if self.mlp_bias:
            n += (2 * i if self.mlp_gated else i) + h
        return n

    def mlp_params(self) -> int:
        """Parameters of one MoE layer's MLP (all experts, router, shared experts), or of one
        dense MLP for a dense model."""
        n = self.num_experts * self.expert_params() + self.num_shared_experts * self.expert_params()
        if self.is_moe:
            n += self.hidden_size * self.num_experts
        return n

    def norm_params(self) -> int:
        """Parameters of one layer's two norms (LayerNorm has a bias too)."""
        return 2 * self.hidden_size * (2 if self.norm_type == "layernorm" else 1)

    def layer_params(self) -> int:
        """Parameters of one attention + MLP layer (MoE models: an MoE layer)."""
        return self.attention_params() + self.mlp_params() + self.norm_params()

    def embedding_params(self) -> int:
        """Token embedding, LM head (unless tied), final norm and learned position table."""
        n = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        n += self.hidden_size * (2 if self.norm_type == "layernorm" else 1)
        if self.position_encoding == "learned":
            n += self.max_context * self.hidden_size
        return n

    def _stack_params(self, experts: int) -> int:
        """All layers, with ``experts`` routed experts counted per MoE layer."""
        if not (self.num_mamba_layers or self.num_linear_layers or self.num_mixer_free_layers or self.num_mlp_free_layers
                or self.num_dense_layers):
            if not self.is_moe:
                return self.num_layers * self.layer_params()
            return self.num_layers * (self.layer_params() - (self.num_experts - experts) * self.expert_params())
        moe = experts * self.expert_params() + self.num_shared_experts * self.expert_params() + self.hidden_size * self.num_experts
        dense_mlps = self.num_mlp_layers - self.num_moe_layers
        return (self.num_attention_layers * self.attention_params() + self.num_mamba_layers * self.mamba_params()
                + self.num_linear_layers * self.linear_attention_params() + self.num_moe_layers * moe
                + dense_mlps * self.expert_params(self.dense_mlp_width) + self.num_layers * self.norm_params())

    def param_count(self) -> int:
        """Total parameters (all experts)."""
        return self._stack_params(self.num_experts) + self.embedding_params()

    def active_param_count(self) -> int:
        """Parameters touched per token (only ``experts_per_token`` experts of each MoE layer)."""
        n = self.param_count() if not self.is_moe else self._stack_params(self.experts_per_token) + self.embedding_params()
        table = self.vocab_size * self.hidden_size
        if self.active_params_excludes == "input_embedding":
            n -= table
        elif self.active_params_excludes == "embeddings":
            n -= table * (1 if self.tied_embeddings else 2)
        return n

    def with_overrides(self, **changes: Any) -> ModelArch:
        """A perturbed copy (validated), e.g. ``arch.with_overrides(num_layers=30)``. A new
        ``num_layers`` rescales the layer-mix counts that are not given (windowed, dense, Mamba,
        linear-attention, MLP-free and mixer-free layers) in proportion, so the mix is kept."""
        n = changes.get("num_layers", self.num_layers)
        if n != self.num_layers:
            scaled = {name: min(n, round(getattr(self, name) * n / self.num_layers))
                      for name in _LAYER_MIX if name not in changes and getattr(self, name)}
            mixers = ("num_mamba_layers", "num_linear_layers", "num_mixer_free_layers")
            while sum(scaled.get(m, getattr(self, m)) if m not in changes else changes[m] for m in mixers) > n:
                m = max((m for m in mixers if scaled.get(m)), key=lambda m: scaled[m])
                scaled[m] -= 1
            changes = {**scaled, **changes}
            if "num_window_layers" in scaled:
                attention = n - sum(changes.get(m, getattr(self, m)) for m in mixers)
                changes["num_window_layers"] = min(changes["num_window_layers"], attention)
            if "num_dense_layers" in scaled:
                mlp = n - changes.get("num_mlp_free_layers", self.num_mlp_free_layers)
                changes["num_dense_layers"] = min(changes["num_dense_layers"], mlp)
        return replace(self, **changes)


_LAYER_MIX = ("num_window_layers", "num_dense_layers", "num_mamba_layers", "num_linear_layers", "num_mlp_free_layers",
              "num_mixer_free_layers")


def _require(cond: bool, message: str, field_name: str) -> None:
    if not cond:
        raise InvalidInputError(message, field=field_name)


_POSITIVE = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
             "max_context", "num_experts", "experts_per_token")


def validate_arch(arch: ModelArch) -> None:
    """Raise `InvalidInputError` naming the first invalid field of ``arch``."""
    for name in _POSITIVE[:7]:
        value = getattr(arch, name)
        _require(isinstance(value, int) and not isinstance(value, bool) and 0 < value <= arch_limit(name),
                 f"must be a positive integer (at most {arch_limit(name):,}), got {value!r}", name)
    for name in (f.name for f in fields(ModelArch) if f.type == "int" and f.name not in _POSITIVE[:7]):
        value = getattr(arch, name)
        _require(isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= arch_limit(name),
                 f"must be a non-negative integer (at most {arch_limit(name):,}), got {value!r}", name)
    mixers = arch.num_mamba_layers + arch.num_linear_layers + arch.num_mixer_free_layers
    _require(mixers <= arch.num_layers, f"mamba, linear-attention and mixer-free layers ({mixers}) exceed num_layers {arch.num_layers}",
             "num_layers")
    _require(arch.num_window_layers <= arch.num_attention_layers,
             f"num_window_layers {arch.num_window_layers} exceeds the {arch.num_attention_layers} attention layers", "num_window_layers")
    _require(arch.num_window_layers == 0 or arch.sliding_window > 0, "windowed layers need sliding_window > 0", "sliding_window")
    _require(arch.active_params_excludes in ("", "input_embedding", "embeddings"),
             f"unknown value {arch.active_params_excludes!r}; expected '', input_embedding or embeddings", "active_params_excludes")
    _require(arch.window_kind in ("sliding", "chunked"), f"unknown window kind {arch.window_kind!r}; expected sliding or chunked",
             "window_kind")
    _require(arch.num_mlp_free_layers <= arch.num_layers and arch.num_dense_layers <= arch.num_mlp_layers,
             "num_mlp_free_layers + num_dense_layers exceed num_layers", "num_dense_layers")
    if arch.is_mla:
        for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _require(getattr(arch, name) > 0, "multi-head latent attention needs a positive value", name)
    if arch.num_mamba_layers:
        for name in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "mamba_groups", "conv_kernel"):
            _require(getattr(arch, name) > 0, "Mamba-2 layers need a positive value", name)
    if arch.num_linear_layers:
        for name in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "conv_kernel"):
            _require(getattr(arch, name) > 0, "gated-DeltaNet layers need a positive value", name)
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
    """Build a `ModelArch` from one ``[[model]]`` table (unknown keys are an error). The Hugging Face
    repository name (``hf_id``) is a lookup key as well as the aliases."""
    unknown = set(raw) - _ARCH_FIELDS
    if unknown:
        raise ValueError(f"{origin}: model {raw.get('id')!r} has unknown keys {sorted(unknown)}")
    data = dict(raw)
    aliases = [str(a).lower() for a in data.get("aliases", ())]
    hf_id = str(data.get("hf_id") or "").lower()
    data["aliases"] = tuple(aliases + ([hf_id] if hf_id and hf_id not in aliases and hf_id != str(data.get("id")) else []))
    data["approximations"] = tuple(str(a) for a in data.get("approximations", ()))
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
