"""Steady state of a loaded server in closed form: J per output token, inter-token latency and
power of a continuously batched engine kept full by a queue (a closed loop of ``cap`` clients).

For servers described by :class:`ServerCase` (model, GPUs, engine, batch cap, request lengths):

* running batch ``B = min(cap, KV capacity / c)`` with ``c`` the time-averaged KV tokens a running
  sequence holds, ``sum(P_i O_i + O_i^2 / 2) / sum(O_i)`` (a sequence holds its prompt and the
  tokens generated so far; long outputs stay longer), which is also the mean decode context;
* by Little's law ``r = B / mean output`` requests finish, and as many start, per decode step;
  each of the ``B`` running sequences ends at a step with a small chance, so the requests that end
  at one step are a Poisson count of mean ``r``: a share ``phi = 1 - exp(-r)`` of the decode steps
  starts at least one request, with a prefill of ``s = r / phi`` prompts on average (``P`` tokens
  each, the mean prompt);
* whole prefills (vLLM V0): the prefill is an iteration of its own, so the mean time per output
  token is ``t_decode + phi x t_prefill`` and the median inter-token latency is the decode step's
  (or the pair's when more than half of the steps wait for a prefill: ``exp(-r) < 1/2``);
* chunked prefill (vLLM V1): the prefill rides in a mixed step with the decode sequences (the
  weights stream once): ``(1 - phi) x t_decode + phi x t_mixed``;
* J per output token = energy of that cycle / B; average power = its energy / its time.

Each step's latency and energy come from :mod:`llmco2.physics.step_physics`, so the closed form
and the simulator (:mod:`llmco2.serving.simulator`) share the same physics; the closed form is
what the physics is fitted through (:mod:`llmco2.physics.step_fit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmco2.physics.step_physics import StepParams, overhead_arrays, step_cost
from llmco2.physics.step_work import StepShapes, step_shapes
from llmco2.specs import GPU, ModelArch, Request

Array = NDArray[np.float64]
DECODE_PROBE = 8


@dataclass(frozen=True)
class ServerCase:
    """One server: model, GPU, a request giving GPUs / TP / dtypes / engine, the batch cap, the KV
    capacity (tokens) and samples of prompt and output lengths (tokens)."""

    arch: ModelArch
    gpu: GPU
    request: Request
    cap: int
    kv_capacity_tokens: float
    prompts: NDArray[np.int64]
    outputs: NDArray[np.int64]
    chunked: bool


@dataclass(frozen=True)
class SteadyShapes:
    """The three step shapes of ``n`` servers and how they combine."""

    decode: StepShapes
    prefill: StepShapes  # whole prefill of s prompts (V0) or the mixed step (V1)
    batch: Array
    share: Array  # phi: prefills (or mixed steps) per decode step
    chunked: NDArray[np.bool_]
    context: Array
    starts: Array  # r: requests started (and finished) per decode step


#: The fields of :class:`SteadyShapes` that hold one value per server (after its two step shapes).
PER_SERVER_FIELDS = ("batch", "share", "chunked", "context", "starts")


def running_batch(case: ServerCase) -> tuple[float, float]:
    """``(B, c)``: steady running batch and the time-averaged KV tokens per running sequence."""
    p, o = case.prompts.astype(np.float64), case.outputs.astype(np.float64)
    c = float(np.sum(p * o + o * o / 2.0) / max(np.sum(o), 1.0))
    b = min(float(case.cap), max(case.kv_capacity_tokens / max(c, 1.0), 1.0))
    return b, c


def steady_shapes(cases: Sequence[ServerCase]) -> SteadyShapes:
    """Step shapes of every case (one analytic pass per step kind for all cases)."""
    dec_items, pre_items, batch, share, ctx, starts = [], [], [], [], [], []
    for case in cases:
        b, c = running_batch(case)
        mean_out = max(float(np.mean(case.outputs)), 1.0)
        r = b / mean_out
        phi = -np.expm1(-r)  # steps at which at least one of a Poisson count of mean r requests ends
        s = max(int(round(r / phi)), 1)
        prompt = max(int(round(float(np.mean(case.prompts)))), 1)
        bi = max(int(round(b)), 1)
        dec_items.append((case.arch, case.request.replace(batch_size=bi, prompt_tokens=max(int(round(c)), 1),
                                                          generated_tokens=DECODE_PROBE + 1), case.gpu))
        pre_items.append((case.arch, case.request.replace(batch_size=s, prompt_tokens=prompt, generated_tokens=1), case.gpu))
        batch.append(bi)
        share.append(r / s)
        ctx.append(c)
        starts.append(r)
    decode = step_shapes(dec_items, "decode", float(DECODE_PROBE))
    prefill = step_shapes(pre_items, "prefill")
    chunked = np.array([c.chunked for c in cases], dtype=bool)
    mixed = prefill.merged(decode)
    pick = np.where(chunked[:, None], mixed.compute_s, prefill.compute_s)
    combined = StepShapes(pick, np.where(chunked[:, None], mixed.memory_s, prefill.memory_s),
                          np.where(chunked[:, None], mixed.network_s, prefill.network_s),
                          np.where(chunked[:, None], mixed.weight_s, prefill.weight_s),
                          np.where(chunked, mixed.kernels, prefill.kernels), np.where(chunked, mixed.collectives, prefill.collectives),
                          np.where(chunked, mixed.sequences, prefill.sequences), prefill.num_gpus, prefill.tdp_w,
                          prefill.idle_w, prefill.mem_bw_bytes_per_s, prefill.moe, prefill.engines, prefill.node_nm,
                          prefill.peak16_ops_per_s, prefill.dram_pj_per_byte, prefill.linear_rate, prefill.host_synced)
    return SteadyShapes(decode, combined, np.array(batch, float), np.array(share, float), chunked, np.array(ctx, float),
                        np.array(starts, float))


@dataclass(frozen=True)
class SteadyState:
    """Per server: J per output token (all GPUs), mean time per output token (s), median
    inter-token latency (s), average power of all GPUs (W) and the running batch."""

    j_per_output_token: Array
    tpot_s: Array
    itl_median_s: Array
    power_w: Array
    batch: Array


def steady_state(x: SteadyShapes, params: StepParams, overheads: tuple | None = None) -> SteadyState:
    """The closed-form steady state of :class:`SteadyShapes` under ``params``."""
    oh = overheads if overheads is not None else overhead_arrays(x.decode.engines, params, online=True, num_gpus=x.decode.num_gpus)
    d = step_cost(x.decode, params, oh)
    p = step_cost(x.prefill, params, oh)
    phi = x.share
    t = np.where(x.chunked, (1.0 - phi) * d.time_s + phi * p.time_s, d.time_s + phi * p.time_s)
    e = np.where(x.chunked, (1.0 - phi) * d.energy_j + phi * p.energy_j, d.energy_j + phi * p.energy_j)
    # the median step starts no request while exp(-r) >= 1/2, the chance that none ends at a step
    itl = np.where(x.starts <= np.log(2.0), d.time_s, np.where(x.chunked, p.time_s, d.time_s + p.time_s))
    return SteadyState(e / x.batch, t, itl, e / t, x.batch)
