"""Per-kernel operation counts, memory bytes and network bytes of one transformer layer.

Follows the LLMCO2 paper's Appendix A (Eqs 2-58, Tables 6 and 7), vectorised over many
requests with NumPy (every argument may be a scalar or an array; results broadcast).
All quantities are **for the whole phase of the request on one GPU**:

* prefill: one forward pass over ``B * L`` prompt tokens (``L`` = prompt tokens);
* decode: ``G - 1`` steps of ``B`` tokens each (``G`` = generated tokens; the first generated
  token comes out of the prefill, as the paper's ``(N_gT - 1)`` factor says). Decode step
  ``j = 1 .. G-1`` attends over ``L + j`` positions, so the attended positions summed over the
  phase are ``(G - 1)(2L + G) / 2`` per sequence and head.

Units: ``ops`` are operations (a multiply-add counts 2), bytes are bytes. Memory traffic is kept
apart as weight loads, activation loads/stores and KV-cache loads/stores.

Tensor parallelism is Megatron-style (``tp`` GPUs): Q/K/V, gate and up projections are
column-parallel (weights and outputs split, input replicated), the output and down projections
are row-parallel (weights and inputs split, a full-width partial output), attention is split by
heads, norms and residual adds are replicated, and two all-reduce kernels per layer combine the
row-parallel outputs. Expert parallelism (:mod:`llmco2.analytic.experts`) holds routed experts whole
instead (:func:`expert_parallel_linear_cost`) and moves tokens to them (:func:`all_to_all_cost`).
See :data:`PAPER_DEVIATIONS` for every place this differs from the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike, NDArray

Array = NDArray[np.float64]

#: Operations per element of LayerNorm (paper Eqs 43/51: 7 per element).
LAYERNORM_OPS_PER_ELEM = 7.0
#: Operations per element of RMSNorm (seed 001: square, sum, scale by rrms, scale by gamma)...
RMSNORM_OPS_PER_ELEM = 4.0
#: ... plus 2 per row (mean and reciprocal square root).
RMSNORM_OPS_PER_ROW = 2.0
#: Operations per attention score for softmax (paper Eqs 22/33: 5 per element).
SOFTMAX_OPS_PER_SCORE = 5.0
#: Operations per element of the MLP activation (paper Eqs 45/53: 2 per element).
ACT_OPS_PER_ELEM = 2.0
#: Query rows per FlashAttention tile: K/V are streamed once per tile of queries (FlashAttention-2).
FLASH_QUERY_TILE = 128

#: Where and why this module departs from the paper's Appendix A (shown in the README).
PAPER_DEVIATIONS: tuple[tuple[str, str, str], ...] = (
    ("Eq 32, 33, 34, 35", "prefill QK^T, SV and softmax are linear in L_seq",
     "quadratic: B*n_h*L^2 score elements (Eq 38 multiplies by L_seq again for this reason; "
     "with the fix Eq 38 needs no extra factor)"),
    ("Eq 21-24, 30", "decode attention sums over N_gT steps",
     "over N_gT - 1 steps like the linear kernels (Eq 9-14): attended positions (G-1)(2L+G)/2"),
    ("Eq 31, 42", "M_fuse adds the KV load twice and omits the activation store",
     "M_fuse = A_load + A_store + KV_load"),
    ("Eq 12-13, 18-19 (text)", "only K_proj/V_proj store activations, the others store to the KV cache",
     "inverted: K_proj/V_proj store to the KV cache, every other linear kernel stores activations"),
    ("Table 7", "matmul memory: prefill Eq 25, decode Eq 36", "swapped: prefill Eq 36, decode Eq 25"),
    ("Eq 45, 47-48, 53, 55-56", "MLP activation sized by the hidden size",
     "sized by the intermediate size (per GPU, times active experts); gated MLPs load gate and up, "
     "plain MLPs load one input"),
    ("Eq 30, 41", "FlashAttention KV load scaled by s_block (KV heads held on chip)",
     "K and V read once per decode step, and once per 128-query tile in prefill (FlashAttention-2 tiling)"),
    ("Eq 29, 40", "FlashAttention stores 2*d_h*B*n_h per token", "stores the output O once (d_h*B*n_h per token)"),
    ("Eq 43, 51", "7 ops per element for every norm", "7 for LayerNorm, 4 per element + 2 per row for RMSNorm (seed 001)"),
    ("Eq 49, 57", "a residual add loads one tensor", "loads two (residual and branch) and stores one"),
    ("all equations, N_GPU", "every term divided by N_GPU",
     "Megatron TP: norms and residual adds replicated; column-parallel layers read the full input; "
     "row-parallel layers write a full-width partial sum; attention split by (KV) heads"),
)


@dataclass(frozen=True)
class KernelCost:
    """Work of one kernel in one phase on one GPU (arrays broadcast over requests).

    Attributes:
        ops: operations (multiply-add = 2).
        weight_bytes: weights loaded from GPU memory.
        act_load_bytes / act_store_bytes: activations read / written.
        kv_load_bytes / kv_store_bytes: KV-cache entries read / written.
        net_bytes: bytes sent over the GPU interconnect.
    """

    ops: Array
    weight_bytes: Array
    act_load_bytes: Array
    act_store_bytes: Array
    kv_load_bytes: Array
    kv_store_bytes: Array
    net_bytes: Array

    @property
    def mem_bytes(self) -> Array:
        """All GPU-memory traffic: weights + activations + KV cache, loads and stores."""
        return self.weight_bytes + self.act_load_bytes + self.act_store_bytes + self.kv_load_bytes + self.kv_store_bytes

    def scaled(self, factor: ArrayLike) -> KernelCost:
        f = np.asarray(factor, dtype=np.float64)
        return KernelCost(**{k.name: getattr(self, k.name) * f for k in fields(self)})

    def __add__(self, other: KernelCost) -> KernelCost:
        return KernelCost(**{k.name: getattr(self, k.name) + getattr(other, k.name) for k in fields(self)})


def _f(x: ArrayLike) -> Array:
    return np.asarray(x, dtype=np.float64)


def make_cost(ops: ArrayLike = 0.0, weight_bytes: ArrayLike = 0.0, act_load_bytes: ArrayLike = 0.0,
              act_store_bytes: ArrayLike = 0.0, kv_load_bytes: ArrayLike = 0.0, kv_store_bytes: ArrayLike = 0.0,
              net_bytes: ArrayLike = 0.0) -> KernelCost:
    """A `KernelCost` whose fields are broadcast to one common shape."""
    arrays = np.broadcast_arrays(_f(ops), _f(weight_bytes), _f(act_load_bytes), _f(act_store_bytes),
                                 _f(kv_load_bytes), _f(kv_store_bytes), _f(net_bytes))
    return KernelCost(*(np.array(a, dtype=np.float64) for a in arrays))


ZERO = make_cost()


# -- phase geometry ------------------------------------------------------------------------------
def phase_tokens(batch: ArrayLike, prompt: ArrayLike, generated: ArrayLike, phase: str) -> Array:
    """Token rows a layer processes in the phase: ``B*L`` (prefill) or ``B*(G-1)`` (decode)."""
    if phase == "prefill":
        return _f(batch) * _f(prompt)
    return _f(batch) * (_f(generated) - 1.0)


def weight_passes(generated: ArrayLike, phase: str) -> Array:
    """Times the weights stream from memory: once in prefill, once per decode step (``G-1``)."""
    return np.ones_like(_f(generated)) if phase == "prefill" else _f(generated) - 1.0


def attended_positions(prompt: ArrayLike, generated: ArrayLike, phase: str, causal: ArrayLike = False) -> Array:
    """(query, key) pairs per sequence and head, summed over the phase.

    Prefill: ``L^2`` (full square, as the paper and seeds count) or ``L(L+1)/2`` when causal.
    Decode: ``sum_{j=1}^{G-1} (L + j) = (G-1)(2L+G)/2``.
    """
    L, G = _f(prompt), _f(generated)
    if phase == "prefill":
        return np.where(np.asarray(causal, dtype=bool), L * (L + 1.0) / 2.0, L * L)
    return (G - 1.0) * (2.0 * L + G) / 2.0


def flash_kv_positions(prompt: ArrayLike, generated: ArrayLike, phase: str, causal: ArrayLike = False,
                       tile: int = FLASH_QUERY_TILE) -> Array:
    """KV positions FlashAttention streams from memory per sequence and KV head over the phase.

    Prefill: all ``L`` keys once per tile of ``tile`` queries, ``L * ceil(L / tile)``; causal:
    tile ``i`` reads ``min(L, (i+1)*tile)`` keys, which sums to ``tile*n(n-1)/2 + L``.
    Decode: each step reads its whole cache once: ``(G-1)(2L+G)/2``.
    """
    L = _f(prompt)
    if phase == "prefill":
        n = np.ceil(L / tile)
        full = L * n
        tri = tile * n * (n - 1.0) / 2.0 + L
        return np.where(np.asarray(causal, dtype=bool), tri, full)
    return attended_positions(prompt, generated, "decode")


# -- linear kernels (Eqs 9-20) -------------------------------------------------------------------
def linear_cost(tokens: ArrayLike, d_in: ArrayLike, d_out: ArrayLike, tp: ArrayLike, passes: ArrayLike,
                w_bytes: ArrayLike, a_bytes: ArrayLike, kv_bytes: ArrayLike = 0.0, *, split: str = "column",
                stores_kv: bool = False) -> KernelCost:
    """A dense linear layer ``[tokens, d_in] @ [d_in, d_out]`` on one of ``tp`` GPUs (Eqs 9-20).

    ops = 2 * tokens * d_in * d_out / tp; weights d_in * d_out / tp per pass. ``split``:
    ``column`` (input replicated, output split), ``row`` (input split, full-width partial output)
    or ``replicated`` (every GPU computes the whole layer, e.g. an MoE router).
    ``stores_kv``: the output goes to the KV cache (K and V projections) instead of activations.
    """
    tokens, d_in, d_out, tp = _f(tokens), _f(d_in), _f(d_out), _f(tp)
    shard = np.ones_like(tp) if split == "replicated" else tp
    ops = 2.0 * tokens * d_in * d_out / shard
    weights = d_in * d_out * _f(w_bytes) / shard * _f(passes)
    in_width = d_in / tp if split == "row" else d_in
    out_width = d_out / tp if split == "column" else d_out
    out_elems = tokens * out_width
    if stores_kv:
        return make_cost(ops, weights, tokens * in_width * _f(a_bytes), 0.0, 0.0, out_elems * _f(kv_bytes))
    return make_cost(ops, weights, tokens * in_width * _f(a_bytes), out_elems * _f(a_bytes))


def experts_touched(num_experts: ArrayLike, experts_per_token: ArrayLike, tokens_per_pass: ArrayLike) -> Array:
    """Expected distinct experts whose weights one pass loads, under uniform top-k routing.

    ``E * (1 - (1 - k/E)^T)`` for ``T`` tokens in the pass; exactly 1 for a dense MLP (E = k = 1)
    whenever the pass has a token.
    """
    E, k, T = _f(num_experts), _f(experts_per_token), _f(tokens_per_pass)
    return np.where(T > 0, E * (1.0 - np.power(1.0 - k / E, T)), 0.0)


def expert_linear_cost(tokens: ArrayLike, d_in: ArrayLike, d_out: ArrayLike, tp: ArrayLike, passes: ArrayLike,
                       tokens_per_pass: ArrayLike, num_experts: ArrayLike, experts_per_token: ArrayLike,
                       shared_experts: ArrayLike, w_bytes: ArrayLike, a_bytes: ArrayLike, *, split: str) -> KernelCost:
    """One MLP matrix (gate, up or down) of a dense or mixture-of-experts layer on one GPU.

    Each token runs through ``k`` routed plus the shared experts: ops and activations scale with
    ``k + shared``; each pass loads the weights of the experts its tokens touch
    (:func:`experts_touched`) plus the shared ones. Dense MLPs are the case E = k = 1.
    """
    active = _f(experts_per_token) + _f(shared_experts)
    per_expert = linear_cost(_f(tokens) * active, d_in, d_out, tp, 0.0, w_bytes, a_bytes, split=split)
    loaded = experts_touched(num_experts, experts_per_token, tokens_per_pass) + _f(shared_experts)
    weights = _f(d_in) * _f(d_out) * _f(w_bytes) / _f(tp) * loaded * _f(passes)
    return make_cost(per_expert.ops, weights, per_expert.act_load_bytes, per_expert.act_store_bytes)


def expert_parallel_linear_cost(tokens: ArrayLike, d_in: ArrayLike, d_out: ArrayLike, tp: ArrayLike, ep: ArrayLike,
                                passes: ArrayLike, group_tokens_per_pass: ArrayLike, num_experts: ArrayLike,
                                experts_per_token: ArrayLike, shared_experts: ArrayLike, w_bytes: ArrayLike,
                                a_bytes: ArrayLike, *, split: str) -> KernelCost:
    """One expert matrix (gate, up or down) of a mixture-of-experts layer on one of ``ep`` expert-parallel GPUs.

    ``tokens`` are the GPU's attention group's (held by its ``tp`` GPUs); the ``ep / tp`` groups are
    alike. Each GPU holds ``E / ep`` routed experts whole and, under uniform routing, runs
    ``tokens * k / tp`` (token, expert) pairs on them: ops ``2 * pairs * d_in * d_out``, the pairs'
    input rows read and output rows written in full. Each pass loads the experts, among its own, that
    the ``group_tokens_per_pass`` tokens of all groups touch: ``experts_touched(E, k, T) / ep``
    whole matrices. Shared experts run as in :func:`expert_linear_cost` (split ``split`` over ``tp``,
    on the group's own tokens), as vLLM runs them beside the routed ones.
    """
    pairs = _f(tokens) * _f(experts_per_token) / _f(tp)
    routed = linear_cost(pairs, d_in, d_out, 1.0, 0.0, w_bytes, a_bytes, split="replicated")
    shared = linear_cost(_f(tokens) * _f(shared_experts), d_in, d_out, tp, 0.0, w_bytes, a_bytes, split=split)
    matrix = _f(d_in) * _f(d_out) * _f(w_bytes) * _f(passes)
    loaded = experts_touched(num_experts, experts_per_token, group_tokens_per_pass) / _f(ep)
    weights = matrix * (loaded + _f(shared_experts) / _f(tp))
    return make_cost(routed.ops + shared.ops, weights, routed.act_load_bytes + shared.act_load_bytes,
                     routed.act_store_bytes + shared.act_store_bytes)


# -- attention (Eqs 21-42) -----------------------------------------------------------------------
def fused_attention_cost(batch: ArrayLike, q_tokens: ArrayLike, pairs: ArrayLike, kv_positions: ArrayLike,
                         heads: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike, tp: ArrayLike,
                         a_bytes: ArrayLike, kv_bytes: ArrayLike) -> KernelCost:
    """FlashAttention (``fuse_attn``): QK^T, softmax and SV in one kernel (Eqs 27-31, 38-42).

    ops = (2*2*d_h + 5) * (n_h/tp) * B * pairs (two matmuls and softmax per score);
    loads Q, stores O (``q_tokens * n_h * d_h / tp`` each) and streams K and V
    (``2 * B * n_kv/tp * d_h * kv_positions``) from the KV cache.
    """
    h_local = _f(heads) / _f(tp)
    kv_local = _f(kv_heads) / _f(tp)
    scores = _f(batch) * h_local * _f(pairs)
    ops = (4.0 * _f(head_dim) + SOFTMAX_OPS_PER_SCORE) * scores
    qo = _f(q_tokens) * h_local * _f(head_dim) * _f(a_bytes)
    kv = 2.0 * _f(batch) * kv_local * _f(head_dim) * _f(kv_positions) * _f(kv_bytes)
    return make_cost(ops, 0.0, qo, qo, kv)


def matmul_qk_cost(batch: ArrayLike, q_tokens: ArrayLike, pairs: ArrayLike, k_positions: ArrayLike,
                   heads: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike, tp: ArrayLike,
                   a_bytes: ArrayLike, kv_bytes: ArrayLike) -> KernelCost:
    """Unfused ``matmul_qk`` (Eqs 21, 25, 32, 36): scores S = Q K^T.

    ops = 2 * d_h * (n_h/tp) * B * pairs; loads Q and K, stores the score matrix.
    """
    h_local, kv_local = _f(heads) / _f(tp), _f(kv_heads) / _f(tp)
    scores = _f(batch) * h_local * _f(pairs)
    return make_cost(2.0 * _f(head_dim) * scores, 0.0, _f(q_tokens) * h_local * _f(head_dim) * _f(a_bytes),
                     scores * _f(a_bytes), _f(batch) * kv_local * _f(head_dim) * _f(k_positions) * _f(kv_bytes))


def softmax_cost(batch: ArrayLike, pairs: ArrayLike, heads: ArrayLike, tp: ArrayLike, a_bytes: ArrayLike) -> KernelCost:
    """Unfused ``softmax`` (Eqs 22, 26, 33, 37): 5 ops per score, loads scores, stores probabilities."""
    scores = _f(batch) * _f(heads) / _f(tp) * _f(pairs)
    return make_cost(SOFTMAX_OPS_PER_SCORE * scores, 0.0, scores * _f(a_bytes), scores * _f(a_bytes))


def matmul_sv_cost(batch: ArrayLike, q_tokens: ArrayLike, pairs: ArrayLike, v_positions: ArrayLike,
                   heads: ArrayLike, kv_heads: ArrayLike, head_dim: ArrayLike, tp: ArrayLike,
                   a_bytes: ArrayLike, kv_bytes: ArrayLike) -> KernelCost:
    """Unfused ``matmul_sv`` (Eqs 21, 25, 32, 36): O = P V; loads P and V, stores O."""
    h_local, kv_local = _f(heads) / _f(tp), _f(kv_heads) / _f(tp)
    scores = _f(batch) * h_local * _f(pairs)
    return make_cost(2.0 * _f(head_dim) * scores, 0.0, scores * _f(a_bytes),
                     _f(q_tokens) * h_local * _f(head_dim) * _f(a_bytes),
                     _f(batch) * kv_local * _f(head_dim) * _f(v_positions) * _f(kv_bytes))


# -- element-wise kernels (Eqs 43-58) ------------------------------------------------------------
def norm_cost(tokens: ArrayLike, hidden: ArrayLike, a_bytes: ArrayLike, layernorm: ArrayLike) -> KernelCost:
    """A LayerNorm/RMSNorm over ``[tokens, hidden]`` (Eqs 43, 46, 49, 51, 54, 57), replicated under TP.

    ops: 7 per element (LayerNorm) or 4 per element + 2 per row (RMSNorm); loads and stores
    the tensor once.
    """
    t, h = _f(tokens), _f(hidden)
    ops = np.where(np.asarray(layernorm, dtype=bool), LAYERNORM_OPS_PER_ELEM * t * h,
                   RMSNORM_OPS_PER_ELEM * t * h + RMSNORM_OPS_PER_ROW * t)
    return make_cost(ops, 0.0, t * h * _f(a_bytes), t * h * _f(a_bytes))


def residual_add_cost(tokens: ArrayLike, hidden: ArrayLike, a_bytes: ArrayLike) -> KernelCost:
    """A residual add over ``[tokens, hidden]`` (Eqs 44, 52), replicated: 1 op per element,
    loads residual and branch, stores the sum."""
    elems = _f(tokens) * _f(hidden)
    return make_cost(elems, 0.0, 2.0 * elems * _f(a_bytes), elems * _f(a_bytes))


def mlp_activation_cost(tokens: ArrayLike, intermediate: ArrayLike, tp: ArrayLike, active_experts: ArrayLike,
                        a_bytes: ArrayLike, gated: ArrayLike) -> KernelCost:
    """The MLP activation (``act_mlp``, Eqs 45, 47-48, 50, 53, 55-56, 58) on ``intermediate/tp`` columns.

    2 ops per element; a gated MLP loads gate and up outputs (act(gate) * up), a plain one its
    single input; stores one tensor. Elements = tokens * active experts * intermediate / tp.
    """
    elems = _f(tokens) * _f(active_experts) * _f(intermediate) / _f(tp)
    loads = np.where(np.asarray(gated, dtype=bool), 2.0, 1.0) * elems
    return make_cost(ACT_OPS_PER_ELEM * elems, 0.0, loads * _f(a_bytes), elems * _f(a_bytes))


# -- all-reduce (Eqs 2-7) ------------------------------------------------------------------------
def all_reduce_cost(tokens: ArrayLike, hidden: ArrayLike, tp: ArrayLike, a_bytes: ArrayLike) -> KernelCost:
    """All-reduce of a ``[tokens, hidden]`` tensor over ``tp`` GPUs (paper Eqs 2-7).

    ops = tokens * hidden / tp (the reduce-scatter additions), memory = 2 * ops * D_A
    (read and write), network = tokens/tp * hidden * (tp - 1) * D_A; zero when tp = 1.
    """
    t, h, tp = _f(tokens), _f(hidden), _f(tp)
    multi = tp > 1
    ops = np.where(multi, t * h / tp, 0.0)
    mem = ops * _f(a_bytes)
    net = np.where(multi, t / tp * h * (tp - 1.0) * _f(a_bytes), 0.0)
    return make_cost(ops, 0.0, mem, mem, 0.0, 0.0, net)


def all_to_all_cost(tokens: ArrayLike, experts_per_token: ArrayLike, hidden: ArrayLike, groups: ArrayLike,
                    a_bytes: ArrayLike) -> KernelCost:
    """Dispatch and combine of an expert-parallel MoE layer on one GPU: the all-to-all that sends each of
    its ``tokens`` (the share of its attention group's tokens it dispatches) to the GPUs of the ``k``
    experts it is routed to outside its own group, and brings their outputs back.

    Under uniform routing ``(groups - 1) / groups`` of a token's ``k`` experts lie in other groups:
    network = 2 (dispatch + combine) * tokens * k * hidden * D_A * (groups - 1) / groups; every byte
    sent is read and every byte received written (memory = network, each way); the combine adds
    the received outputs (one op per element). Zero with one group (the experts all within the
    tensor-parallel group, whose tokens they already hold).
    """
    g = _f(groups)
    share = np.where(g > 1, (g - 1.0) / np.maximum(g, 1.0), 0.0)
    elems = _f(tokens) * _f(experts_per_token) * _f(hidden) * share
    net = 2.0 * elems * _f(a_bytes)
    return make_cost(elems, 0.0, net, net, 0.0, 0.0, net)


# -- embedding and LM head (whole-model summary only) --------------------------------------------
def embedding_cost(tokens: ArrayLike, hidden: ArrayLike, w_bytes: ArrayLike, a_bytes: ArrayLike) -> KernelCost:
    """Token-embedding lookup: a gather, no arithmetic; reads one row per token, writes it out."""
    elems = _f(tokens) * _f(hidden)
    return make_cost(0.0, elems * _f(w_bytes), 0.0, elems * _f(a_bytes))
