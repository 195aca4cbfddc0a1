"""A straightforward reference of the serving simulator and of the grid's scalar costs, for the
equivalence tests of the optimised paths (:mod:`tests.test_serving_fast`).

:func:`reference_simulate` follows the scheduler of :mod:`llmco2.serving.simulator` one event at a
time and charges every member of every event its share directly (arrays over requests, no lazy
settlement); each decode run is costed with :meth:`IterationCost.decode` on all of its contexts.
:class:`ArrayGridCost` costs prefills and mixed iterations of a :class:`GridCostModel` through its
array interpolation (``_lookup``) instead of its cached power-law rows (a grid without merged-step
work: a mixed iteration is the prefill plus the decode step's cost beyond one sequence's first step).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from llmco2.serving import GridCostModel, Schedule, SchedulerConfig, Workload


class ArrayGridCost:
    """A :class:`GridCostModel` costed through its array interpolation only (J, s)."""

    def __init__(self, grid: GridCostModel) -> None:
        self.grid = grid

    def prefill(self, num_seqs: int, tokens: int) -> tuple[float, float]:
        n = max(int(num_seqs), 1)
        e, t = self.grid._lookup("prefill", n, np.array([tokens / n]))
        extra = max(n / self.grid.batches[-1], 1.0)
        return float(e[0] * extra), float(t[0] * extra)

    def decode(self, batch: int, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.grid.decode(batch, context)

    def mixed(self, num_seqs: int, tokens: int, decode_batch: int, context: float) -> tuple[float, float]:
        e, t = self.prefill(num_seqs, tokens)
        if decode_batch:
            de, dt = self.decode(decode_batch, np.array([context]))
            de1, dt1 = self.decode(1, np.array([self.grid.contexts[0]]))
            e += max(de[0] - de1[0], 0.0)
            t += max(dt[0] - dt1[0], 0.0)
        return e, t


def reference_simulate(workload: Workload, cost, config: SchedulerConfig) -> Schedule:  # noqa: C901 - one loop, kept whole
    """The schedule of ``workload`` (same scheduler as :func:`llmco2.serving.simulate`), charged event by event."""
    n, prompt, output = len(workload), workload.prompt_tokens, workload.output_tokens
    closed = workload.concurrency is not None
    arrival = np.full(n, np.inf) if closed else workload.arrival_s.copy()
    issued = min(int(workload.concurrency), n) if closed else 0
    arrival[:issued] = 0.0
    s = Schedule(arrival, np.full(n, np.nan), np.full(n, np.nan), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n),
                 np.zeros(n, dtype=np.int64), prompt, output)
    generated, to_prefill, in_kv = (np.zeros(n, dtype=np.int64) for _ in range(3))
    waiting: deque[int] = deque()
    prefilling: list[int] = []
    running: list[int] = []
    nxt = done = used = 0
    t = idle_j = idle_s = 0.0

    def charge(members, tokens, e, dt, iters, made, prefill_members=0):
        nonlocal idle_j, idle_s
        share = 1.0 / len(members) if tokens is None else tokens / tokens.sum()
        s.energy_j[members] += (e + idle_j) * share
        s.idle_share_j[members] += idle_j * share
        if prefill_members:
            s.prefill_j[members[:prefill_members]] += (e + idle_j) * share[:prefill_members]
        s.gpu_s[members] += (dt + idle_s) * share
        for lst, v in ((s.log_start_s, t), (s.log_end_s, t + dt), (s.log_energy_j, e + idle_j), (s.log_idle_j, idle_j),
                       (s.log_tokens, made), (s.log_iterations, iters), (s.log_batch, len(members))):
            lst.append(v)
        s.idle_j += idle_j
        s.busy_s += dt
        s.iterations += iters
        idle_j = idle_s = 0.0

    def complete(i):
        nonlocal used, done, issued
        s.finish_s[i] = t
        used -= int(in_kv[i])
        in_kv[i] = 0
        done += 1
        if closed and issued < n:
            arrival[issued] = t
            issued += 1

    def preempt():
        nonlocal used
        victim = running.pop()
        used -= int(in_kv[victim])
        in_kv[victim] = 0
        s.preemptions[victim] += 1
        waiting.appendleft(victim)

    while done < n:
        while nxt < n and arrival[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting and len(running) + len(prefilling) < config.max_batch:
            i = waiting[0]
            need = int(prompt[i] + generated[i])
            if used + need + len(running) + len(prefilling) + 1 > config.kv_capacity_tokens:
                break
            waiting.popleft()
            to_prefill[i] = in_kv[i] = need
            used += need
            prefilling.append(i)
        if not running and not prefilling:  # idle until the next arrival
            idle_j += (float(arrival[nxt]) - t) * config.idle_w
            idle_s += float(arrival[nxt]) - t
            t = float(arrival[nxt])
        elif prefilling:
            if config.chunked_prefill and running and used + len(running) + len(prefilling) > config.kv_capacity_tokens:
                preempt()
                continue
            dec = np.asarray(running if config.chunked_prefill else [], dtype=np.int64)
            budget = max(config.max_batched_tokens - len(dec), 1)
            chunk_ids, chunk_tokens = [], []
            for i in prefilling:
                take = int(to_prefill[i])
                if config.chunked_prefill:
                    take = min(take, budget)
                elif chunk_ids and take > budget:
                    break
                chunk_ids.append(i)
                chunk_tokens.append(take)
                budget -= take
                if budget <= 0:
                    break
            if len(dec):
                ctx = float((prompt[dec] + generated[dec]).mean())
                e, dt = cost.mixed(len(chunk_ids), sum(chunk_tokens), len(dec), ctx)
            else:
                e, dt = cost.prefill(len(chunk_ids), sum(chunk_tokens))
            for i, k in zip(chunk_ids, chunk_tokens, strict=True):
                to_prefill[i] -= k
            made = len(dec) + sum(int(to_prefill[i] == 0) for i in chunk_ids)
            charge(np.concatenate([np.asarray(chunk_ids, dtype=np.int64), dec]),
                   np.concatenate([np.asarray(chunk_tokens, dtype=np.float64), np.ones(len(dec))]), e, dt, 1, made,
                   prefill_members=len(chunk_ids))
            t += dt
            for i in chunk_ids:
                if to_prefill[i] == 0:
                    prefilling.remove(i)
                    if generated[i] == 0:
                        s.first_token_s[i] = t
                    generated[i] += 1
                    in_kv[i] += 1
                    used += 1
                    if generated[i] >= output[i]:
                        complete(i)
                    else:
                        running.append(i)
            if len(dec):
                generated[dec] += 1
                in_kv[dec] += 1
                used += len(dec)
                for i in dec[generated[dec] >= output[dec]].tolist():
                    running.remove(i)
                    complete(i)
        else:  # a run of decode steps
            run = np.asarray(running, dtype=np.int64)
            d = len(run)
            free_steps = (config.kv_capacity_tokens - used) // d
            if free_steps < 1:
                preempt()
                continue
            steps = int(min((output[run] - generated[run]).min(), free_steps))
            e_k, t_k = cost.decode(d, np.asarray((prompt[run] + generated[run]).mean() + np.arange(steps), dtype=np.float64))
            cum = np.cumsum(t_k)
            if nxt < n and d + len(prefilling) < config.max_batch and np.isfinite(arrival[nxt]):
                steps = max(min(steps, int(np.searchsorted(cum, arrival[nxt] - t, side="left")) + 1), 1)
            charge(run, None, float(e_k[:steps].sum()), float(cum[steps - 1]), steps, d * steps)
            t += float(cum[steps - 1])
            generated[run] += steps
            in_kv[run] += steps
            used += d * steps
            for i in run[generated[run] >= output[run]].tolist():
                running.remove(i)
                complete(i)
    s.arrival_s = arrival
    return s
