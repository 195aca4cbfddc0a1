"""Iteration-level continuous batching (vLLM-style), simulated event to event.

Scheduler, per iteration:

* Waiting requests are admitted first-come first-served while the running batch is below
  ``max_batch`` and the KV cache holds their prompt (``kv_capacity_tokens``; a request occupies
  its prompt, reserved at admission, plus the tokens generated so far).
* If any admitted request still has prompt tokens to prefill, the iteration prefills: with
  ``chunked_prefill`` up to ``max_batched_tokens`` tokens (decode tokens of the running requests
  included, as vLLM's chunked prefill does), otherwise whole prompts only and no decodes (vLLM's
  default scheduler without chunked prefill).
* Otherwise every running request decodes one token. Steps between two events (a completion, an
  arrival that can be admitted, a full KV cache) have the same batch, so a run of them is costed
  in one vectorised call with the context growing by one token per step.
* When the KV cache is full, the most recently admitted request is preempted and recomputed later
  (its prefill then covers prompt plus the tokens it had generated), as vLLM's recompute mode does.

Energy: each iteration's energy is split over its requests in proportion to the tokens each one
processes in it (prefill chunk tokens, or 1 per decode). The server idles at ``idle_w`` while
no request is in it; that idle energy goes to the iteration that ends the idle spell. Summed over
requests, energies therefore equal the simulated GPU energy exactly (busy + idle). GPU time is
attributed the same way (for embodied carbon).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.serving.costs import IterationCost
from llmco2.serving.workload import Workload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulerConfig:
    """Engine limits.

    Attributes:
        max_batch: most sequences in one iteration (vLLM ``max_num_seqs``, default 256).
        max_batched_tokens: token budget of one iteration (vLLM ``max_num_batched_tokens``).
        chunked_prefill: split prompts into chunks mixed with decodes (vLLM V1) or prefill whole
            prompts in prefill-only iterations (vLLM V0 default).
        kv_capacity_tokens: KV-cache capacity of the server (tokens).
        idle_w: power of the server's GPUs while no request is in it (W).
    """

    max_batch: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    kv_capacity_tokens: int = 10**9
    idle_w: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_batched_tokens", "kv_capacity_tokens"):
            if int(getattr(self, name)) < 1:
                raise InvalidInputError(f"must be >= 1, got {getattr(self, name)}", field=name)
        if self.idle_w < 0:
            raise InvalidInputError(f"must be >= 0 W, got {self.idle_w}", field="idle_w")


@dataclass
class Schedule:
    """Per-request outcome (arrays over requests, in workload order) and the iteration log.

    Times in s from the start, energies in J (all GPUs); ``prefill_j`` is the part of ``energy_j``
    charged for the request's prompt tokens (the rest is decode), ``idle_share_j`` the part that is
    idle energy. ``log_*`` hold one entry per costed event
    (one prefill iteration, or one run of decode steps): start and end time, energy incl. the idle
    spell before it, that idle energy, output tokens produced, iterations, batch size.
    """

    arrival_s: NDArray[np.float64]
    first_token_s: NDArray[np.float64]
    finish_s: NDArray[np.float64]
    energy_j: NDArray[np.float64]
    prefill_j: NDArray[np.float64]
    idle_share_j: NDArray[np.float64]
    gpu_s: NDArray[np.float64]
    preemptions: NDArray[np.int64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    idle_j: float = 0.0
    busy_s: float = 0.0
    iterations: int = 0
    log_start_s: list[float] = field(default_factory=list)
    log_end_s: list[float] = field(default_factory=list)
    log_energy_j: list[float] = field(default_factory=list)
    log_idle_j: list[float] = field(default_factory=list)
    log_tokens: list[int] = field(default_factory=list)
    log_iterations: list[int] = field(default_factory=list)
    log_batch: list[int] = field(default_factory=list)

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max())

    @property
    def total_energy_j(self) -> float:
        return float(sum(self.log_energy_j))


def simulate(workload: Workload, cost: IterationCost, config: SchedulerConfig) -> Schedule:
    """Run ``workload`` through the scheduler; every request finishes (deterministic: no randomness here)."""
    n = len(workload)
    prompt, output = workload.prompt_tokens, workload.output_tokens
    too_long = prompt + output > config.kv_capacity_tokens
    if too_long.any():
        i = int(np.flatnonzero(too_long)[0])
        raise InvalidInputError(f"request {i} needs {prompt[i] + output[i]} KV tokens (prompt + output), more than the "
                                f"{config.kv_capacity_tokens} tokens the server's KV cache holds", field="prompt_tokens")
    closed = workload.concurrency is not None
    arrival = np.full(n, np.inf) if closed else workload.arrival_s.copy()  # type: ignore[union-attr]
    issued = 0
    if closed:
        issued = min(int(workload.concurrency), n)  # type: ignore[arg-type]
        arrival[:issued] = 0.0
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    energy = np.zeros(n)
    prefill_j = np.zeros(n)  # the part of energy_j charged for prompt tokens
    idle_share = np.zeros(n)  # the part of energy_j that is idle energy
    gpu_s = np.zeros(n)
    preempt = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)   # output tokens produced so far
    to_prefill = np.zeros(n, dtype=np.int64)  # prompt (+ recomputed) tokens still to prefill
    in_kv = np.zeros(n, dtype=np.int64)       # tokens held in the KV cache
    out = Schedule(arrival, first, finish, energy, prefill_j, idle_share, gpu_s, preempt, prompt, output)

    waiting: deque[int] = deque()
    prefilling: list[int] = []   # admitted, prefill not finished (admission order)
    running: list[int] = []      # decoding (admission order)
    nxt = 0                      # next request to arrive
    done = 0
    used = 0                     # KV tokens in use
    t = 0.0
    idle_j = idle_s = 0.0

    def account(members: NDArray[np.int64], tokens: NDArray[np.float64] | None, e: float, dt: float, iters: int, made: int,
                prefill_members: int = 0) -> None:
        """Charge an event's energy (+ the idle spell before it) to ``members`` by ``tokens`` (None: equal shares)."""
        nonlocal idle_j, idle_s
        share: NDArray[np.float64] | float = 1.0 / len(members) if tokens is None else tokens / tokens.sum()
        energy[members] += (e + idle_j) * share
        idle_share[members] += idle_j * share
        if prefill_members:  # the first ``prefill_members`` members process prompt tokens
            prefill_j[members[:prefill_members]] += (e + idle_j) * share[:prefill_members]  # type: ignore[index]
        gpu_s[members] += (dt + idle_s) * share
        out.log_start_s.append(t)
        out.log_end_s.append(t + dt)
        out.log_energy_j.append(e + idle_j)
        out.log_idle_j.append(idle_j)
        out.log_tokens.append(made)
        out.log_iterations.append(iters)
        out.log_batch.append(len(members))
        out.idle_j += idle_j
        out.busy_s += dt
        out.iterations += iters
        idle_j = idle_s = 0.0

    def complete(i: int, when: float) -> None:
        nonlocal done, used, issued
        finish[i] = when
        used -= int(in_kv[i])
        in_kv[i] = 0
        done += 1
        if closed and issued < n:
            arrival[issued] = when
            issued += 1

    def preempt_newest() -> None:
        nonlocal used
        victim = running.pop()  # most recently admitted
        used -= int(in_kv[victim])
        in_kv[victim] = 0
        preempt[victim] += 1
        waiting.appendleft(victim)

    while done < n:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting and len(running) + len(prefilling) < config.max_batch:
            i = waiting[0]
            need = int(prompt[i] + generated[i])
            # room for the prompt and for the next token of every admitted sequence (a watermark that
            # keeps a just-preempted request from being readmitted into the same full cache)
            if used + need + len(running) + len(prefilling) + 1 > config.kv_capacity_tokens:
                break
            waiting.popleft()
            to_prefill[i] = need
            in_kv[i] = need  # the whole prompt is reserved at admission
            used += need
            prefilling.append(i)
        if not running and not prefilling:
            if nxt >= n:
                raise RuntimeError("scheduler stalled with requests left")  # pragma: no cover - invariant
            gap = float(arrival[nxt]) - t
            idle_j += gap * config.idle_w
            idle_s += gap
            t = float(arrival[nxt])
            continue
        if prefilling:
            if config.chunked_prefill and running and used + len(running) + len(prefilling) > config.kv_capacity_tokens:
                preempt_newest()  # no room for this iteration's new tokens
                continue
            decoders = running if config.chunked_prefill else []
            budget = max(config.max_batched_tokens - len(decoders), 1)
            chunk_ids, chunk_tokens = [], []
            for i in prefilling:
                take = int(to_prefill[i])
                if config.chunked_prefill:
                    take = min(take, budget)
                elif chunk_ids and take > budget:
                    break
                if take <= 0:
                    break
                chunk_ids.append(i)
                chunk_tokens.append(take)
                budget -= take
                if budget <= 0:
                    break
            ptoks = int(sum(chunk_tokens))
            dec = np.asarray(decoders, dtype=np.int64)
            if len(dec):
                ctx = float((prompt[dec] + generated[dec]).mean())
                e, dt = cost.mixed(len(chunk_ids), ptoks, len(dec), ctx)
            else:
                e, dt = cost.prefill(len(chunk_ids), ptoks)
            members = np.concatenate([np.asarray(chunk_ids, dtype=np.int64), dec])
            toks = np.concatenate([np.asarray(chunk_tokens, dtype=np.float64), np.ones(len(dec))])
            made = len(dec)
            end = t + dt
            for i, k in zip(chunk_ids, chunk_tokens, strict=True):
                to_prefill[i] -= k
                if to_prefill[i] == 0:
                    made += 1
            account(members, toks, e, dt, 1, made, prefill_members=len(chunk_ids))
            t = end
            for i in chunk_ids:
                if to_prefill[i] == 0:
                    prefilling.remove(i)
                    if generated[i] == 0:
                        first[i] = t
                    generated[i] += 1
                    in_kv[i] += 1
                    used += 1
                    if generated[i] >= output[i]:
                        complete(i, t)
                    else:
                        running.append(i)
            if len(dec):
                generated[dec] += 1
                in_kv[dec] += 1
                used += len(dec)
                for i in dec[generated[dec] >= output[dec]].tolist():
                    running.remove(i)
                    complete(i, t)
            continue
        # decode run: the same batch until a completion, an admissible arrival or a full KV cache
        run = np.asarray(running, dtype=np.int64)
        d = len(run)
        free_steps = (config.kv_capacity_tokens - used) // d
        if free_steps < 1:
            preempt_newest()
            continue
        steps = int(min((output[run] - generated[run]).min(), free_steps))
        ctx = np.asarray((prompt[run] + generated[run]).mean() + np.arange(steps), dtype=np.float64)
        e_k, t_k = cost.decode(d, ctx)
        cum = np.cumsum(t_k)
        if nxt < n and d + len(prefilling) < config.max_batch and np.isfinite(arrival[nxt]):
            # stop after the step during which the next request arrives (it joins the next iteration)
            stop = int(np.searchsorted(cum, arrival[nxt] - t, side="left")) + 1
            steps = max(min(steps, stop), 1)
        e = float(e_k[:steps].sum())
        dt = float(cum[steps - 1])
        account(run, None, e, dt, steps, d * steps)
        t += dt
        generated[run] += steps
        in_kv[run] += steps
        used += d * steps
        for i in run[generated[run] >= output[run]].tolist():
            running.remove(i)
            complete(i, t)
    if closed:
        out.arrival_s = arrival
    return out
