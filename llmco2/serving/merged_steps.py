"""Mixed (chunked-prefill) iterations costed as the merged step of the step physics.

A mixed iteration prefills a chunk of ``P`` prompt tokens over ``n`` sequences and decodes one
token for each of ``B`` running sequences in the same forward pass. Its work is the work of both
steps with the weights streamed once (:meth:`llmco2.physics.step_work.StepShapes.merged`), and its
latency and energy are :func:`~llmco2.physics.step_physics.step_cost` of that merged work. It is not
a prefill of ``n + B`` sequences of about one token each (which a (batch, context) grid of
prefills holds constant below its first context, so that ``B`` decodes were charged as a prefill
of ``16 x B`` tokens).

:class:`MergedStepCost` keeps the per-kernel-slot work (seconds at the peaks: compute, memory,
weight streaming, network) of prefills and decode steps on a (batch, context) grid, evaluated once
by the analytic engine. The work of ``b`` sequences at one context is affine in ``b`` (per-sequence
operations and traffic plus the weights), so the grid is interpolated linearly in batch, which is
exact for dense layers; in context it is interpolated linearly between grid contexts (exact for
the matrix products, within a few percent for attention's quadratic term).

Shapes: ``work`` ``[2 x batches x contexts, 4 x slots + 2]`` (one row per phase and grid point,
see :func:`phase_work`); ``slot_compute``, ``slot_memory``: ``[slots]``.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmco2.physics.step_physics import FLOATS, StepParams, WorkSums, kernel_seconds, overhead_arrays, time_and_power
from llmco2.physics.step_work import StepShapes, step_shapes
from llmco2.specs import GPU, ModelArch, Request
from llmco2.specs.limits import longest_prompt

log = logging.getLogger(__name__)
Array = NDArray[np.float64]

#: Grid of the merged-step work: sequences per step and tokens per sequence (prompt tokens of a
#: prefill, mean KV context of a decode step), reaching down to one token per sequence.
SHAPE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SHAPE_CONTEXTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def phase_work(x: StepShapes) -> Array:
    """Rows of ``[compute (k), memory (k), network (k), weight (k), kernels, all-reduces]`` per step
    of ``x`` (seconds at the peaks per kernel slot; counts per step)."""
    return np.concatenate([x.compute_s, x.memory_s, x.network_s, x.weight_s, x.kernels[:, None], x.collectives[:, None]], axis=1)


def _weights(grid: tuple[float, ...], value: float) -> tuple[int, float]:
    """``(i, w)``: ``value`` lies at ``(1 - w)`` of ``grid[i]`` and ``w`` of ``grid[i + 1]`` (``w`` may
    exceed 1 beyond the last point: linear extrapolation; below the first point it is held)."""
    i = min(max(bisect_right(grid, value) - 1, 0), len(grid) - 2)
    w = (value - grid[i]) / (grid[i + 1] - grid[i])
    return i, max(w, 0.0)


@dataclass
class MergedStepCost:
    """Energy (J, all GPUs) and latency (s) of mixed iterations from the step physics.

    ``work`` holds :func:`phase_work` rows of prefills (first ``len(batches) x len(contexts)``
    rows, batch-major) and of decode steps (the next as many); ``slot_compute`` / ``slot_memory``
    multiply each slot's compute and memory work into kernel time (1 / eta, and 1 / eta_expert on
    the expert matrices of a mixture of experts), so that a slot's time is the larger product.

    Example::

        >>> from llmco2.specs import get_gpu, get_model, Request
        >>> from llmco2.serving.physics_params import shipped_params
        >>> req = Request(batch_size=1, prompt_tokens=1, generated_tokens=1)
        >>> m = MergedStepCost.build(get_model("llama3.1-8b"), get_gpu("h100"), req, shipped_params())
        >>> e, t = m.mixed(num_seqs=1, tokens=512, decode_batch=64, context=700.0)
        >>> 0.0 < t < 1.0 and e > 0.0
        True
    """

    params: StepParams
    hardware: ScalarHardware
    work: Array
    slot_compute: Array
    slot_memory: Array
    overheads: tuple
    batches: tuple[float, ...]
    contexts: tuple[float, ...]
    host_synced: float = 0.0  # 1.0 where the layers synchronise the host (bitsandbytes LLM.int8)

    @classmethod
    def build(cls, arch: ModelArch, gpu: GPU, request: Request, params: StepParams, decode_probe: int = 8) -> MergedStepCost:
        """Evaluate the analytic work of prefills and decode steps (``decode_probe`` steps averaged,
        as :class:`~llmco2.serving.costs.GridCostModel` does) for ``request``'s GPUs, dtype and engine."""
        max_ctx = max(longest_prompt(arch.max_context) - decode_probe - 1, SHAPE_CONTEXTS[0] + 1)
        contexts = sorted({c for c in SHAPE_CONTEXTS if c < max_ctx} | {max_ctx})
        pre = [(arch, request.replace(batch_size=b, prompt_tokens=c, generated_tokens=1), gpu)
               for b in SHAPE_BATCHES for c in contexts]
        dec = [(arch, request.replace(batch_size=b, prompt_tokens=c, generated_tokens=decode_probe + 1), gpu)
               for b in SHAPE_BATCHES for c in contexts]
        p = step_shapes(pre, "prefill")
        d = step_shapes(dec, "decode", float(decode_probe))
        one = d.take(np.array([0]))
        oh = tuple(np.asarray(a)[0].item() for a in overhead_arrays(one.engines, params, online=True, num_gpus=one.num_gpus))
        k = d.compute_s.shape[1]
        unit = np.ones((1, k))
        return cls(params, ScalarHardware.of(one), np.concatenate([phase_work(p), phase_work(d)]),
                   kernel_seconds(unit, np.zeros((1, k)), one.moe, params, one.linear_rate)[0],
                   kernel_seconds(np.zeros((1, k)), unit, one.moe, params, one.linear_rate)[0], oh,
                   tuple(float(b) for b in SHAPE_BATCHES), tuple(float(c) for c in contexts),
                   0.0 if one.host_synced is None else float(one.host_synced[0]))

    def _corners(self, phase: int, batch: float, context: float) -> tuple[list[int], list[float]]:
        """Rows of ``work`` around (``batch``, ``context``) in ``phase`` (0 prefill, 1 decode) and their weights."""
        (i, u), (j, v) = _weights(self.batches, batch), _weights(self.contexts, context)
        nc = len(self.contexts)
        r = phase * len(self.batches) * nc + i * nc + j
        return [r, r + 1, r + nc, r + nc + 1], [(1.0 - u) * (1.0 - v), (1.0 - u) * v, u * (1.0 - v), u * v]

    def phase_rows(self, num_seqs: int, tokens: int, decode_batch: int, context: float) -> Array:
        """``[2, 4 x slots + 2]``: the :func:`phase_work` row of a prefill of ``tokens`` over
        ``num_seqs`` sequences and of one decode step of ``decode_batch`` sequences at mean context
        ``context`` (tokens; zeros without decodes), interpolated on the grid."""
        n = max(int(num_seqs), 1)
        rows, w = self._corners(0, float(n), max(tokens / n, 1.0))
        if decode_batch < 1:
            return np.dot(np.array([w, [0.0] * 4]), self.work[rows])
        d_rows, d_w = self._corners(1, float(decode_batch), max(float(context), 1.0))
        return np.dot(np.array([w + [0.0] * 4, [0.0] * 4 + d_w]), self.work[rows + d_rows])

    def mixed(self, num_seqs: int, tokens: int, decode_batch: int, context: float) -> tuple[float, float]:
        """Energy (J) and latency (s) of a prefill of ``tokens`` over ``num_seqs`` sequences merged
        with one decode step of ``decode_batch`` sequences at mean context ``context`` (tokens), as
        :meth:`~llmco2.physics.step_work.StepShapes.merged` merges steps: work adds, the weights
        stream once, the kernels and all-reduces are the larger launch's."""
        rows = self.phase_rows(num_seqs, tokens, decode_batch, context)
        k = len(self.slot_compute)
        merged = rows[0] + rows[1]
        merged[k:2 * k] -= rows[:, 3 * k:4 * k].min(axis=0)  # the weights stream once
        kernel_s = float(np.maximum(merged[:k] * self.slot_compute, merged[k:2 * k] * self.slot_memory).sum())
        compute, memory, network = merged[:3 * k].reshape(3, k).sum(axis=1).tolist()
        (kp, cp), (kd, cd) = rows[:, 4 * k:].tolist()
        sums = WorkSums(kernel_s, compute, memory, network, max(kp, kd), max(cp, cd), float(max(int(num_seqs), 1) + decode_batch),
                        self.host_synced)
        t, power = time_and_power(sums, self.hardware, self.params, self.overheads, FLOATS)
        return power * t, t


@dataclass(frozen=True)
class ScalarHardware:
    """The hardware fields of one row of :class:`~llmco2.physics.step_work.StepShapes` as floats."""

    num_gpus: float
    tdp_w: float
    idle_w: float
    mem_bw_bytes_per_s: float
    node_nm: float
    peak16_ops_per_s: float
    dram_pj_per_byte: float

    @classmethod
    def of(cls, x: StepShapes) -> ScalarHardware:
        return cls(*(float(getattr(x, f)[0]) for f in ("num_gpus", "tdp_w", "idle_w", "mem_bw_bytes_per_s", "node_nm",
                                                         "peak16_ops_per_s", "dram_pj_per_byte")))
