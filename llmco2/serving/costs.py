"""Cost of one serving iteration (J, s) and the server's memory and idle power.

:class:`GridCostModel` evaluates the per-phase predictors (:func:`llmco2.prediction.predict_phases`:
analytic features, physics prior, learned correction) once on a grid of
(batch, context) shapes for one (model, GPU, TP, engine, dtype) and interpolates bilinearly in
(log batch, log context) on log energy and log latency, so that a simulation of many thousand
iterations never calls the predictor again.

* Prefill of ``n`` sequences holding ``P`` tokens: the predicted prefill of a request with batch
  ``n`` and ``P / n`` prompt tokens.
* One decode step of ``B`` sequences at mean context ``c``: the predicted decode phase of a
  request with batch ``B``, prompt ``c`` and ``DECODE_PROBE + 1`` generated tokens, divided by its
  ``DECODE_PROBE`` steps (so the step sits at mean context ``c + DECODE_PROBE / 2``).
* A mixed (chunked-prefill) iteration of a prefill chunk and ``B`` decode sequences is, with the
  step physics (:meth:`GridCostModel.from_physics`), the merged step of the two
  (:class:`~llmco2.serving.merged_steps.MergedStepCost`: their work with the weights streamed once);
  with a learned predictor, whose grid holds whole phases only, the prefill plus what the decode
  step of ``B`` sequences at its context costs beyond one sequence's step at the first context
  (the weights and the step's fixed costs are paid once).

Every iteration is held between idle power x latency (a busy GPU draws at least its idle power)
and TDP x latency (the predictors' footprint already bounds latency by energy / TDP).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.serving.grid_rows import PowerRow, power_row
from llmco2.serving.merged_steps import MergedStepCost
from llmco2.specs import GPU, ModelArch, Request
from llmco2.specs.engines import GPU_MEMORY_UTILIZATION
from llmco2.specs.gpu_power import static_power_w
from llmco2.specs.limits import finite_number, longest_prompt

log = logging.getLogger(__name__)
Array = NDArray[np.float64]

BATCH_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
CONTEXT_GRID = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
DECODE_PROBE = 8


@runtime_checkable
class IterationCost(Protocol):
    """Energy (J, all GPUs of the server) and latency (s) of serving iterations."""

    def prefill(self, num_seqs: int, tokens: int) -> tuple[float, float]:
        """An iteration prefilling ``tokens`` prompt tokens spread over ``num_seqs`` sequences."""
        ...

    def mixed(self, num_seqs: int, tokens: int, decode_batch: int, context: float) -> tuple[float, float]:
        """A chunked-prefill iteration: a prefill plus one decode token for each of ``decode_batch`` sequences."""
        ...

    def decode(self, batch: int, context: Array) -> tuple[Array, Array]:
        """Decode steps of ``batch`` sequences, one step per entry of ``context`` (mean KV length, tokens)."""
        ...


DecodeRun = Callable[[int, float, int, float], tuple[int, float, float]]


def decode_runner(cost: IterationCost) -> DecodeRun:
    """``run(batch, context, steps, limit) -> (n, energy J, time s)``: the first ``n`` of ``steps``
    decode steps of ``batch`` sequences at mean contexts ``context, context + 1, ...`` (tokens),
    ``n`` being ``steps`` or, if sooner, the first step by whose end the summed latency reaches
    ``limit`` (s). ``cost.decode_run`` when the cost model has one (:class:`GridCostModel`: scalar
    arithmetic), else :meth:`IterationCost.decode` on all ``steps`` contexts at once."""
    fast = getattr(cost, "decode_run", None)
    if fast is not None:
        return fast  # type: ignore[no-any-return]

    def run(batch: int, context: float, steps: int, limit: float = math.inf) -> tuple[int, float, float]:
        e_k, t_k = cost.decode(batch, np.asarray(context + np.arange(steps), dtype=np.float64))
        cum = np.cumsum(t_k)
        if limit < math.inf:
            steps = max(min(steps, int(np.searchsorted(cum, limit, side="left")) + 1), 1)
        return steps, float(e_k[:steps].sum()), float(cum[steps - 1])

    return run


def idle_power_w(gpu: GPU, num_gpus: int) -> tuple[float, str]:
    """Idle power of ``num_gpus`` GPUs (W; only the GPUs, not the host) and where the figure comes from
    (:func:`llmco2.specs.gpu_power.static_power_w`)."""
    watts, source = static_power_w(gpu)
    return float(watts) * num_gpus, source


#: What :func:`memory_budget` suggests when the weights do not fit (the parameters of
#: :func:`llmco2.serving.api.serve`; ``llmco2 predict --serving`` prints them as ``--gpus`` and ``--dtype``).
MEMORY_ADVICE = "use more GPUs (`num_gpus`) or a smaller dtype (`dtype`)"


def memory_budget(arch: ModelArch, gpu: GPU, request: Request, advice: str = MEMORY_ADVICE) -> dict[str, float]:
    """Weights per GPU (bytes), KV bytes per token per GPU and the KV capacity (tokens) of the server.

    From the analytic engine's memory model (:func:`llmco2.analytic.model.model_totals`):
    ``weight_bytes_per_gpu`` and ``kv_cache_bytes_per_gpu`` of a one-sequence request, with
    ``GPU_MEMORY_UTILIZATION`` of each GPU's memory usable, times the attention groups of an
    expert-parallel server (``ep / tp``). Raises when the weights leave no room, ending its message
    with ``advice`` (by default the parameters of :func:`llmco2.serving.api.serve` that would help).
    """
    from llmco2.analytic.layer import LayerBatch, analyze_layers
    from llmco2.analytic.model import model_totals

    probe = request.replace(batch_size=1, prompt_tokens=1023, generated_tokens=1)
    totals = model_totals(analyze_layers(LayerBatch.from_items([(arch, probe, gpu)], validate=False)))
    weights = float(totals.weight_bytes_per_gpu[0])
    kv_per_token = float(totals.kv_cache_bytes_per_gpu[0]) / 1024.0
    usable = gpu.memory_bytes * GPU_MEMORY_UTILIZATION
    capacity = int((usable - weights) // kv_per_token) if kv_per_token > 0 else 0
    if capacity < 1:
        raise InvalidInputError(
            f"the weights of {arch.id} take {weights / 1e9:.1f} GB per GPU, more than the {usable / 1e9:.1f} GB usable on "
            f"{request.num_gpus} x {gpu.id}; {advice}", field="num_gpus")
    # with expert parallelism beyond the tensor-parallel group, each attention group keeps the KV of its
    # own sequences: the server holds one group's capacity per group (ep / tp)
    capacity *= request.attention_dp
    return {"weight_bytes_per_gpu": weights, "kv_bytes_per_token_per_gpu": kv_per_token, "kv_capacity_tokens": capacity}


@dataclass
class GridCostModel:
    """Bilinear interpolation of predicted iteration costs on a (batch, context) grid.

    Arrays ``*_j`` / ``*_s`` are (len(batches), len(contexts)): prefill of a batch at that prompt
    length, and one decode step of a batch at that context. ``energy_scale`` multiplies every
    iteration's energy (1.0 by default). ``decode_time_coef`` (a latency calibration, see
    :mod:`llmco2.serving.calibration`) multiplies decode-step latency by
    exp(c . [1, log B, log G, log B x log G]) at batch B (held within ``batch_range``) on G = ``num_gpus`` GPUs.
    ``merged`` (the step physics' work on a grid) costs mixed iterations as merged steps; without
    it (a learned predictor's grid) they are a prefill plus a decode step's marginal cost.

    Scalar costs (:meth:`prefill`, :meth:`mixed`, :meth:`decode_run`) go through one
    :class:`~llmco2.serving.grid_rows.PowerRow` per (table, batch), built on first use and kept
    until a field is reassigned; :meth:`decode` interpolates arrays directly (the same values).
    """

    batches: Array
    contexts: Array
    prefill_j: Array
    prefill_s: Array
    decode_j: Array
    decode_s: Array
    idle_w: float
    tdp_w: float
    energy_scale: float = 1.0
    num_gpus: int = 1
    decode_time_coef: tuple[float, ...] | None = None
    batch_range: tuple[float, float] = (1.0, 4096.0)
    merged: MergedStepCost | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "energy_scale", finite_number(self.energy_scale, "energy_scale", above=True))
        self._lb, self._lc = np.log(self.batches), np.log(self.contexts)
        floor = self.idle_w
        self._tables = {}
        for name, e, t in (("prefill", self.prefill_j, self.prefill_s), ("decode", self.decode_j, self.decode_s)):
            t = np.maximum(t, 1e-6)
            e = np.clip(e, floor * t, self.tdp_w * t)
            self._tables[name] = (np.log(e), np.log(t))

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if not name.startswith("_"):
            object.__setattr__(self, "_rows", {})  # rows fold in energy_scale, decode_time_coef, ...

    def _row(self, table: str, batch: int) -> PowerRow:
        """The (cached) power-law row of ``table`` at ``batch`` sequences, multipliers folded in."""
        row: PowerRow | None = self._rows.get((table, batch))
        if row is None:
            le, lt = self._tables[table]
            extra = max(batch / self.batches[-1], 1.0)  # beyond the largest grid batch costs grow with the batch
            t_mult = extra * self.decode_time_factor(batch) if table == "decode" else extra
            row = power_row(self._lb, self.contexts, le, lt, batch, self.energy_scale * extra, t_mult)
            self._rows[(table, batch)] = row
        return row

    @classmethod
    def from_predictor(cls, arch: ModelArch, gpu: GPU, request: Request, predictor: Any = None,
                       idle_w: float | None = None, energy_scale: float = 1.0) -> GridCostModel:
        """Evaluate the predictors for ``request``'s GPUs, dtype and engine on the grid (one call)."""
        from llmco2.prediction import predict_phases

        max_ctx = max(longest_prompt(arch.max_context) - DECODE_PROBE - 1, CONTEXT_GRID[0])
        contexts = [c for c in CONTEXT_GRID if c < max_ctx] + [max_ctx]
        contexts = sorted(set(contexts))
        items = [(arch, request.replace(batch_size=b, prompt_tokens=c, generated_tokens=DECODE_PROBE + 1), gpu)
                 for b in BATCH_GRID for c in contexts]
        ph = predict_phases(items, predictor)
        shape = (len(BATCH_GRID), len(contexts))
        if idle_w is None:
            idle_w = idle_power_w(gpu, request.num_gpus)[0]
        return cls(np.array(BATCH_GRID, float), np.array(contexts, float),
                   ph.energy_j[:, 0].reshape(shape), ph.latency_s[:, 0].reshape(shape),
                   (ph.energy_j[:, 1] / DECODE_PROBE).reshape(shape), (ph.latency_s[:, 1] / DECODE_PROBE).reshape(shape),
                   idle_w, gpu.tdp_w * request.num_gpus, energy_scale)

    @classmethod
    def from_physics(cls, arch: ModelArch, gpu: GPU, request: Request, params: Any, idle_w: float | None = None,
                     energy_scale: float = 1.0) -> GridCostModel:
        """The step physics (:mod:`llmco2.physics.step_physics`, constants ``params``) on the grid."""
        from llmco2.physics.step_physics import step_cost
        from llmco2.physics.step_work import step_shapes

        max_ctx = max(longest_prompt(arch.max_context) - DECODE_PROBE - 1, CONTEXT_GRID[0])
        contexts = sorted({c for c in CONTEXT_GRID if c < max_ctx} | {max_ctx})
        shape = (len(BATCH_GRID), len(contexts))
        pre = [(arch, request.replace(batch_size=b, prompt_tokens=c, generated_tokens=1), gpu) for b in BATCH_GRID for c in contexts]
        dec = [(arch, request.replace(batch_size=b, prompt_tokens=c, generated_tokens=DECODE_PROBE + 1), gpu)
               for b in BATCH_GRID for c in contexts]
        p = step_cost(step_shapes(pre, "prefill"), params, online=True)
        d = step_cost(step_shapes(dec, "decode", float(DECODE_PROBE)), params, online=True)
        if idle_w is None:
            idle_w = idle_power_w(gpu, request.num_gpus)[0]
        return cls(np.array(BATCH_GRID, float), np.array(contexts, float), p.energy_j.reshape(shape), p.time_s.reshape(shape),
                   d.energy_j.reshape(shape), d.time_s.reshape(shape), idle_w, gpu.tdp_w * request.num_gpus, energy_scale,
                   merged=MergedStepCost.build(arch, gpu, request, params, DECODE_PROBE))

    def _lookup(self, table: str, batch: float, context: Array) -> tuple[Array, Array]:
        """Interpolated (J, s) at one batch size and many contexts (held at the grid's edges)."""
        le, lt = self._tables[table]
        lb = min(max(math.log(max(batch, 1.0)), self._lb[0]), self._lb[-1])
        i = min(max(int(np.searchsorted(self._lb, lb)) - 1, 0), len(self._lb) - 2)
        w = (lb - self._lb[i]) / (self._lb[i + 1] - self._lb[i])
        lc = np.log(np.maximum(context, 1.0))  # np.interp holds the edge values beyond the grid
        e_lo, e_hi = np.interp(lc, self._lc, le[i]), np.interp(lc, self._lc, le[i + 1])
        t_lo, t_hi = np.interp(lc, self._lc, lt[i]), np.interp(lc, self._lc, lt[i + 1])
        return np.exp(e_lo + w * (e_hi - e_lo)) * self.energy_scale, np.exp(t_lo + w * (t_hi - t_lo))

    def prefill(self, num_seqs: int, tokens: int) -> tuple[float, float]:
        """Energy (J) and latency (s) of prefilling ``tokens`` tokens over ``num_seqs`` sequences."""
        n = max(int(num_seqs), 1)
        # beyond the largest grid batch the prefill grows with the number of tokens (folded into the row)
        return self._row("prefill", n).at(tokens / n)

    def decode_time_factor(self, batch: float) -> float:
        """The latency calibration's multiplier of a decode step at ``batch`` (1.0 without one)."""
        if not self.decode_time_coef:
            return 1.0
        lb = math.log(min(max(batch, self.batch_range[0]), self.batch_range[1]))
        ln = math.log(self.num_gpus)
        c = self.decode_time_coef
        return math.exp(c[0] + c[1] * lb + c[2] * ln + c[3] * lb * ln)

    def decode(self, batch: int, context: Array) -> tuple[Array, Array]:
        """Energy (J) and latency (s) of one decode step of ``batch`` sequences per entry of ``context`` (tokens)."""
        e, t = self._lookup("decode", batch, np.asarray(context, dtype=np.float64))
        extra = max(batch / self.batches[-1], 1.0)
        return e * extra, t * (extra * self.decode_time_factor(batch))

    def decode_run(self, batch: int, context: float, steps: int, limit: float = math.inf) -> tuple[int, float, float]:
        """A run of decode steps at contexts ``context, context + 1, ...`` (see :func:`decode_runner`):
        ``(n, energy J, time s)`` of its first ``n`` steps."""
        return self._row("decode", int(batch)).run(context, steps, limit)

    def mixed(self, num_seqs: int, tokens: int, decode_batch: int, context: float) -> tuple[float, float]:
        """Energy (J) and latency (s) of a prefill of ``tokens`` tokens over ``num_seqs`` sequences mixed
        with one decode token of ``decode_batch`` sequences at mean context ``context`` (tokens)."""
        if self.merged is not None:
            e, t = self.merged.mixed(num_seqs, tokens, decode_batch, context)
            return e * self.energy_scale, t
        e, t = self.prefill(num_seqs, tokens)
        if decode_batch:
            de, dt = self._row("decode", int(decode_batch)).at(context)
            de1, dt1 = self._row("decode", 1).first  # one sequence's step: the weights and fixed costs, paid once
            e += max(de - de1, 0.0)
            t += max(dt - dt1, 0.0)
        return e, t
