"""Model lookup (:func:`get_model`: a catalog id or alias, or a config.json path) and a Hugging Face
``config.json`` as a :class:`~llmco2.specs.models.ModelArch`, with nothing misread.

Every field that changes the cost of a request is either mapped (multi-head latent attention,
DeepSeek/Llama-4/Qwen MoE layer mixes, banded and chunked attention, Mamba-2 and gated-DeltaNet
layers, tensor shapes) or refused: an architecture (``model_type``) or a field value that llmco2
does not model is an :class:`~llmco2.errors.InvalidInputError` naming it. With
``approximate=True`` it is mapped onto the nearest modelled architecture instead, and
``ModelArch.approximations`` says what was approximated. Phi-3-small's blocksparse attention
layers are always read as banded attention over their local blocks (the nearest modelled form;
its approximations note says what that leaves out). The model is named from the config
(``_name_or_path``, ``architectures``, ``model_type``), never from the folder it sits in.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError, UnknownIdError
from llmco2.file_checks import JSONTooDeepError, check_input_file, parse_json
from llmco2.specs.limits import MAX_CONTEXT
from llmco2.specs.models import ACTIVATIONS, ModelArch, model_catalog

_LAYERNORM_TYPES = {"bloom", "falcon", "gpt2", "gptj", "gpt_neox", "opt", "starcoder2", "phi", "gpt_bigcode", "RefinedWeb", "RefinedWebModel"}
_UNGATED_TYPES = {"bloom", "falcon", "gpt2", "gptj", "gpt_neox", "opt", "starcoder2", "phi", "gpt_bigcode", "RefinedWeb", "RefinedWebModel"}
_LEARNED_POS_TYPES = {"gpt2", "opt", "gpt_bigcode"}
_PARALLEL_TYPES = {"gptj", "phi"}
_ACT_ALIASES = {
    "silu": "silu", "swish": "silu", "swiglu": "silu",
    "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
    "gelu_tanh": "gelu_tanh", "relu": "relu", "geglu": "gelu_tanh",
    "gegelu": "gelu",  # Phi-3-small: quick_gelu(a) * (b + 1) on an interleaved up projection, a gated GeLU
}


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default



#: ``model_type`` values whose layers llmco2 models (text decoders).
MODELLED_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi3", "phi", "falcon", "RefinedWeb", "RefinedWebModel", "bloom", "gpt2", "gptj", "gpt_neox", "opt",
    "starcoder2", "gpt_bigcode", "deepseek_v2", "deepseek_v3", "kimi_k2", "llama4", "llama4_text", "nemotron_h",
    "gpt_oss", "internlm2", "cohere", "olmo", "olmo2", "granite", "exaone", "stablelm", "codegen", "phi3small",
})
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "window", "chunked_attention": "window",
                "linear_attention": "linear", "mamba": "mamba"}


def _int(cfg: dict[str, Any], key: str, value: Any) -> int:
    """``value`` as an exact non-negative integer within :data:`~llmco2.specs.limits.MAX_ARCH_VALUE`
    (a whole float such as 4096.0 is accepted; a string, a fraction or NaN is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)) \
            or value != int(value) or not 0 <= value <= MAX_CONTEXT:
        raise InvalidInputError(f"config.json {key} must be a non-negative integer (at most {MAX_CONTEXT:,}), got {value!r}",
                                field=key)
    return int(value)


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key] if key in _NON_INT else _int(cfg, key, cfg[key])
    return default


_NON_INT = {"hidden_activation", "hidden_act", "activation_function", "activation"}


class _Reader:
    """Reads one config, collecting what had to be approximated (or refusing it)."""

    def __init__(self, cfg: dict[str, Any], approximate: bool) -> None:
        self.cfg, self.approximate, self.notes = cfg, approximate, []

    def unmodelled(self, what: str, field: str) -> None:
        if not self.approximate:
            raise InvalidInputError(f"config.json: {what} is not modelled by llmco2; pass `approximate=True` to predict it "
                                    "with the nearest modelled architecture (the notes will say so)", field=field)
        self.notes.append(f"approximated: {what}")


#: Keys a Hugging Face ``config.json`` gives its context length under, in the order they are read
#: (``sliding_window`` is an attention band, not a context, and is never read as one).
CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "n_ctx", "max_seq_len",
                "max_seq_length", "model_max_length")
