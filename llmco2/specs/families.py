"""Architecture families: what a model is built of, independent of its size.

Two models belong to the same family when they share the kind of attention (multi-head, grouped,
multi-query, latent MLA, with or without banded layers, hybrids with Mamba or linear-attention
mixers), the kind of MLP (gated, plain, mixture of experts), the positional scheme (RoPE, ALiBi,
learned, none) and whether attention and MLP run in parallel. A predictor whose training rows
lack a request's family extrapolates through the analytic features alone, and says so.
"""

from __future__ import annotations

import functools

from llmco2.specs.models import ModelArch, model_catalog


def attention_kind(arch: ModelArch) -> str:
    """``mla``, ``mqa``, ``mha`` or ``gqa``, with ``+window`` (banded layers), ``+mamba`` or
    ``+linear`` (hybrid mixers)."""
    if arch.kv_lora_rank > 0:
        kind = "mla"
    elif arch.num_kv_heads == 1 and arch.num_heads > 1:
        kind = "mqa"
    elif arch.num_kv_heads == arch.num_heads:
        kind = "mha"
    else:
        kind = "gqa"
    if arch.num_window_layers > 0 and arch.sliding_window > 0:
        kind += "+window"
    if arch.num_mamba_layers > 0:
        kind += "+mamba"
    if arch.num_linear_layers > 0:
        kind += "+linear"
    return kind


def mlp_kind(arch: ModelArch) -> str:
    """``moe``, ``gated`` or ``plain``."""
    if arch.num_experts > 1:
        return "moe"
    return "gated" if arch.mlp_gated else "plain"


def architecture_family(arch: ModelArch) -> str:
    """``attention/mlp/position[/parallel]``, e.g. ``gqa/gated/rope`` (Llama 3) or
    ``mha/plain/alibi`` (BLOOM)."""
    parts = [attention_kind(arch), mlp_kind(arch), arch.position_encoding or "none"]
    if arch.parallel_attention:
        parts.append("parallel")
    return "/".join(parts)


@functools.cache
def catalog_families(model_ids: tuple[str, ...]) -> frozenset[str]:
    """The families of catalog models (ids the catalog does not know are skipped)."""
    cat = model_catalog()
    return frozenset(architecture_family(cat.get(mid)) for mid in model_ids if mid in cat)
