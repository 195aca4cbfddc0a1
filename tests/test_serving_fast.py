"""The optimised serving paths against straightforward references, on a hand-built cost grid:

* the grid's scalar costs (power-law rows: prefill, mixed, a run of decode steps with its arrival
  cut-off) equal the array interpolation, step by step;
* the simulator (lazy settlement of running requests, scalar decode runs) gives the schedule of the
  event-by-event reference (:mod:`tests.serving_reference`) for chunked and whole prefills, KV
  preemptions, batch caps, closed loops, idle power, energy scales and latency calibrations.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmco2.serving import GridCostModel, SchedulerConfig, Workload, poisson_arrivals, simulate
from llmco2.serving.costs import decode_runner
from tests.serving_reference import ArrayGridCost, reference_simulate
from tests.test_serving import LinearCost

FLOATS = ("arrival_s", "first_token_s", "finish_s", "energy_j", "prefill_j", "idle_share_j", "gpu_s", "log_start_s",
          "log_end_s", "log_energy_j", "log_idle_j")
INTS = ("preemptions", "log_tokens", "log_iterations", "log_batch")


def _grid(**kw) -> GridCostModel:
    """A smooth hand-made grid: batches 1..64, contexts 16..4096 (a kink in the middle of the
    context axis, so that power-law segments differ)."""
    b = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    c = np.array([16.0, 64.0, 256.0, 1024.0, 4096.0])
    bb, cc = np.meshgrid(b, c, indexing="ij")
    pre_t = 0.004 + 2e-5 * bb * cc + 1e-9 * bb * cc**2
    pre_e = 400.0 * pre_t + 0.5
    dec_t = 0.008 + 2e-4 * bb + 3e-8 * bb * cc**1.3
    dec_e = 250.0 * dec_t * (1.0 + 0.1 * np.log(bb)) + 1e-4 * cc
    return GridCostModel(b, c, pre_e, pre_t, dec_e, dec_t, idle_w=90.0, tdp_w=700.0, **kw)


GRIDS = [_grid(), _grid(energy_scale=1.3, num_gpus=2, decode_time_coef=(0.1, -0.05, 0.02, 0.01), batch_range=(2.0, 48.0))]


@pytest.mark.parametrize("grid", GRIDS)
def test_scalar_costs_equal_the_array_interpolation(grid):
    ref = ArrayGridCost(grid)
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, tokens = int(rng.integers(1, 200)), int(rng.integers(1, 20_000))
        assert grid.prefill(n, tokens) == pytest.approx(ref.prefill(n, tokens), rel=1e-12)
        d, ctx = int(rng.integers(1, 150)), float(rng.uniform(1.0, 6000.0))
        assert grid.mixed(n, tokens, d, ctx) == pytest.approx(ref.mixed(n, tokens, d, ctx), rel=1e-12)
        assert grid.mixed(n, tokens, 0, ctx) == pytest.approx(ref.mixed(n, tokens, 0, ctx), rel=1e-12)


@pytest.mark.parametrize("grid", GRIDS)
def test_decode_run_equals_the_sum_of_per_step_lookups(grid):
    generic = decode_runner(ArrayGridCost(grid))  # decode() on all contexts, cumsum, cut-off by searchsorted
    rng = np.random.default_rng(1)
    # runs crossing grid contexts (64, 256, 4096), starting below the grid and ending beyond it
    starts = [1.0, 10.5, 60.25, 250.0, 1000.75, 4090.5, 5000.0] + rng.uniform(1.0, 5000.0, 40).tolist()
    for start in starts:
        for batch in (1, 3, 17, 64, 100):
            steps = int(rng.integers(1, 300))
            e_k, t_k = grid.decode(batch, start + np.arange(steps))
            n, e, t = grid.decode_run(batch, start, steps)
            assert n == steps and e == pytest.approx(e_k.sum(), rel=1e-12) and t == pytest.approx(t_k.sum(), rel=1e-12)
            cum = np.concatenate([[0.0], np.cumsum(t_k)])
            # limits inside a step (a limit on a step's end is a tie either side of rounding)
            for limit in (1e-9, 0.5 * (cum[steps // 3] + cum[steps // 3 + 1]), 0.5 * (cum[-2] + cum[-1]), 1e9):
                got, want = grid.decode_run(batch, start, steps, limit), generic(batch, start, steps, limit)
                assert got[0] == want[0] and got[1:] == pytest.approx(want[1:], rel=1e-12)


def test_reassigned_fields_rebuild_the_cached_rows():
    grid = _grid()
    before = grid.prefill(4, 400)[0]
    grid.energy_scale = 2.0
    assert grid.prefill(4, 400)[0] == pytest.approx(2.0 * before, rel=1e-12)
    slow = dataclasses.replace(grid, decode_time_coef=(np.log(2.0), 0.0, 0.0, 0.0))
    assert slow.decode_run(8, 100.0, 5)[2] == pytest.approx(2.0 * grid.decode_run(8, 100.0, 5)[2], rel=1e-12)


def _workload(n: int, seed: int, rate: float | None = 6.0, concurrency: int | None = None) -> Workload:
    rng = np.random.default_rng(seed)
    prompt, output = rng.integers(1, 1500, n), rng.integers(1, 250, n)
    arrivals = None if concurrency is not None else poisson_arrivals(n, rate, seed)
    return Workload(prompt, output, arrivals, concurrency)


CASES = {
    "chunked": (_workload(300, 2, rate=1.5), SchedulerConfig(kv_capacity_tokens=10**6, idle_w=90.0)),
    "whole_prefills": (_workload(300, 3, rate=2.0), SchedulerConfig(chunked_prefill=False, idle_w=90.0)),
    "preemptions_chunked": (_workload(300, 4, rate=40.0), SchedulerConfig(kv_capacity_tokens=6000, max_batched_tokens=512)),
    "preemptions_whole": (_workload(300, 5, rate=40.0), SchedulerConfig(kv_capacity_tokens=6000, chunked_prefill=False)),
    "max_batch": (_workload(200, 6, rate=20.0), SchedulerConfig(max_batch=5, max_batched_tokens=1024, idle_w=50.0)),
    "beyond_grid_batch": (_workload(300, 7, concurrency=120), SchedulerConfig(max_batch=100, idle_w=0.0)),
    "closed_tight_kv": (_workload(200, 8, concurrency=30), SchedulerConfig(kv_capacity_tokens=5000, idle_w=20.0)),
}


def _assert_same(got, want, rel: float) -> None:
    for name in FLOATS:
        np.testing.assert_allclose(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), rtol=rel, atol=0,
                                   err_msg=name)
    for name in INTS:
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), err_msg=name)
    assert got.iterations == want.iterations
    assert got.idle_j == pytest.approx(want.idle_j, rel=rel) and got.busy_s == pytest.approx(want.busy_s, rel=rel)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("grid", [0, 1])
def test_simulation_equals_the_event_by_event_reference(case, grid):
    workload, config = CASES[case]
    cost = GRIDS[grid]
    got = simulate(workload, cost, config)
    _assert_same(got, reference_simulate(workload, ArrayGridCost(cost), config), rel=1e-9)
    if case.startswith("preemptions"):
        assert got.preemptions.sum() > 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulation_with_a_protocol_cost_equals_the_reference(case):
    # a cost model without decode_run: decode() on each run's contexts, the scheduler's bookkeeping alone differs
    workload, config = CASES[case]
    _assert_same(simulate(workload, LinearCost(), config), reference_simulate(workload, LinearCost(), config), rel=1e-9)