#: The note a prediction carries when a config.json gives no context length.
CONTEXT_UNKNOWN_NOTE = ("context length unknown: config.json gives no max_position_embeddings (nor another context key); "
                        "requests of any length are accepted")
#: ``model_max_length`` at or above this is the "no limit" placeholder transformers writes (``int(1e30)``).
_NO_LIMIT = 10**30


def _context(cfg: dict[str, Any], position_encoding: str, r: _Reader) -> int:
    """The context length ``cfg`` gives (the first of :data:`CONTEXT_KEYS` present). Without one, a
    model with rotary or ALiBi positions accepts any length (:data:`~llmco2.specs.limits.MAX_CONTEXT`)
    and its notes say so; learned positions need the length (it is the number of rows of their table)."""
    for key in CONTEXT_KEYS:
        value = cfg.get(key)
        if value is None or (key == "model_max_length" and isinstance(value, (int, float)) and value >= _NO_LIMIT):
            continue
        return _int(cfg, key, value)
    if position_encoding == "learned":
        raise InvalidInputError("config.json gives no max_position_embeddings (nor n_positions or another context key), "
                                "the number of rows of this model's learned position table; add it",
                                field="max_position_embeddings")
    r.notes.append(CONTEXT_UNKNOWN_NOTE)
    return MAX_CONTEXT


