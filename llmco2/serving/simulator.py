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
    return _Simulation(workload, cost, config).run()


class _Simulation:
    """State of one :func:`simulate` run and its steps, one scheduler iteration (or decode run) at a time.

    Per request (arrays over requests, in workload order): token counts (``generated``,
    ``to_prefill``, ``in_kv``), times (s) and the energy (J) and GPU time (s) charged so far, all
    held by :attr:`out`. Server: the waiting queue, the admitted requests (``prefilling`` and
    ``running``, in admission order), the KV tokens in use (``used``), the clock ``t`` (s) and the
    idle energy (J) and time (s) not yet charged to an iteration.
    """

    def __init__(self, workload: Workload, cost: IterationCost, config: SchedulerConfig) -> None:
        n = len(workload)
        prompt, output = workload.prompt_tokens, workload.output_tokens
        too_long = prompt + output > config.kv_capacity_tokens
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise InvalidInputError(f"request {i} needs {prompt[i] + output[i]} KV tokens (prompt + output), more than the "
                                    f"{config.kv_capacity_tokens} tokens the server's KV cache holds", field="prompt_tokens")
        self.cost, self.config = cost, config
        self.n, self.prompt, self.output = n, prompt, output
        self.closed = workload.concurrency is not None
        self.arrival = np.full(n, np.inf) if self.closed else workload.arrival_s.copy()  # type: ignore[union-attr]
        self.issued = 0  # closed loop: requests sent so far
        if self.closed:
            self.issued = min(int(workload.concurrency), n)  # type: ignore[arg-type]
            self.arrival[:self.issued] = 0.0
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.energy = np.zeros(n)
        self.prefill_j = np.zeros(n)  # the part of energy_j charged for prompt tokens
        self.idle_share = np.zeros(n)  # the part of energy_j that is idle energy
        self.gpu_s = np.zeros(n)
        self.preempt = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)   # output tokens produced so far
        self.to_prefill = np.zeros(n, dtype=np.int64)  # prompt (+ recomputed) tokens still to prefill
        self.in_kv = np.zeros(n, dtype=np.int64)       # tokens held in the KV cache
        self.out = Schedule(self.arrival, self.first, self.finish, self.energy, self.prefill_j, self.idle_share, self.gpu_s,
                            self.preempt, prompt, output)
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []   # admitted, prefill not finished (admission order)
        self.running: list[int] = []      # decoding (admission order)
        self.nxt = 0                      # next request to arrive
        self.done = 0
        self.used = 0                     # KV tokens in use
        self.t = 0.0                      # clock (s)
        self.idle_j = 0.0                 # idle energy (J) and time (s) not yet charged
        self.idle_s = 0.0

    def run(self) -> Schedule:
        """Iterate until every request has finished; the filled :class:`Schedule`."""
        while self.done < self.n:
            self.admit()
            if not self.running and not self.prefilling:
                self.idle_until_next_arrival()
            elif self.prefilling:
                self.prefill_iteration()
            else:
                self.decode_run()
        if self.closed:
            self.out.arrival_s = self.arrival
        return self.out

    # -- admit ---------------------------------------------------------------------------------
    def admit(self) -> None:
        """Queue the requests that have arrived by ``t``, then admit waiting ones first-come
        first-served while the batch has room and the KV cache holds their prompt."""
        n, arrival, waiting, config = self.n, self.arrival, self.waiting, self.config
        while self.nxt < n and arrival[self.nxt] <= self.t:
            waiting.append(self.nxt)
            self.nxt += 1
        prefilling, running = self.prefilling, self.running
        while waiting and len(running) + len(prefilling) < config.max_batch:
            i = waiting[0]
            need = int(self.prompt[i] + self.generated[i])
            # room for the prompt and for the next token of every admitted sequence (a watermark that
            # keeps a just-preempted request from being readmitted into the same full cache)
            if self.used + need + len(running) + len(prefilling) + 1 > config.kv_capacity_tokens:
                break
            waiting.popleft()
            self.to_prefill[i] = need
            self.in_kv[i] = need  # the whole prompt is reserved at admission
            self.used += need
            prefilling.append(i)

    def idle_until_next_arrival(self) -> None:
        """Nothing to run: idle (at ``idle_w`` W) until the next arrival."""
        if self.nxt >= self.n:
            raise RuntimeError("scheduler stalled with requests left")  # pragma: no cover - invariant
        gap = float(self.arrival[self.nxt]) - self.t
        self.idle_j += gap * self.config.idle_w
        self.idle_s += gap
        self.t = float(self.arrival[self.nxt])

    # -- prefill (or mixed) iteration ----------------------------------------------------------
    def prefill_iteration(self) -> None:
        """One iteration that prefills prompt chunks (with the running decodes when chunked):
        schedule the chunk, cost it, attribute it, advance."""
        config, running = self.config, self.running
        if config.chunked_prefill and running and self.used + len(running) + len(self.prefilling) > config.kv_capacity_tokens:
            self.preempt_newest()  # no room for this iteration's new tokens
            return
        decoders = running if config.chunked_prefill else []
        chunk_ids, chunk_tokens = self.schedule_chunk(len(decoders))
        dec = np.asarray(decoders, dtype=np.int64)
        e, dt = self.cost_iteration(chunk_ids, chunk_tokens, dec)
        members = np.concatenate([np.asarray(chunk_ids, dtype=np.int64), dec])
        toks = np.concatenate([np.asarray(chunk_tokens, dtype=np.float64), np.ones(len(dec))])
        made = len(dec)
        end = self.t + dt
        for i, k in zip(chunk_ids, chunk_tokens, strict=True):
            self.to_prefill[i] -= k
            if self.to_prefill[i] == 0:
                made += 1
        self.attribute(members, toks, e, dt, 1, made, prefill_members=len(chunk_ids))
        self.t = end
        self.advance_prefill(chunk_ids, dec)

    def schedule_chunk(self, decoders: int) -> tuple[list[int], list[int]]:
        """Prompt chunks of this iteration: (requests, prompt tokens of each) within the token
        budget left by ``decoders`` decode tokens (whole prompts only without chunked prefill)."""
        config = self.config
        budget = max(config.max_batched_tokens - decoders, 1)
        chunk_ids: list[int] = []
        chunk_tokens: list[int] = []
        for i in self.prefilling:
            take = int(self.to_prefill[i])
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
        return chunk_ids, chunk_tokens

    def cost_iteration(self, chunk_ids: list[int], chunk_tokens: list[int], dec: NDArray[np.int64]) -> tuple[float, float]:
        """Energy (J) and duration (s) of a prefill iteration, mixed with the decodes ``dec`` if any."""
        ptoks = int(sum(chunk_tokens))
        if len(dec):
            ctx = float((self.prompt[dec] + self.generated[dec]).mean())
            return self.cost.mixed(len(chunk_ids), ptoks, len(dec), ctx)
        return self.cost.prefill(len(chunk_ids), ptoks)

    def advance_prefill(self, chunk_ids: list[int], dec: NDArray[np.int64]) -> None:
        """After a prefill iteration ending at ``t``: finished prompts yield their first token
        (and start decoding, or finish), the decodes ``dec`` one token each."""
        generated, in_kv, output = self.generated, self.in_kv, self.output
        for i in chunk_ids:
            if self.to_prefill[i] == 0:
                self.prefilling.remove(i)
                if generated[i] == 0:
                    self.first[i] = self.t
                generated[i] += 1
                in_kv[i] += 1
                self.used += 1
                if generated[i] >= output[i]:
                    self.complete(i)
                else:
                    self.running.append(i)
        if len(dec):
            generated[dec] += 1
            in_kv[dec] += 1
            self.used += len(dec)
            for i in dec[generated[dec] >= output[dec]].tolist():
                self.running.remove(i)
                self.complete(i)

    # -- decode run ----------------------------------------------------------------------------
    def decode_run(self) -> None:
        """Decode steps of the same batch until a completion, an admissible arrival or a full KV
        cache: schedule the run, cost it (one vectorised call), attribute it, advance."""
        config, output, generated, arrival = self.config, self.output, self.generated, self.arrival
        run = np.asarray(self.running, dtype=np.int64)
        d = len(run)
        free_steps = (config.kv_capacity_tokens - self.used) // d
        if free_steps < 1:
            self.preempt_newest()
            return
        steps = int(min((output[run] - generated[run]).min(), free_steps))
        ctx = np.asarray((self.prompt[run] + generated[run]).mean() + np.arange(steps), dtype=np.float64)
        e_k, t_k = self.cost.decode(d, ctx)
        cum = np.cumsum(t_k)
        nxt = self.nxt
        if nxt < self.n and d + len(self.prefilling) < config.max_batch and np.isfinite(arrival[nxt]):
            # stop after the step during which the next request arrives (it joins the next iteration)
            stop = int(np.searchsorted(cum, arrival[nxt] - self.t, side="left")) + 1
            steps = max(min(steps, stop), 1)
        e = float(e_k[:steps].sum())
        dt = float(cum[steps - 1])
        self.attribute(run, None, e, dt, steps, d * steps)
        self.t += dt
        self.advance_decode(run, steps)

    def advance_decode(self, run: NDArray[np.int64], steps: int) -> None:
        """After ``steps`` decode steps of ``run`` ending at ``t``: tokens, KV cache, completions."""
        generated, output = self.generated, self.output
        generated[run] += steps
        self.in_kv[run] += steps
        self.used += len(run) * steps
        for i in run[generated[run] >= output[run]].tolist():
            self.running.remove(i)
            self.complete(i)

    # -- attribute -----------------------------------------------------------------------------
    def attribute(self, members: NDArray[np.int64], tokens: NDArray[np.float64] | None, e: float, dt: float, iters: int,
                  made: int, prefill_members: int = 0) -> None:
        """Charge an event's energy ``e`` (J, + the idle spell before it) and duration ``dt`` (s) to
        ``members`` by ``tokens`` (None: equal shares); log the event (starting at ``t``)."""
        idle_j, idle_s, out = self.idle_j, self.idle_s, self.out
        share: NDArray[np.float64] | float = 1.0 / len(members) if tokens is None else tokens / tokens.sum()
        self.energy[members] += (e + idle_j) * share
        self.idle_share[members] += idle_j * share
        if prefill_members:  # the first ``prefill_members`` members process prompt tokens
            self.prefill_j[members[:prefill_members]] += (e + idle_j) * share[:prefill_members]  # type: ignore[index]
        self.gpu_s[members] += (dt + idle_s) * share
        t = self.t
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
        self.idle_j = self.idle_s = 0.0

    # -- completions and preemption ------------------------------------------------------------
    def complete(self, i: int) -> None:
        """Request ``i`` finishes at ``t``: free its KV cache; closed loop: its client sends the next request."""
        self.finish[i] = self.t
        self.used -= int(self.in_kv[i])
        self.in_kv[i] = 0
        self.done += 1
        if self.closed and self.issued < self.n:
            self.arrival[self.issued] = self.t
            self.issued += 1

    def preempt_newest(self) -> None:
        """Preempt the most recently admitted running request (recomputed when readmitted)."""
        victim = self.running.pop()  # most recently admitted
        self.used -= int(self.in_kv[victim])
        self.in_kv[victim] = 0
        self.preempt[victim] += 1
        self.waiting.appendleft(victim)
