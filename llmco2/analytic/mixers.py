"""Costs of the layers beyond the paper's dense/GQA transformer, vectorised over requests:
multi-head latent attention (MLA), banded and chunked attention, Mamba-2 (SSD) and gated-DeltaNet
mixers, and models whose layers differ (dense and MoE MLPs, MLP-free and mixer-free blocks).

The layer DAG keeps its kernel slots (:mod:`llmco2.analytic.layer`); a model whose layers differ
is analysed as its **mean layer**: every slot holds the cost of that slot averaged over the
model's layers, so ``num_layers x mean layer`` is the exact sum over layers. The slots of the
token mixer hold, weighted by the share of layers of each kind:

* ``q_proj``: the attention query projection (MLA: the low-rank ``q_a``/``q_b`` pair), the Mamba-2
  ``in_proj`` or the gated-DeltaNet ``in_proj`` (q, k, v, z, b, a);
* ``k_proj``: the key projection (MLA: the joint latent ``kv_a_proj_with_mqa``, written to the cache);
* ``v_proj``: the value projection (MLA: ``kv_b_proj``, which decompresses K/V in prefill and is
  absorbed into the query and output in decode, as vLLM and SGLang run it: the same FLOPs and weights);
* ``fuse_attn`` (``matmul_sv`` without FlashAttention): the attention itself, or the conv1d and
  state-space scan / delta-rule recurrence with its gated norm;
* ``out_proj``: the output projection of every mixer.

All quantities are per GPU for the whole phase, as in :mod:`llmco2.analytic.kernels`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic import kernels as K

Array = NDArray[np.float64]
#: Tokens per chunk of the SSD (Mamba-2) prefill algorithm (mamba_ssm default chunk_size 256).
SSD_CHUNK = 256
#: Tokens per chunk of the chunked gated-DeltaNet prefill (flash-linear-attention default 64).
DELTANET_CHUNK = 64
#: Operations per state element and token of a recurrent step: decay, input outer product,
#: accumulate (3) and the output contraction (2).
STATE_OPS_PER_ELEM = 5.0


def _prefix_band(n: Array, window: Array, chunked: NDArray[np.bool_]) -> Array:
    """``sum_{p=1}^{n} keys(p)``: keys position ``p`` attends to in a causal band of ``window``
    (sliding: ``min(p, W)``) or in its chunk (chunked: ``((p - 1) mod W) + 1``)."""
    w = np.maximum(window, 1.0)
    slide = np.where(n <= w, n * (n + 1.0) / 2.0, w * (w + 1.0) / 2.0 + (n - w) * w)
    q = np.floor(n / w)
    r = n - q * w
    chunk = q * w * (w + 1.0) / 2.0 + r * (r + 1.0) / 2.0
    return np.where(chunked, chunk, slide)


def windowed_pairs(prompt: Array, generated: Array, phase: str, causal: NDArray[np.bool_], window: Array,
                   chunked: NDArray[np.bool_]) -> Array:
    """(query, key) pairs per sequence and head over the phase in a banded layer.

    Prefill: the causal band ``sum_p keys(p)``; without the causal flag (the paper's full-square
    convention) every query sees ``min(L, W)`` keys (sliding) or its whole chunk (chunked).
    Decode: step ``j`` attends ``keys(L + j)``, summed over ``j = 1 .. G-1``.
    """
    L, G = np.asarray(prompt, dtype=np.float64), np.asarray(generated, dtype=np.float64)
    w = np.maximum(window, 1.0)
    if phase == "prefill":
        q = np.floor(L / w)
        r = L - q * w
        square = np.where(chunked, q * w * w + r * r, L * np.minimum(L, w))
        return np.where(np.asarray(causal, dtype=bool), _prefix_band(L, w, chunked), square)
    return _prefix_band(L + G - 1.0, w, chunked) - _prefix_band(L, w, chunked)


def mla_projections(tokens: Array, passes: Array, b: Any) -> dict[str, K.KernelCost]:
    """``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` of an MLA layer on one GPU."""
    w, a, kv, tp = b.w_bytes, b.a_bytes, b.kv_bytes, b.tp
    qk = b.qk_nope + b.qk_rope
    low = K.linear_cost(tokens, b.hidden, b.q_lora, tp, passes, w, a, split="replicated")
    q_low = low + K.linear_cost(tokens, b.q_lora, b.heads * qk, tp, passes, w, a, split="column")
    q_direct = K.linear_cost(tokens, b.hidden, b.heads * qk, tp, passes, w, a, split="column")
    q = K.KernelCost(**{f: np.where(b.q_lora > 0, getattr(q_low, f), getattr(q_direct, f)) for f in q_low.__dataclass_fields__})
    return {
        "q_proj": q,
        "k_proj": K.linear_cost(tokens, b.hidden, b.kv_lora + b.qk_rope, tp, passes, w, a, kv, split="replicated", stores_kv=True),
        "v_proj": K.linear_cost(tokens, b.kv_lora, b.heads * (b.qk_nope + b.v_head), tp, passes, w, a, split="column"),
        "out_proj": K.linear_cost(tokens, b.heads * b.v_head, b.hidden, tp, passes, w, a, split="row"),
    }


def mla_attention(b: Any, tokens: Array, pairs: Array, kv_positions: Array, phase: str) -> K.KernelCost:
    """MLA attention on one GPU (heads split over ``tp``).

    Prefill runs multi-head attention over decompressed keys (``nope + rope`` wide) and values
    (``v`` wide). Decode runs the absorbed form: every head's query lives in the latent space
    (``kv_lora + rope``) and all heads read the one shared latent cache entry per position.
    """
    h_local = b.heads / b.tp
    scores = b.batch * h_local * pairs
    a, kv = b.a_bytes, b.kv_bytes
    if phase == "prefill":
        qk, v = b.qk_nope + b.qk_rope, b.v_head
        ops = (2.0 * qk + 2.0 * v + K.SOFTMAX_OPS_PER_SCORE) * scores
        return K.make_cost(ops, 0.0, tokens * h_local * qk * a, tokens * h_local * v * a,
                           b.batch * h_local * (qk + v) * kv_positions * a)
    latent = b.kv_lora + b.qk_rope
    ops = (2.0 * latent + 2.0 * b.kv_lora + K.SOFTMAX_OPS_PER_SCORE) * scores
    return K.make_cost(ops, 0.0, tokens * h_local * latent * a, tokens * h_local * b.kv_lora * a, b.batch * latent * pairs * kv)


def mamba_state_elems(b: Any) -> Array:
    """Cached elements per sequence and Mamba-2 layer, over all ranks: SSM state (heads x head
    dim x state) plus the conv1d window (conv channels x (taps - 1))."""
    conv = b.m_heads * b.m_head_dim + 2.0 * b.m_groups * b.m_state
    return b.m_heads * b.m_head_dim * b.m_state + conv * np.maximum(b.conv_k - 1.0, 0.0)


def deltanet_state_elems(b: Any) -> Array:
    """Cached elements per sequence and gated-DeltaNet layer, over all ranks: the key x value
    state of every value head plus the conv1d window."""
    conv = 2.0 * b.l_kheads * b.l_kdim + b.l_vheads * b.l_vdim
    return b.l_vheads * b.l_kdim * b.l_vdim + conv * np.maximum(b.conv_k - 1.0, 0.0)


def _recurrent_scan(b: Any, tokens: Array, passes: Array, phase: str, inner: Array, conv: Array, state: Array,
                    chunk_term: Array, out_width: Array) -> K.KernelCost:
    """conv1d + recurrent scan + gated norm on one GPU (channels and heads split over ``tp``)."""
    tp, a, kv = b.tp, b.a_bytes, b.kv_bytes
    per_token = 2.0 * conv * b.conv_k + STATE_OPS_PER_ELEM * inner + K.RMSNORM_OPS_PER_ELEM * out_width
    if phase == "prefill":
        per_token = per_token + chunk_term
        state_io = b.batch * state * kv / tp  # the final state is written once per sequence
        return K.make_cost(tokens * per_token / tp, 0.0, tokens * conv * a / tp, tokens * out_width * a / tp, 0.0, state_io)
    step_io = b.batch * state * kv / tp * passes  # every decode step reads and writes the state
    return K.make_cost(tokens * per_token / tp, 0.0, tokens * conv * a / tp, tokens * out_width * a / tp, step_io, step_io)


def mamba_costs(tokens: Array, passes: Array, b: Any, phase: str) -> dict[str, K.KernelCost]:
    """``q_proj`` (in_proj), ``fuse_attn`` (conv1d + SSD scan + gated norm), ``out_proj`` of a Mamba-2 layer."""
    w, a, tp = b.w_bytes, b.a_bytes, b.tp
    d = b.m_heads * b.m_head_dim
    conv = d + 2.0 * b.m_groups * b.m_state
    intra = SSD_CHUNK * b.m_heads * (b.m_state + b.m_head_dim)  # the quadratic part inside each chunk, per token
    return {
        "q_proj": K.linear_cost(tokens, b.hidden, d + conv + b.m_heads, tp, passes, w, a, split="column"),
        "fuse_attn": _recurrent_scan(b, tokens, passes, phase, d * b.m_state, conv, mamba_state_elems(b), intra, d),
        "out_proj": K.linear_cost(tokens, d, b.hidden, tp, passes, w, a, split="row"),
    }


def deltanet_costs(tokens: Array, passes: Array, b: Any, phase: str) -> dict[str, K.KernelCost]:
    """``q_proj`` (in_proj), ``fuse_attn`` (conv1d + delta rule + gated norm), ``out_proj`` of a gated-DeltaNet layer."""
    w, a, tp = b.w_bytes, b.a_bytes, b.tp
    kd, vd = b.l_kheads * b.l_kdim, b.l_vheads * b.l_vdim
    conv = 2.0 * kd + vd
    intra = DELTANET_CHUNK * b.l_vheads * (b.l_kdim + b.l_vdim)
    return {
        "q_proj": K.linear_cost(tokens, b.hidden, 2.0 * kd + 2.0 * vd + 2.0 * b.l_vheads, tp, passes, w, a, split="column"),
        "fuse_attn": _recurrent_scan(b, tokens, passes, phase, b.l_vheads * b.l_kdim * b.l_vdim, conv, deltanet_state_elems(b),
                                     intra, vd),
        "out_proj": K.linear_cost(tokens, vd, b.hidden, tp, passes, w, a, split="row"),
    }


def blend(parts: list[tuple[Array, K.KernelCost]]) -> K.KernelCost:
    """``sum(share x cost)`` over ``(share, cost)`` pairs (shares broadcast over requests)."""
    out = K.ZERO
    for share, cost in parts:
        out = out + cost.scaled(share)
    return out


def pick(mask: NDArray[np.bool_], special: K.KernelCost, plain: K.KernelCost) -> K.KernelCost:
    """``special`` where ``mask``, else ``plain`` (field by field)."""
    return K.KernelCost(**{f: np.where(mask, getattr(special, f), getattr(plain, f)) for f in plain.__dataclass_fields__})


def arch_mix_fields(arch: Any) -> dict[str, Any]:
    """The LayerBatch fields of an architecture's layer mix and special blocks (all zero / one
    for a plain transformer, whose ``special`` flag is then false)."""
    L = float(arch.num_layers)
    f = {
        "f_attn": arch.num_attention_layers / L, "f_win": arch.num_window_layers / L, "window": arch.sliding_window,
        "chunked": arch.window_kind == "chunked", "mla": arch.is_mla, "q_lora": arch.q_lora_rank, "kv_lora": arch.kv_lora_rank,
        "qk_nope": arch.qk_nope_head_dim, "qk_rope": arch.qk_rope_head_dim, "v_head": arch.v_head_dim,
        "attn_gate": arch.attn_output_gate, "f_mamba": arch.num_mamba_layers / L, "m_heads": arch.mamba_num_heads,
        "m_head_dim": arch.mamba_head_dim, "m_state": arch.ssm_state_size, "m_groups": arch.mamba_groups, "conv_k": arch.conv_kernel,
        "f_linear": arch.num_linear_layers / L, "l_kheads": arch.linear_num_key_heads, "l_vheads": arch.linear_num_value_heads,
        "l_kdim": arch.linear_key_head_dim, "l_vdim": arch.linear_value_head_dim, "f_mlp": arch.num_mlp_layers / L,
        "f_moe": arch.num_moe_layers / L, "dense_inter": arch.dense_mlp_width,
    }
    f["special"] = bool(arch.is_mla or arch.attn_output_gate or arch.num_window_layers or arch.num_mamba_layers
                        or arch.num_linear_layers or arch.num_mixer_free_layers or arch.num_mlp_free_layers or arch.num_dense_layers)
    return f


#: Boolean LayerBatch fields among :func:`arch_mix_fields`.
MIX_BOOLS = frozenset({"chunked", "mla", "attn_gate", "special"})


def mixed_layer_costs(b: Any, phase: str, plain: dict[str, K.KernelCost], tokens: Array, passes: Array, per_pass: Array,
                      pairs: Array, flash_kv: Array) -> dict[str, K.KernelCost]:
    """The mean-layer costs of every request whose architecture is ``special``; ``plain`` (the
    dense/GQA layer of :func:`llmco2.analytic.layer.layer_costs`) elsewhere.

    Where only some rows are special, the special layer is computed on those rows alone and
    written over ``plain`` there: every quantity is element-wise over the rows, so the numbers are
    those of computing it on every row and picking."""
    special = np.asarray(b.special, dtype=bool)
    if not special.any():
        return plain
    if special.all():
        mixed = _special_layer_costs(b, phase, plain, tokens, passes, per_pass, pairs, flash_kv)
        return {name: pick(special, mixed[name], cost) for name, cost in plain.items()}
    n, rows = len(special), np.flatnonzero(special)
    sub = dataclasses.replace(b, **{f.name: _rows(getattr(b, f.name), rows, n) for f in dataclasses.fields(b) if f.init})
    mixed = _special_layer_costs(sub, phase, {name: _cost_rows(c, rows, n) for name, c in plain.items()},
                                 *(_rows(v, rows, n) for v in (tokens, passes, per_pass, pairs, flash_kv)))
    return {name: _written_over(cost, mixed[name], rows, n) for name, cost in plain.items()}


def _rows(v: Any, rows: NDArray[np.int64], n: int) -> Any:
    """``v`` at ``rows`` where it is an array of ``n`` rows; anything else (a scalar) as it is."""
    return v[rows] if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == n else v


def _cost_rows(c: K.KernelCost, rows: NDArray[np.int64], n: int) -> K.KernelCost:
    """The kernel cost ``c`` (counts and bytes) at ``rows`` (of ``n``)."""
    return K.KernelCost(**{f: _rows(getattr(c, f), rows, n) for f in c.__dataclass_fields__})


def _written_over(plain: K.KernelCost, special: K.KernelCost, rows: NDArray[np.int64], n: int) -> K.KernelCost:
    """``plain`` (counts and bytes of ``n`` rows) with ``special`` (those of ``rows``) at ``rows``:
    what :func:`pick` gives with the mask of ``rows``."""
    out = {}
    for f in plain.__dataclass_fields__:
        p, q = np.asarray(getattr(plain, f)), np.asarray(getattr(special, f))
        merged = np.array(np.broadcast_to(p, (n,)), dtype=np.result_type(p, q))
        merged[rows] = q
        out[f] = merged
    return K.KernelCost(**out)


def _special_layer_costs(b: Any, phase: str, plain: dict[str, K.KernelCost], tokens: Array, passes: Array,
                         per_pass: Array, pairs: Array, flash_kv: Array) -> dict[str, K.KernelCost]:
    """The mean-layer costs of the rows of ``b`` as special architectures (see :func:`mixed_layer_costs`)."""
    w, a, kvb, tp = b.w_bytes, b.a_bytes, b.kv_bytes, b.tp
    f_win = b.f_win
    f_full = b.f_attn - f_win
    f_mix = b.f_attn + b.f_mamba + b.f_linear
    f_dense = b.f_mlp - b.f_moe
    win_pairs = windowed_pairs(b.prompt, b.generated, phase, b.causal, b.window, b.chunked)
    ratio = np.where(pairs > 0, win_pairs / np.where(pairs > 0, pairs, 1.0), 0.0)
    win_kv = flash_kv * ratio if phase == "prefill" else win_pairs
    kv_eff = np.maximum(b.kv_heads, tp)
    mla = np.asarray(b.mla, dtype=bool)
    proj = mla_projections(tokens, passes, b)
    gated_q = K.linear_cost(tokens, b.hidden, 2.0 * b.heads * b.head_dim, tp, passes, w, a, split="column")
    q_attn = pick(mla, proj["q_proj"], pick(np.asarray(b.attn_gate, dtype=bool), gated_q, plain["q_proj"]))
    att_full = pick(mla, mla_attention(b, tokens, pairs, flash_kv, phase), plain["fuse_attn"])
    att_win = pick(mla, mla_attention(b, tokens, win_pairs, win_kv, phase),
                   K.fused_attention_cost(b.batch, tokens, win_pairs, win_kv, b.heads, kv_eff, b.head_dim, tp, a, kvb))
    mam, dnet = mamba_costs(tokens, passes, b, phase), deltanet_costs(tokens, passes, b, phase)
    scan = blend([(b.f_mamba, mam["fuse_attn"]), (b.f_linear, dnet["fuse_attn"])])
    dense = {name: K.expert_linear_cost(tokens, d_in, d_out, tp, passes, per_pass, 1.0, 1.0, 0.0, w, a, split=split)
             for name, d_in, d_out, split in (("gate_proj", b.hidden, b.dense_inter, "column"),
                                              ("up_proj", b.hidden, b.dense_inter, "column"),
                                              ("down_proj", b.dense_inter, b.hidden, "row"))}
    dense["act_mlp"] = K.mlp_activation_cost(tokens, b.dense_inter, tp, 1.0, a, b.gated)
    unfused = f_full + f_win * ratio  # the unfused score kernels of banded layers see the band only
    mixed = {
        "q_proj": blend([(b.f_attn, q_attn), (b.f_mamba, mam["q_proj"]), (b.f_linear, dnet["q_proj"])]),
        "k_proj": pick(mla, proj["k_proj"], plain["k_proj"]).scaled(b.f_attn),
        "v_proj": pick(mla, proj["v_proj"], plain["v_proj"]).scaled(b.f_attn),
        "fuse_attn": blend([(f_full, att_full), (f_win, att_win)]) + scan,
        "matmul_qk": plain["matmul_qk"].scaled(unfused),
        "softmax": plain["softmax"].scaled(unfused),
        "matmul_sv": plain["matmul_sv"].scaled(unfused) + scan,
        "out_proj": blend([(b.f_attn, pick(mla, proj["out_proj"], plain["out_proj"])), (b.f_mamba, mam["out_proj"]),
                           (b.f_linear, dnet["out_proj"])]),
        "router": plain["router"].scaled(b.f_moe),
    }
    for name in ("norm_attn", "add_attn", "all_reduce_attn"):
        mixed[name] = plain[name].scaled(f_mix)
    for name in ("norm_mlp", "add_mlp", "all_reduce_mlp"):
        mixed[name] = plain[name].scaled(b.f_mlp)
    moe = np.asarray(b.experts > 1)
    for name in ("gate_proj", "up_proj", "down_proj", "act_mlp"):
        mixed[name] = pick(moe, blend([(b.f_moe, plain[name]), (f_dense, dense[name])]), dense[name].scaled(b.f_mlp))
    return mixed