def _layer_mix(cfg: dict[str, Any], model_type: str, layers: int, r: _Reader) -> dict[str, Any]:
    """Counts of each kind of layer (banded, Mamba, linear attention, MLP-free, dense-MLP)."""
    out: dict[str, Any] = {}
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        kinds = [_LAYER_TYPES.get(str(t)) for t in types]
        unknown = sorted({str(t) for t, k in zip(types, kinds, strict=True) if k is None})
        if unknown:
            r.unmodelled(f"layer_types {', '.join(unknown)}", "layer_types")
        if len(types) != layers:
            raise InvalidInputError(f"config.json layer_types has {len(types)} entries for {layers} layers", field="layer_types")
        out["num_window_layers"] = kinds.count("window")
        out["num_linear_layers"] = kinds.count("linear")
        out["num_mamba_layers"] = kinds.count("mamba")
    elif cfg.get("sliding_window_pattern"):
        period = _int(cfg, "sliding_window_pattern", cfg["sliding_window_pattern"])  # every period-th layer is global
        out["num_window_layers"] = layers - layers // period if period > 0 else 0
    elif model_type in {"gemma2"}:
        out["num_window_layers"] = layers // 2  # Gemma 2 alternates local and global layers (transformers Gemma2 layer_types)
    elif window and model_type in {"mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "phi3", "starcoder2"}:
        use = cfg.get("use_sliding_window", model_type in {"mistral", "mixtral", "phi3", "starcoder2"})
        if use:
            top = cfg.get("max_window_layers", layers) if model_type.startswith("qwen") else 0
            out["num_window_layers"] = layers - min(_int(cfg, "max_window_layers", top), layers) if model_type.startswith("qwen") else layers
    if out.get("num_window_layers"):
        if not window:
            raise InvalidInputError("config.json declares banded layers but no sliding_window", field="sliding_window")
        out["sliding_window"] = _int(cfg, "sliding_window", window)
    if model_type in {"llama4", "llama4_text"} and cfg.get("attention_chunk_size"):
        rope_free = cfg.get("no_rope_layers")
        interval = _int(cfg, "no_rope_layer_interval", cfg.get("no_rope_layer_interval", 4))
        n_global = (sum(1 for v in rope_free if not v) if isinstance(rope_free, list) and rope_free
                    else layers // interval if interval else 0)
        out.update(num_window_layers=layers - n_global, sliding_window=_int(cfg, "attention_chunk_size", cfg["attention_chunk_size"]),
                   window_kind="chunked")
    if model_type == "phi3small":
        out.update(_phi3_small_blocksparse(cfg, layers, r))
    if model_type == "qwen3_next" and not isinstance(types, list):
        interval = _int(cfg, "full_attention_interval", cfg.get("full_attention_interval", 4))
        out["num_linear_layers"] = layers - layers // interval
    if out.get("num_linear_layers"):
        out.update(linear_num_key_heads=_first(cfg, "linear_num_key_heads"), linear_num_value_heads=_first(cfg, "linear_num_value_heads"),
                   linear_key_head_dim=_first(cfg, "linear_key_head_dim"), linear_value_head_dim=_first(cfg, "linear_value_head_dim"),
                   conv_kernel=_first(cfg, "linear_conv_kernel_dim", default=4))
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        if len(pattern) != layers or set(pattern) - set("M*-E"):
            r.unmodelled(f"hybrid_override_pattern {pattern[:16]!r}", "hybrid_override_pattern")
        out.update(num_mamba_layers=pattern.count("M"), num_mixer_free_layers=pattern.count("-") + pattern.count("E"),
                   num_mlp_free_layers=pattern.count("M") + pattern.count("*"))
    if out.get("num_mamba_layers"):
        heads = _first(cfg, "mamba_num_heads", "mamba_n_heads")
        out.update(mamba_num_heads=heads, mamba_head_dim=_first(cfg, "mamba_head_dim", "mamba_d_head"),
                   ssm_state_size=_first(cfg, "ssm_state_size", "mamba_d_state", "state_size"),
                   mamba_groups=_first(cfg, "n_groups", "mamba_n_groups", default=1), conv_kernel=_first(cfg, "conv_kernel", "mamba_d_conv", default=4))
        for key in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size"):
            if not out.get(key):
                raise InvalidInputError(f"config.json declares Mamba layers but no {key}", field=key)
    return out


def _phi3_small_blocksparse(cfg: dict[str, Any], layers: int, r: _Reader) -> dict[str, Any]:
    """Phi-3-small: every ``dense_attention_every_n_layers``-th layer is dense (``(i + 1) % n == 0``),
    the others blocksparse: each query sees its last ``blocksparse_num_local_blocks`` blocks of
    ``blocksparse_block_size`` tokens plus every ``blocksparse_vert_stride``-th older block. Read
    as banded attention over the local blocks; the strided older blocks are left out (noted)."""
    every = _int(cfg, "dense_attention_every_n_layers", cfg.get("dense_attention_every_n_layers") or 0)
    sparse = layers - (layers // every if every else 0)
    if not sparse:
        return {}
    block = _int(cfg, "blocksparse_block_size", cfg.get("blocksparse_block_size", 64))
    local = _int(cfg, "blocksparse_num_local_blocks", cfg.get("blocksparse_num_local_blocks", 16))
    stride = _int(cfg, "blocksparse_vert_stride", cfg.get("blocksparse_vert_stride", 8))
    r.notes.append(f"approximated: {sparse} blocksparse attention layers counted as a {block * local}-token band (their {local} "
                   f"local blocks of {block} tokens); the strided blocks (every {stride}th older block) and their cache beyond "
                   "the band are not counted")
    return {"num_window_layers": sparse, "sliding_window": block * local}


def _moe(cfg: dict[str, Any], model_type: str, layers: int, experts: int, r: _Reader) -> dict[str, Any]:
    """Which MLPs of an MoE model are dense, and their width; refuses layouts llmco2 does not model."""
    out: dict[str, Any] = {}
    dense = _first(cfg, "first_k_dense_replace", default=0)
    step = _first(cfg, "interleave_moe_layer_step", "moe_layer_freq", "decoder_sparse_step", default=1)
    if step > 1:
        dense += (layers - dense) - (layers - dense) // step
    only = cfg.get("mlp_only_layers")
    if isinstance(only, list) and only:
        dense += len(only)
    if dense:
        out["num_dense_layers"] = min(dense, layers)
        out["dense_intermediate_size"] = _first(cfg, "intermediate_size_mlp", "intermediate_size")
    moe_width = _first(cfg, "moe_intermediate_size", "intermediate_size", "ffn_hidden_size")
    shared_width = _first(cfg, "shared_expert_intermediate_size")
    if shared_width and moe_width and shared_width % moe_width:
        r.unmodelled(f"shared_expert_intermediate_size {shared_width} (not a multiple of the expert width {moe_width})",
                     "shared_expert_intermediate_size")
    shared = _first(cfg, "n_shared_experts", "num_shared_experts", default=0)
    if shared_width and not shared and moe_width:
        shared = max(1, shared_width // moe_width)
    if model_type in {"llama4", "llama4_text"}:
        shared = 1  # Llama 4 MoE layers add one shared expert of the expert width (transformers Llama4TextMoe)
    out["num_shared_experts"] = shared
    return out


def arch_from_hf_config(cfg: dict[str, Any], model_id: str | None = None, approximate: bool = False) -> ModelArch:
    """Map a Hugging Face ``config.json`` (as a dict) onto `ModelArch`.

    Handles the common key spellings (``n_embd``/``d_model``, ``n_layer``, ``n_head``,
    ``num_key_value_heads``/``num_kv_heads``/``multi_query``), MoE keys (``num_local_experts``,
    ``num_experts``, ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
    ``first_k_dense_replace``, ``interleave_moe_layer_step``), multi-head latent attention
    (``kv_lora_rank`` ...), banded attention (``sliding_window`` with ``layer_types``,
    ``sliding_window_pattern`` or Llama 4's ``attention_chunk_size``), Mamba-2 hybrids
    (``hybrid_override_pattern``), gated DeltaNet (``linear_*``) and nested ``text_config``.
    Missing or malformed required keys, unmodelled architectures and fields raise `InvalidInputError`.
    """
    outer = cfg
    if "architectures" in cfg and not (isinstance(cfg["architectures"], list)
                                       and all(isinstance(a, str) and a.strip() for a in cfg["architectures"])):
        raise InvalidInputError(f"architectures must be a list of class names, got {cfg['architectures']!r}", field="architectures")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"]}
        for key in ("_name_or_path", "architectures"):
            cfg.setdefault(key, outer.get(key))
    r = _Reader(cfg, approximate)
    model_type = str(cfg.get("model_type") or outer.get("model_type") or "")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    vocab = _first(cfg, "vocab_size", "padded_vocab_size")
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads), ("vocab_size", vocab)):
        if not value:
            raise InvalidInputError(f"config.json has no positive {key} (or an equivalent key)", field=key)
    if model_type and model_type not in MODELLED_TYPES:  # no model_type: a plain decoder described by its fields
        r.unmodelled(f"model_type {model_type!r}", "model_type")
    if cfg.get("is_encoder_decoder"):
        r.unmodelled("an encoder-decoder model", "is_encoder_decoder")
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        kv_heads = 1
    else:
        kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    head_dim = _first(cfg, "head_dim")
    if head_dim is None:
        if hidden % heads:
            raise InvalidInputError(f"num_heads {heads} does not divide hidden_size {hidden} and no head_dim is given",
                                    field="num_heads")
        head_dim = hidden // heads
    num_experts = _first(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1)
    if num_experts is not None and num_experts < 1:
        raise InvalidInputError(f"an expert count must be at least 1, got {num_experts}", field="num_local_experts")
    num_experts = num_experts or 1
    if num_experts > 1:
        inter = _first(cfg, "moe_intermediate_size", "intermediate_size", "ffn_hidden_size")
    else:
        inter = _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", "ff_intermediate_size")
    if inter is None:
        inter = 4 * hidden
    act_raw = str(_first(cfg, "hidden_activation", "hidden_act", "activation_function", "activation", default="silu")).lower()
    activation = _ACT_ALIASES.get(act_raw)
    if activation is None:
        activation = act_raw if act_raw in ACTIVATIONS else "gelu"
        if act_raw not in ACTIVATIONS:
            r.notes.append(f"approximated: activation {act_raw!r} counted as gelu")
    if model_type == "nemotron_h":  # Nemotron-H MLP blocks: up and down with squared ReLU, no gate
        act_raw = str(cfg.get("mlp_hidden_act", "relu2")).lower()
        if act_raw in ("relu2", "relu"):
            activation = "relu"
    norm = "layernorm" if model_type in _LAYERNORM_TYPES or "layer_norm_epsilon" in cfg and "rms_norm_eps" not in cfg else "rmsnorm"
    gated = model_type not in _UNGATED_TYPES and model_type != "nemotron_h"
    if model_type == "bloom" or cfg.get("alibi"):
        pos = "alibi"
    elif model_type in _LEARNED_POS_TYPES:
        pos = "learned"
    else:
        pos = "rope"
    max_ctx = _context(cfg, pos, r)
    extra: dict[str, Any] = _layer_mix(cfg, model_type, layers, r)
    if num_experts > 1:
        extra.update(_moe(cfg, model_type, layers, num_experts, r))
    if cfg.get("kv_lora_rank"):
        extra.update(kv_lora_rank=_first(cfg, "kv_lora_rank"), q_lora_rank=_first(cfg, "q_lora_rank", default=0) or 0,
                     qk_nope_head_dim=_first(cfg, "qk_nope_head_dim"), qk_rope_head_dim=_first(cfg, "qk_rope_head_dim"),
                     v_head_dim=_first(cfg, "v_head_dim"))
    if model_type == "qwen3_next":
        extra["attn_output_gate"] = bool(cfg.get("attn_output_gate", True))
    name = model_id or str(cfg.get("_name_or_path") or (cfg.get("architectures") or [None])[0] or model_type or "hf-model")
    return ModelArch(
        id=name.lower(), name=name, hf_id=str(cfg.get("_name_or_path") or ""), family=model_type,
        hidden_size=hidden, intermediate_size=int(inter), num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=int(head_dim), vocab_size=vocab, activation=activation, norm_type=norm, mlp_gated=gated,
        num_experts=num_experts,
        experts_per_token=_first(cfg, "num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_topk", default=1)
        if num_experts > 1 else 1,
        position_encoding=pos,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", model_type in {"bloom", "gemma", "gemma2", "gemma3_text", "phi3small"})),
        max_context=max_ctx,
        # Phi-3-small: query_key_value, dense, up_proj and down_proj are nn.Linear with bias (its code reads no bias key)
        attention_bias=model_type == "phi3small"
        or bool(cfg.get("attention_bias", cfg.get("bias", cfg.get("qkv_bias", model_type in {"qwen2", "bloom"})))),
        mlp_bias=model_type == "phi3small" or bool(cfg.get("mlp_bias", cfg.get("bias", model_type in {"bloom", "starcoder2", "gptj", "opt"}))),
        parallel_attention=bool(cfg.get("parallel_attn", model_type in _PARALLEL_TYPES)),
        approximations=tuple(r.notes), **extra,
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all distinct (a key given twice is refused, not read as the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidInputError(f"config.json gives the key {key!r} twice; keep one", field=key)
        out[key] = value
    return out


def load_hf_config(path: str | Path, approximate: bool = False) -> ModelArch:
    """Load a HF ``config.json`` file (or a folder holding one) as a `ModelArch`."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").exists():
            raise InvalidInputError(f"{str(p)!r} is a directory without a config.json; give a model id or a path to a "
                                    "config.json", field="model")
        p = p / "config.json"
    if not p.exists():
        raise InvalidInputError(f"no such file {str(p)!r}; give a model id or a path to a config.json", field="model")
    check_input_file(p, "model")  # a folder named config.json, a FIFO, /dev/zero: said as such
    try:
        cfg = parse_json(p.read_text(), object_pairs_hook=_unique_keys)
    except JSONTooDeepError as exc:
        raise InvalidInputError(f"{p} is not a model config: its JSON is {exc} (a config.json is a flat object)",
                                field="model") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{p} is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})", field="model") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {p}: {exc.strerror or exc}", field="model") from None
    if not isinstance(cfg, dict):
        raise InvalidInputError(f"{p} does not hold a JSON object", field="model")
    return arch_from_hf_config(cfg, approximate=approximate)


def get_model(name: str | ModelArch, approximate: bool = False) -> ModelArch:
    """A model by catalog id/alias, or from a HF ``config.json`` path (``approximate``: map what
    llmco2 does not model onto the nearest modelled architecture); close matches on failure."""
    if isinstance(name, ModelArch):
        return name
    text = str(name)
    path = Path(text)
    try:
        folder = path.is_dir() and (path / "config.json").is_file()
    except OSError:  # a name too long for a path: no folder, perhaps an id
        folder = False
    if text.endswith(".json") or folder:
        return load_hf_config(path, approximate=approximate)
    try:
        return model_catalog().get(text, field="model")
    except UnknownIdError:
        if text and os.path.lexists(text):  # a path that is no id: a folder without config.json, a FIFO, a config file
            return load_hf_config(path, approximate=approximate)
        raise
