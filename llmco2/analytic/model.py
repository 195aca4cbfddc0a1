"""Whole-model view of a request: every layer plus embedding, final norm and LM head.

Totals are over all GPUs of the request; ``time_s`` is the request's time at the roofline
(kernels run one after another, layers and pipeline stages in sequence).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic import experts as X
from llmco2.analytic import kernels as K
from llmco2.analytic import mixers as M
from llmco2.analytic.layer import KERNEL_NAMES, PHASES, LayerAnalysis, LayerBatch
from llmco2.analytic.layer_dag import as_number
from llmco2.analytic.quantised import bitsandbytes_rows
from llmco2.analytic.roofline import roofline_point

Array = NDArray[np.float64]
QUANTITIES = ("ops", "mem_bytes", "net_bytes", "time_s")


def head_costs(b: LayerBatch, phase: str) -> dict[str, K.KernelCost]:
    """Embedding lookup, final norm and LM head of one phase, per GPU.

    The LM head is vocabulary-parallel (split over ``tp``) and, as serving engines do, runs on the
    last prompt position only in prefill (``B`` rows) and on every decode step (``B`` rows each).
    The embedding gather is split over ``tp`` too (vocabulary-parallel embedding). bitsandbytes
    leaves both in 16 bits (transformers keeps the LM head out of the quantised modules and the
    embedding is not a linear layer): their weights take the activation dtype's size there. Under
    expert parallelism, on a GPU of the busiest attention group (:func:`~llmco2.analytic.experts.rank_view`).
    """
    b = X.rank_view(b)
    tokens = K.phase_tokens(b.batch, b.prompt, b.generated, phase)
    passes = K.weight_passes(b.generated, phase)
    head_rows = b.batch if phase == "prefill" else tokens
    bnb = bitsandbytes_rows(b)
    w = np.where(bnb, b.a_bytes, b.w_bytes) if bnb.any() else b.w_bytes
    return {
        "embedding": K.embedding_cost(tokens / b.tp, b.hidden, w, b.a_bytes),
        "final_norm": K.norm_cost(tokens, b.hidden, b.a_bytes, b.layernorm),
        "lm_head": K.linear_cost(head_rows, b.hidden, b.vocab, b.tp, passes, w, b.a_bytes, split="column"),
    }


@dataclass(frozen=True)
class ModelTotals:
    """Whole-request totals per phase (arrays over requests).

    ``totals[phase][q]`` for q in ops, mem_bytes, net_bytes (summed over all GPUs) and time_s;
    ``kernel_time_s[phase][kernel]`` is the time spent in each layer kernel over all layers.
    """

    totals: dict[str, dict[str, Array]]
    kernel_time_s: dict[str, dict[str, Array]]
    weight_bytes_per_gpu: Array
    kv_cache_bytes_per_gpu: Array
    fits_in_memory: NDArray[np.bool_]


def model_totals(analysis: LayerAnalysis) -> ModelTotals:
    """Sum the layer over ``num_layers`` and add the embedding/LM-head work, both phases (``ops``,
    ``mem_bytes`` and ``net_bytes`` over every GPU: ``tp`` per pipeline stage, times the attention
    groups of expert parallelism)."""
    b = analysis.batch
    width = b.tp * X.attention_dp(b)  # GPUs that run each layer (tp without expert parallelism)
    totals: dict[str, dict[str, Array]] = {}
    kernel_time: dict[str, dict[str, Array]] = {}
    for phase in PHASES:
        heads = head_costs(b, phase)
        head_ops = sum((c.ops for c in heads.values()), np.zeros(len(b)))
        head_mem = sum((c.mem_bytes for c in heads.values()), np.zeros(len(b)))
        head_times = {name: roofline_point(c.ops, c.mem_bytes, 0.0, b.peak_ops_per_s, b.mem_bw_bytes_per_s,
                                           b.net_bw_bytes_per_s, False).time_s for name, c in heads.items()}
        head_time = sum(head_times.values(), np.zeros(len(b)))
        totals[phase] = {
            "ops": (analysis.total(phase, "ops") * b.layers + head_ops) * width,
            "mem_bytes": (analysis.total(phase, "mem_bytes") * b.layers + head_mem) * width,
            "net_bytes": analysis.total(phase, "net_bytes") * b.layers * width,
            "time_s": analysis.total(phase, "time_s") * b.layers + head_time,
        }
        kernel_time[phase] = {
            n: np.where(analysis.present[n], analysis.roofline[phase][n].time_s, 0.0) * b.layers for n in KERNEL_NAMES
        }
        kernel_time[phase].update(head_times)
    weights = X.weight_bytes_per_gpu(b)
    kv = kv_cache_bytes_per_gpu(b)
    return ModelTotals(totals, kernel_time, weights, kv, weights + kv <= b.mem_capacity_bytes)


def kv_cache_bytes_per_gpu(b: LayerBatch) -> Array:
    """The caches of every request at its full length (prompt and generated tokens), per GPU
    (bytes): :func:`cache_bytes_per_gpu` for special blocks and for K/V heads replicated over
    ``tp``, else the K/V heads split over the GPUs of an attention group."""
    groups = X.attention_dp(b)  # an attention group holds the cache of its own sequences
    return np.where(b.special | (b.kv_heads < b.tp), cache_bytes_per_gpu(b),
                    2.0 * b.layers * X.rank_batch(b) * (b.prompt + b.generated) * b.kv_heads * b.head_dim * b.kv_bytes
                    / (b.num_gpus / groups))


def sequences_at_once(weight_bytes: Any, cache_bytes: Any, memory_bytes: Any, batch: Any, memory_share: float) -> Array:
    """How many of ``batch`` sequences whose caches take ``cache_bytes`` at their full length (all
    of them, per GPU) a paged KV cache holds at once beside ``weight_bytes`` of weights, in
    ``memory_share`` of ``memory_bytes`` per GPU (a serving engine's ``gpu_memory_utilization``):
    ``floor((share x memory - weights) / cache per sequence)``, at most ``batch``; ``batch`` where
    not even one sequence fits (the request cannot run at all, which the memory note says)."""
    batch = np.maximum(np.asarray(batch, dtype=np.float64), 1.0)
    per_sequence = np.maximum(np.asarray(cache_bytes, dtype=np.float64) / batch, 1e-9)
    room = np.asarray(memory_bytes, dtype=np.float64) * memory_share - np.asarray(weight_bytes, dtype=np.float64)
    fit = np.floor(np.maximum(room, 0.0) / per_sequence)
    return np.where(fit >= 1.0, np.minimum(fit, batch), batch)


def cache_bytes_per_gpu(b: LayerBatch) -> Array:
    """Every cache the architecture keeps, per GPU (bytes), for the whole request (prompt and
    generated tokens; under expert parallelism, of the busiest attention group's sequences): full
    K/V (heads split over ``tp``, replicated above the KV-head count), the MLA latent (``kv_lora + rope`` per token and layer, replicated on every rank), banded layers
    (at most the window), Mamba-2 and gated-DeltaNet state (constant in context). Pipeline stages
    split the layers."""
    tokens = b.prompt + b.generated
    per_token = np.where(b.mla, (b.kv_lora + b.qk_rope) * b.kv_bytes,
                         2.0 * np.maximum(b.kv_heads, b.tp) * b.head_dim * b.kv_bytes / b.tp)
    full_layers = (b.f_attn - b.f_win) * b.layers
    window_layers = b.f_win * b.layers
    batch = X.rank_batch(b)
    attention = batch * per_token * (full_layers * tokens + window_layers * np.minimum(tokens, np.maximum(b.window, 1.0)))
    state = batch * b.kv_bytes / b.tp * b.layers * (b.f_mamba * M.mamba_state_elems(b) + b.f_linear * M.deltanet_state_elems(b))
    return (attention + state) / X.pipeline_stages(b)


def summary_record(analysis: LayerAnalysis, totals: ModelTotals, i: int = 0, top: int = 3) -> dict[str, Any]:
    """Readable whole-model summary of request ``i``: totals, dominant phase and kernels, memory."""
    out: dict[str, Any] = {}
    for phase in PHASES:
        rec = {q: as_number(totals.totals[phase][q][i]) if q != "time_s" else float(totals.totals[phase][q][i]) for q in QUANTITIES}
        times = {n: float(t[i]) for n, t in totals.kernel_time_s[phase].items() if float(t[i]) > 0}
        total_t = sum(times.values()) or 1.0
        rec["dominant_kernels"] = [
            {"name": n, "share_of_time": round(t / total_t, 4)}
            for n, t in sorted(times.items(), key=lambda kv: -kv[1])[:top]
        ]
        out[phase] = rec
    pre, dec = (float(totals.totals[p]["time_s"][i]) for p in PHASES)
    out["dominant_phase"] = "prefill" if pre >= dec else "decode"
    out["time_s"] = pre + dec
    out["weight_bytes_per_gpu"] = as_number(totals.weight_bytes_per_gpu[i])
    out["kv_cache_bytes_per_gpu"] = as_number(totals.kv_cache_bytes_per_gpu[i])
    out["fits_in_memory"] = bool(totals.fits_in_memory[i])
    return out
