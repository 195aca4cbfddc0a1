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
  in one call with the context growing by one token per step (:func:`~llmco2.serving.costs.decode_runner`).
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
import math
from collections import deque
from heapq import heappop, heappush

import numpy as np

from llmco2.errors import InvalidInputError
from llmco2.serving.costs import IterationCost, decode_runner
from llmco2.serving.schedule import Schedule, SchedulerConfig
from llmco2.serving.workload import Workload

log = logging.getLogger(__name__)


def simulate(workload: Workload, cost: IterationCost, config: SchedulerConfig) -> Schedule:
    """Run ``workload`` through the scheduler; every request finishes (deterministic: no randomness here)."""
    return _Simulation(workload, cost, config).run()


class _Simulation:
    """State of one :func:`simulate` run and its steps, one scheduler iteration (or decode run) at a time.

    Per request (lists over requests, in workload order): token counts (``generated``,
    ``to_prefill``, ``in_kv``; ``in_kv`` equals prompt + generated while admitted), times (s) and
    the energy (J) and GPU time (s) charged so far. Server: the waiting queue, the admitted requests
    (``prefilling`` in admission order, ``running`` in the order they started decoding), the KV
    tokens in use (``used``), the clock ``t`` (s) and the idle energy (J) and time (s) not yet
    charged to an iteration.

    Running requests are settled lazily: every iteration that decodes treats all of them alike (one
    token each, the same share of the iteration), so the server counts per running sequence the
    decode tokens (``steps_done``), energy (``run_j``, J), idle energy (``run_idle_j``, J) and GPU
    time (``run_s``, s) so far, and a request takes the difference to its snapshot from when it
    started decoding (``join_*``) when it leaves the batch (completion or preemption). A heap orders
    running requests by the ``steps_done`` at which they finish (``finish_step``, -1 when not running).
    """

    def __init__(self, workload: Workload, cost: IterationCost, config: SchedulerConfig) -> None:
        n = len(workload)
        prompt, output = workload.prompt_tokens, workload.output_tokens
        too_long = prompt + output > config.kv_capacity_tokens
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise InvalidInputError(f"request {i} needs {prompt[i] + output[i]} KV tokens (prompt + output), more than the "
                                    f"{config.kv_capacity_tokens} tokens the server's KV cache holds", field="prompt_tokens")
        self.cost, self.config, self.decode_cost = cost, config, decode_runner(cost)
        self.n, self.workload = n, workload
        self.prompt: list[int] = prompt.tolist()
        self.output: list[int] = output.tolist()
        self.closed = workload.concurrency is not None
        self.issued = min(int(workload.concurrency), n) if self.closed else 0  # type: ignore[arg-type]  # closed loop: sent so far
        self.arrival: list[float] = ([0.0] * self.issued + [math.inf] * (n - self.issued) if self.closed
                                     else workload.arrival_s.tolist())  # type: ignore[union-attr]
        self.first, self.finish = [math.nan] * n, [math.nan] * n
        self.energy, self.prefill_j, self.idle_share, self.gpu_s = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
        self.preempt = [0] * n
        self.generated = [0] * n   # output tokens produced so far (as of joining the running batch while running)
        self.to_prefill = [0] * n  # prompt (+ recomputed) tokens still to prefill
        self.in_kv = [0] * n       # tokens held in the KV cache (as of joining the running batch while running)
        self.join_step, self.finish_step = [0] * n, [-1] * n
        self.join_j, self.join_idle_j, self.join_s = [0.0] * n, [0.0] * n, [0.0] * n
        self.heap: list[tuple[int, int]] = []  # (finish_step, request) of running requests (stale ones skipped)
        self.steps_done, self.run_kv = 0, 0   # decode tokens per running sequence; KV tokens of running requests
        self.run_j = self.run_idle_j = self.run_s = 0.0
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.running: dict[int, None] = {}  # insertion-ordered: the newest is popped on preemption
        self.nxt = self.done = self.used = 0  # next request to arrive, finished requests, KV tokens in use
        self.t = self.idle_j = self.idle_s = 0.0
        self.logs: tuple[list[float], list[float], list[float], list[float], list[int], list[int], list[int]] = (
            [], [], [], [], [], [], [])
        self.iterations, self.busy_s, self.idle_total_j = 0, 0.0, 0.0

    def run(self) -> Schedule:
        """Iterate until every request has finished; the filled :class:`Schedule`."""
        while self.done < self.n:
            self.admit()
            if self.prefilling:
                self.prefill_iteration()
            elif self.running:
                self.decode_run()
            else:
                self.idle_until_next_arrival()
        w, lg = self.workload, self.logs
        arrival = np.array(self.arrival) if self.closed else w.arrival_s.copy()  # type: ignore[union-attr]
        return Schedule(arrival, np.array(self.first), np.array(self.finish), np.array(self.energy), np.array(self.prefill_j),
                        np.array(self.idle_share), np.array(self.gpu_s), np.array(self.preempt, dtype=np.int64),
                        w.prompt_tokens, w.output_tokens, self.idle_total_j, self.busy_s, self.iterations, *lg)

    # -- admit ---------------------------------------------------------------------------------
    def admit(self) -> None:
        """Queue the requests that have arrived by ``t``, then admit waiting ones first-come
        first-served while the batch has room and the KV cache holds their prompt."""
        n, arrival, waiting, t, nxt = self.n, self.arrival, self.waiting, self.t, self.nxt
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        self.nxt = nxt
        prefilling, running, config = self.prefilling, self.running, self.config
        while waiting and (admitted := len(running) + len(prefilling)) < config.max_batch:
            i = waiting[0]
            need = self.prompt[i] + self.generated[i]
            # room for the prompt and for the next token of every admitted sequence (a watermark that
            # keeps a just-preempted request from being readmitted into the same full cache)
            if self.used + need + admitted + 1 > config.kv_capacity_tokens:
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
        arrival = self.arrival[self.nxt]
        gap = arrival - self.t
        self.idle_j += gap * self.config.idle_w
        self.idle_s += gap
        self.t = arrival

    # -- prefill (or mixed) iteration ----------------------------------------------------------
    def prefill_iteration(self) -> None:
        """One iteration that prefills prompt chunks (with the running decodes when chunked):
        schedule the chunk, cost it, attribute it, advance."""
        config, prefilling = self.config, self.prefilling
        nd = len(self.running) if config.chunked_prefill else 0  # decode tokens in this iteration
        if nd and self.used + nd + len(prefilling) > config.kv_capacity_tokens:
            self.preempt_newest()  # no room for this iteration's new tokens
            return
        chunk_ids, chunk_tokens = self.schedule_chunk(nd)
        ptoks = sum(chunk_tokens)
        if nd:
            e, dt = self.cost.mixed(len(chunk_ids), ptoks, nd, self.run_kv / nd)
        else:
            e, dt = self.cost.prefill(len(chunk_ids), ptoks)
        # charge by tokens: the chunk's prompt tokens, one per decode
        idle_j = self.idle_j
        ej, sj, total = e + idle_j, dt + self.idle_s, float(ptoks + nd)
        energy, prefill_j, idle_share, gpu_s, to_prefill = self.energy, self.prefill_j, self.idle_share, self.gpu_s, self.to_prefill
        made = nd
        for i, k in zip(chunk_ids, chunk_tokens, strict=True):
            share = k / total
            energy[i] += ej * share
            prefill_j[i] += ej * share
            idle_share[i] += idle_j * share
            gpu_s[i] += sj * share
            to_prefill[i] -= k
            if to_prefill[i] == 0:
                made += 1
        if nd:
            self.charge_running(ej, idle_j, sj, 1.0 / total)
        self.log_event(e, dt, 1, made, len(chunk_ids) + nd)
        self.t += dt
        if nd:  # every running sequence decoded one token
            self.steps_done += 1
            self.used += nd
            self.run_kv += nd
        self.advance_prefill(chunk_ids)
        if nd:
            self.complete_finished()

    def schedule_chunk(self, decoders: int) -> tuple[list[int], list[int]]:
        """Prompt chunks of this iteration: (requests, prompt tokens of each) within the token
        budget left by ``decoders`` decode tokens (whole prompts only without chunked prefill)."""
        config, to_prefill = self.config, self.to_prefill
        budget = max(config.max_batched_tokens - decoders, 1)
        chunk_ids: list[int] = []
        chunk_tokens: list[int] = []
        for i in self.prefilling:
            take = to_prefill[i]
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

    def advance_prefill(self, chunk_ids: list[int]) -> None:
        """After a prefill iteration ending at ``t``: finished prompts yield their first token
        (and start decoding, or finish)."""
        generated, in_kv, output, to_prefill = self.generated, self.in_kv, self.output, self.to_prefill
        for i in chunk_ids:
            if to_prefill[i] == 0:
                self.prefilling.remove(i)
                if generated[i] == 0:
                    self.first[i] = self.t
                generated[i] += 1
                in_kv[i] += 1
                self.used += 1
                if generated[i] >= output[i]:
                    self.complete(i)
                else:
                    self.start_decoding(i)

    # -- decode run ----------------------------------------------------------------------------
    def decode_run(self) -> None:
        """Decode steps of the same batch until a completion, an admissible arrival or a full KV
        cache: schedule the run, cost it (one call), attribute it, advance."""
        config, heap, finish_step = self.config, self.heap, self.finish_step
        d = len(self.running)
        free_steps = (config.kv_capacity_tokens - self.used) // d
        if free_steps < 1:
            self.preempt_newest()
            return
        while finish_step[heap[0][1]] != heap[0][0]:
            heappop(heap)  # a preempted request's entry
        steps = min(heap[0][0] - self.steps_done, free_steps)
        limit = math.inf
        if self.nxt < self.n and d + len(self.prefilling) < config.max_batch:
            # stop after the step during which the next request arrives (it joins the next iteration)
            limit = self.arrival[self.nxt] - self.t  # inf while a closed-loop request is not yet sent
        steps, e, dt = self.decode_cost(d, self.run_kv / d, steps, limit)
        idle_j = self.idle_j
        self.charge_running(e + idle_j, idle_j, dt + self.idle_s, 1.0 / d)
        self.log_event(e, dt, steps, d * steps, d)
        self.t += dt
        self.steps_done += steps
        self.used += d * steps
        self.run_kv += d * steps
        self.complete_finished()

    # -- attribute -----------------------------------------------------------------------------
    def charge_running(self, e: float, idle_j: float, s: float, share: float) -> None:
        """Charge every running request ``share`` of energy ``e`` (J), idle energy ``idle_j`` (J) and time ``s`` (s)."""
        self.run_j += e * share
        self.run_idle_j += idle_j * share
        self.run_s += s * share

    def log_event(self, e: float, dt: float, iters: int, made: int, batch: int) -> None:
        """Log an event of energy ``e`` (J, + the idle spell before it) and duration ``dt`` (s)
        starting at ``t``; the idle spell is charged."""
        t, idle_j, lg = self.t, self.idle_j, self.logs
        lg[0].append(t)
        lg[1].append(t + dt)
        lg[2].append(e + idle_j)
        lg[3].append(idle_j)
        lg[4].append(made)
        lg[5].append(iters)
        lg[6].append(batch)
        self.idle_total_j += idle_j
        self.busy_s += dt
        self.iterations += iters
        self.idle_j = self.idle_s = 0.0

    # -- joining and leaving the running batch, completions, preemption -------------------------
    def start_decoding(self, i: int) -> None:
        """Request ``i`` joins the running batch (snapshot of the per-sequence counters)."""
        self.running[i] = None
        steps_done = self.steps_done
        self.join_step[i] = steps_done
        self.join_j[i], self.join_idle_j[i], self.join_s[i] = self.run_j, self.run_idle_j, self.run_s
        finish = steps_done + self.output[i] - self.generated[i]
        self.finish_step[i] = finish
        heappush(self.heap, (finish, i))
        self.run_kv += self.in_kv[i]

    def leave(self, i: int) -> None:
        """Settle request ``i``'s tokens and charges since it started decoding (it leaves the running batch)."""
        steps = self.steps_done - self.join_step[i]
        self.generated[i] += steps
        self.in_kv[i] += steps
        self.energy[i] += self.run_j - self.join_j[i]
        self.idle_share[i] += self.run_idle_j - self.join_idle_j[i]
        self.gpu_s[i] += self.run_s - self.join_s[i]
        self.run_kv -= self.in_kv[i]
        self.finish_step[i] = -1

    def complete_finished(self) -> None:
        """Complete the running requests that have generated all their tokens by now."""
        heap, finish_step, steps_done = self.heap, self.finish_step, self.steps_done
        while heap and heap[0][0] <= steps_done:
            finish, i = heappop(heap)
            if finish_step[i] == finish:
                self.leave(i)
                del self.running[i]
                self.complete(i)

    def complete(self, i: int) -> None:
        """Request ``i`` (not running) finishes at ``t``: free its KV cache; closed loop: its client sends the next request."""
        self.finish[i] = self.t
        self.used -= self.in_kv[i]
        self.in_kv[i] = 0
        self.done += 1
        if self.closed and self.issued < self.n:
            self.arrival[self.issued] = self.t
            self.issued += 1

    def preempt_newest(self) -> None:
        """Preempt the most recently admitted running request (recomputed when readmitted)."""
        victim = self.running.popitem()[0]  # most recently admitted
        self.leave(victim)
        self.used -= self.in_kv[victim]
        self.in_kv[victim] = 0
        self.preempt[victim] += 1
        self.waiting.appendleft(victim)
