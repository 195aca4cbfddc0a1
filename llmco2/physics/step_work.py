"""The work of an engine iteration, per kernel slot: :class:`StepShapes` (operations, bytes and link
traffic at the GPU's peaks, kernels launched, all-reduces, sequences, and the hardware figures its power
needs) of a prefill, a decode step or a mixed step, from the analytic engine
(:func:`step_shapes`, :func:`shapes_of`). :mod:`llmco2.physics.step_physics` turns it into time and energy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.experts import all_to_all_rows, rank_batch
from llmco2.analytic.layer import KERNEL_NAMES, LayerAnalysis, LayerBatch, analyze_layers
from llmco2.analytic.model import head_costs
from llmco2.analytic.quantised import LINEAR_SLOTS, host_syncs, kernel_launches, weight_only_rows
from llmco2.physics.hardware_rows import HardwareRows
from llmco2.physics.link_rows import A2A_SLOT, collectives_per_layer, wire_bytes
from llmco2.specs import GPU, ModelArch, Request, engine_id
from llmco2.specs.links import ONE_DIRECTION_SHARE
from llmco2.specs.quantisation import WEIGHT_ONLY_COMPUTE_RATE

Array = NDArray[np.float64]
Item = tuple[ModelArch, Request, GPU]
HEAD_KERNELS = ("embedding", "final_norm", "lm_head")
SLOTS = (*KERNEL_NAMES, *HEAD_KERNELS)
#: The MLP matrices, which a mixture-of-experts layer runs as grouped GEMMs over its experts.
EXPERT_SLOTS = np.array([SLOTS.index(k) for k in ("gate_proj", "up_proj", "down_proj")])
#: Indices of the linear layers' matrix products (the slots a weight quantisation's kernels run).
LINEAR_SLOT_INDEX = np.array([SLOTS.index(k) for k in LINEAR_SLOTS])


@dataclass(frozen=True)
class StepShapes:
    """Per-GPU work of ``n`` iterations, per kernel slot (``[n, len(SLOTS)]``, seconds at the peaks,
    kernels of the layer already multiplied by the layers) and what the overheads need."""

    compute_s: Array
    memory_s: Array
    network_s: Array
    weight_s: Array  # the weight-streaming part of memory_s
    kernels: Array  # [n] kernels per step (all slots present, layers counted)
    collectives: Array  # [n] all-reduces per step
    sequences: Array  # [n] sequences in the step
    num_gpus: Array
    tdp_w: Array
    idle_w: Array
    mem_bw_bytes_per_s: Array  # memory bandwidth of one GPU (bytes/s)
    moe: Array  # [n] 1.0 where the MLP is a mixture of experts (its matrices run as grouped GEMMs)
    engines: list[str]
    node_nm: Array  # [n] process node of the GPU (nm)
    peak16_ops_per_s: Array  # [n] dense fp16 (or bf16) tensor peak of one GPU (ops/s)
    dram_pj_per_byte: Array  # [n] DRAM access energy of the GPU's memory technology (pJ per byte)
    # [n] share of the compute rate the linear layers' GEMMs reach (WEIGHT_ONLY_COMPUTE_RATE for
    # weight-only low-bit kernels, else 1); None: 1 everywhere
    linear_rate: Array | None = None
    # [n] 1.0 where the layers synchronise the host (bitsandbytes LLM.int8, ``host_syncs``): the host
    # cannot run ahead of the GPU, so their times add instead of overlapping; None: 0 everywhere
    host_synced: Array | None = None

    def __len__(self) -> int:
        return len(self.sequences)

    def take(self, idx: NDArray[np.int64]) -> StepShapes:
        eng = [self.engines[i] for i in np.asarray(idx).tolist()]
        return StepShapes(self.compute_s[idx], self.memory_s[idx], self.network_s[idx], self.weight_s[idx], self.kernels[idx],
                          self.collectives[idx], self.sequences[idx], self.num_gpus[idx], self.tdp_w[idx], self.idle_w[idx],
                          self.mem_bw_bytes_per_s[idx], self.moe[idx], eng, self.node_nm[idx], self.peak16_ops_per_s[idx],
                          self.dram_pj_per_byte[idx], None if self.linear_rate is None else self.linear_rate[idx],
                          None if self.host_synced is None else self.host_synced[idx])

    def merged(self, other: StepShapes) -> StepShapes:
        """One iteration doing the work of both (a chunked-prefill step: a prefill and a decode
        step in one forward pass): operations and activation traffic add, the weights stream once."""
        shared = np.minimum(self.weight_s, other.weight_s)
        return StepShapes(self.compute_s + other.compute_s, self.memory_s + other.memory_s - shared,
                          self.network_s + other.network_s, np.maximum(self.weight_s, other.weight_s),
                          np.maximum(self.kernels, other.kernels), np.maximum(self.collectives, other.collectives),
                          self.sequences + other.sequences, self.num_gpus, self.tdp_w, self.idle_w, self.mem_bw_bytes_per_s, self.moe, self.engines,
                          self.node_nm, self.peak16_ops_per_s, self.dram_pj_per_byte, self.linear_rate,
                          _either(self.host_synced, other.host_synced))


def _either(a: Array | None, b: Array | None) -> Array | None:
    """The larger of two optional per-step flags (``None``: zeros)."""
    return b if a is None else a if b is None else np.maximum(a, b)


def step_shapes(items: Sequence[Item], phase: str, steps: Array | float = 1.0) -> StepShapes:
    """Per-step work of each request's ``phase`` (``"prefill"``: one step; ``"decode"``: the phase
    divided by ``steps``, the number of decode steps it holds, ``generated - 1``)."""
    b = LayerBatch.from_items(list(items), validate=False)
    return shapes_of(analyze_layers(b), phase, steps, [engine_id(r.engine) for _, r, _ in items], HardwareRows.of([g for _, _, g in items]))


def shapes_of(a: LayerAnalysis, phase: str, steps: Array | float, engines: list[str], hw: HardwareRows) -> StepShapes:
    """:class:`StepShapes` of ``phase`` from an analysis of the requests (their layer batch
    ``a.batch``), divided by ``steps`` (see :func:`step_shapes`); ``engines`` are engine ids and
    ``hw`` the power-relevant hardware of each request's GPU."""
    b = a.batch
    heads = head_costs(b, phase)
    n, k = len(b), len(SLOTS)
    comp, mem, net, wt, lat = np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k))
    link_bw, link_s = hw.links.allreduce(b.tp) if hw.links is not None else (b.net_bw_bytes_per_s, np.zeros(n))
    a2a = all_to_all_rows(b)  # MoE rows whose tokens cross attention groups: the MLP slot is an all-to-all over ep GPUs
    if hw.links is not None and a2a.any():
        ep_bw, ep_s = hw.links.allreduce(np.maximum(b.tp, b.ep))
    else:
        ep_bw, ep_s = link_bw, link_s
    ring_bytes = np.where(a.present["all_reduce_attn"], a.costs[phase]["all_reduce_attn"].net_bytes, 0.0)  # one TP all-reduce
    for j, name in enumerate(KERNEL_NAMES):
        c = a.costs[phase][name]
        present = a.present[name]
        bw, extra_s = (np.where(a2a, ep_bw, link_bw), np.where(a2a, ep_s, link_s)) if name == A2A_SLOT else (link_bw, link_s)
        comp[:, j] = np.where(present, c.ops, 0.0) * b.layers / b.peak_ops_per_s
        mem[:, j] = np.where(present, c.mem_bytes, 0.0) * b.layers / b.mem_bw_bytes_per_s
        net[:, j] = wire_bytes(np.where(present, c.net_bytes, 0.0), np.where(a2a, ring_bytes, np.inf) if name == A2A_SLOT else None) \
            * b.layers / np.maximum(ONE_DIRECTION_SHARE * bw, 1.0)
        if name.startswith("all_reduce"):  # per step: what the link's latency adds to NVLink's, as link time
            lat[:, j] = np.where(present, extra_s, 0.0) * b.layers
        wt[:, j] = np.where(present, c.weight_bytes, 0.0) * b.layers / b.mem_bw_bytes_per_s
    for j, name in enumerate(HEAD_KERNELS, start=len(KERNEL_NAMES)):
        comp[:, j] = heads[name].ops / b.peak_ops_per_s
        mem[:, j] = heads[name].mem_bytes / b.mem_bw_bytes_per_s
        wt[:, j] = heads[name].weight_bytes / b.mem_bw_bytes_per_s
    s = np.broadcast_to(np.asarray(steps, dtype=np.float64), (n,))
    per_layer = kernel_launches(a, phase)  # present slots, plus bitsandbytes' extra kernels per linear layer
    collectives = collectives_per_layer(a)
    return StepShapes(comp / s[:, None], mem / s[:, None], net / s[:, None] + lat, wt / s[:, None], per_layer * b.layers + len(HEAD_KERNELS),
                      collectives * b.layers, rank_batch(b).astype(np.float64), b.num_gpus.astype(np.float64),
                      b.tdp_w.astype(np.float64), hw.idle_w, b.mem_bw_bytes_per_s.astype(np.float64),
                      b.moe.astype(np.float64), list(engines), hw.node_nm, hw.peak16_ops_per_s * b.peak_boost, hw.dram_pj_per_byte,
                      np.where(weight_only_rows(b), WEIGHT_ONLY_COMPUTE_RATE, 1.0), (host_syncs(a) > 0).astype(np.float64))
