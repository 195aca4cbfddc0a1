"""The serving simulator: hand-checked schedules, energy conservation, KV admission, determinism.

Costs here come from a linear cost model (prefill 1 J and 1 ms per token; a decode step 2 J + 1 J
per sequence, 10 ms), so every number can be checked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.errors import InvalidInputError
from llmco2.serving import (
    GridCostModel,
    SchedulerConfig,
    Workload,
    make_workload,
    memory_budget,
    poisson_arrivals,
    simulate,
    summarise,
)
from llmco2.specs import Request, get_gpu, get_model


class LinearCost:
    """Prefill: 1 J and 1 ms per token. Decode step: 2 + B J, 10 ms. Mixed: prefill + decode step."""

    def prefill(self, num_seqs: int, tokens: int) -> tuple[float, float]:
        return float(tokens), 0.001 * tokens

    def mixed(self, num_seqs: int, tokens: int, decode_batch: int, context: float) -> tuple[float, float]:
        return float(tokens) + 2.0 + decode_batch, 0.001 * tokens + 0.01

    def decode(self, batch: int, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(context)
        return np.full(n, 2.0 + batch), np.full(n, 0.01)


def _two(arrivals=(0.0, 0.0), prompts=(10, 30), outputs=(3, 2)) -> Workload:
    return Workload(np.array(prompts), np.array(outputs), np.array(arrivals, dtype=float))


def test_two_requests_whole_prefill_split_by_tokens():
    # iteration 1 prefills 10 + 30 tokens (40 J: 10 / 30); a decode step of both (4 J: 2 / 2) ends
    # request 1; a decode step of request 0 alone (3 J)
    s = simulate(_two(), LinearCost(), SchedulerConfig(chunked_prefill=False))
    assert s.energy_j.tolist() == pytest.approx([10 + 2 + 3, 30 + 2])
    assert s.prefill_j.tolist() == pytest.approx([10, 30])
    assert s.first_token_s.tolist() == pytest.approx([0.04, 0.04])
    assert s.finish_s.tolist() == pytest.approx([0.06, 0.05])
    assert s.log_energy_j == pytest.approx([40.0, 4.0, 3.0])
    assert s.log_tokens == [2, 2, 1]
    assert s.iterations == 3
    summary = summarise(s)
    assert summary["j_per_output_token"] == pytest.approx(47 / 5)
    assert summary["tpot_s"]["mean"] == pytest.approx(0.01)


def test_idle_spell_goes_to_the_iteration_that_ends_it():
    # request 0 runs alone 0-0.03 s; the server idles 0.97 s at 100 W until request 1 arrives
    s = simulate(_two(arrivals=(0.0, 1.0)), LinearCost(), SchedulerConfig(chunked_prefill=False, idle_w=100.0))
    assert s.energy_j.tolist() == pytest.approx([10 + 3 + 3, 30 + 97 + 3])
    assert s.idle_j == pytest.approx(97.0)
    assert s.gpu_s.sum() == pytest.approx(s.makespan_s - 0.0)


def test_chunked_prefill_mixes_decodes_into_the_budget():
    # budget 16 tokens: [10 of r0 + 6 of r1] 16 J; [15 of r1 + 1 decode of r0] 15 + 2 + 1 = 18 J split
    # 15:1; [9 of r1] 9 J (r1 has 1 output token: done after its prefill)
    w = Workload(np.array([10, 30]), np.array([2, 1]), np.zeros(2))
    s = simulate(w, LinearCost(), SchedulerConfig(chunked_prefill=True, max_batched_tokens=16))
    assert s.log_energy_j == pytest.approx([16.0, 18.0, 9.0])
    assert s.energy_j.tolist() == pytest.approx([10 + 18 / 16, 6 + 18 * 15 / 16 + 9])
    assert s.finish_s[0] == pytest.approx(0.016 + 0.025)


def test_energy_is_conserved_including_idle():
    rng = np.random.default_rng(3)
    n = 400
    w = Workload(rng.integers(1, 2000, n), rng.integers(1, 300, n), poisson_arrivals(n, 3.0, seed=3))
    cfg = SchedulerConfig(max_batch=32, max_batched_tokens=2048, kv_capacity_tokens=40_000, idle_w=75.0)
    s = simulate(w, LinearCost(), cfg)
    busy = float(np.sum(s.log_energy_j)) - s.idle_j
    idle_s = s.makespan_s - w.arrival_s[0] - s.busy_s
    assert s.idle_j == pytest.approx(75.0 * idle_s)
    assert s.energy_j.sum() == pytest.approx(busy + 75.0 * idle_s, rel=1e-12)
    assert s.gpu_s.sum() == pytest.approx(s.makespan_s, rel=1e-12)
    assert np.all(s.finish_s >= s.first_token_s) and np.all(s.first_token_s > s.arrival_s)
    # every output token is accounted for once
    assert sum(s.log_tokens) == int(w.output_tokens.sum())


def test_kv_capacity_holds_back_admission():
    # 100 KV tokens: two 60-token prompts cannot share the cache; the second starts after the first ends
    w = Workload(np.array([60, 60]), np.array([5, 5]), np.zeros(2))
    s = simulate(w, LinearCost(), SchedulerConfig(kv_capacity_tokens=100))
    assert s.first_token_s[1] > s.finish_s[0]
    roomy = simulate(w, LinearCost(), SchedulerConfig(kv_capacity_tokens=1000))
    assert roomy.first_token_s[1] < roomy.finish_s[0]


def test_full_kv_cache_preempts_and_recomputes():
    # both fit at admission (2 x 40), but their growth to 2 x 50 overflows 90 tokens: the later one is preempted
    w = Workload(np.array([40, 40]), np.array([10, 10]), np.zeros(2))
    s = simulate(w, LinearCost(), SchedulerConfig(kv_capacity_tokens=90, chunked_prefill=False))
    assert s.preemptions.tolist() == [0, 1]
    assert np.isfinite(s.finish_s).all()
    assert s.energy_j.sum() == pytest.approx(np.sum(s.log_energy_j))


def test_request_larger_than_the_kv_cache_is_an_input_error():
    w = Workload(np.array([90]), np.array([20]), np.zeros(1))
    with pytest.raises(InvalidInputError, match="KV"):
        simulate(w, LinearCost(), SchedulerConfig(kv_capacity_tokens=100))


def test_closed_loop_keeps_concurrency_requests_in_flight():
    rng = np.random.default_rng(0)
    w = Workload(rng.integers(1, 500, 200), rng.integers(1, 200, 200), None, concurrency=8)
    s = simulate(w, LinearCost(), SchedulerConfig())
    assert max(s.log_batch) == 8
    assert (np.diff(s.arrival_s) >= 0).all() and (s.arrival_s[:8] == 0).all()
    # a request is issued exactly when an earlier one finishes
    assert np.isin(s.arrival_s[8:], s.finish_s).all()


def test_same_seed_same_schedule_other_seed_other_schedule():
    def run(seed: int) -> np.ndarray:
        w = make_workload("fixed", n=300, rate=5.0, prompt_tokens=500, output_tokens=100, seed=seed)
        return simulate(w, LinearCost(), SchedulerConfig(idle_w=50.0)).energy_j

    assert np.array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


def test_workload_needs_exactly_one_load():
    with pytest.raises(InvalidInputError):
        make_workload("fixed", n=10, prompt_tokens=5, output_tokens=5)
    with pytest.raises(InvalidInputError):
        make_workload("fixed", n=10, rate=1.0, concurrency=4, prompt_tokens=5, output_tokens=5)
    with pytest.raises(InvalidInputError, match="^rate: "):
        make_workload("fixed", n=10, rate=-1.0, prompt_tokens=5, output_tokens=5)


def test_grid_cost_interpolates_in_log_space_and_respects_power_bounds():
    batches, contexts = np.array([1.0, 4.0]), np.array([16.0, 64.0])
    e = np.array([[1.0, 4.0], [2.0, 8.0]])
    t = np.array([[0.01, 0.01], [0.01, 0.01]])
    g = GridCostModel(batches, contexts, e, t, e, t, idle_w=0.0, tdp_w=1000.0)
    assert g.prefill(1, 16)[0] == pytest.approx(1.0)
    assert g.prefill(4, 4 * 64)[0] == pytest.approx(8.0)
    # geometric midpoint in both axes: exp(mean of logs)
    assert g.decode(2, np.array([32.0]))[0][0] == pytest.approx(np.exp(np.mean(np.log([1, 4, 2, 8]))))
    # beyond the grid the values are held, beyond the largest batch they scale with the batch
    assert g.decode(8, np.array([16.0]))[0][0] == pytest.approx(2.0 * 2)
    floor = GridCostModel(batches, contexts, e, t, e, t, idle_w=300.0, tdp_w=1000.0)
    assert floor.decode(1, np.array([16.0]))[0][0] == pytest.approx(300.0 * 0.01)
    # a latency calibration scales decode steps at their batch, not their energy
    slow = GridCostModel(batches, contexts, e, t, e, t, idle_w=0.0, tdp_w=1000.0, num_gpus=2,
                         decode_time_coef=(np.log(0.5), 0.0, 0.0, np.log(2.0) / (np.log(4.0) * np.log(2.0))))
    de, dt = slow.decode(4, np.array([16.0]))
    assert de[0] == pytest.approx(2.0) and dt[0] == pytest.approx(0.01 * 0.5 * 2.0)
    assert slow.prefill(4, 64)[1] == pytest.approx(0.01)


def test_kv_capacity_from_the_analytic_memory_model():
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100")
    m = memory_budget(arch, gpu, Request(weight_dtype="bf16"))
    per_token = 2 * arch.num_layers * arch.num_kv_heads * arch.head_dim * 2  # K and V, 2 bytes
    assert m["kv_bytes_per_token_per_gpu"] == pytest.approx(per_token)
    assert m["weight_bytes_per_gpu"] == pytest.approx(arch.param_count() * 2)
    assert m["kv_capacity_tokens"] == int((0.9 * gpu.memory_bytes - m["weight_bytes_per_gpu"]) // per_token)
    two = memory_budget(arch, gpu, Request(weight_dtype="bf16", num_gpus=2))
    assert two["kv_capacity_tokens"] > 2 * m["kv_capacity_tokens"]  # half the weights per GPU
    with pytest.raises(InvalidInputError, match=r"; use more GPUs \(`num_gpus`\) or a smaller dtype \(`dtype`\)$"):
        memory_budget(get_model("llama3.1-70b"), gpu, Request(weight_dtype="bf16"))


def test_calibration_scales_busy_energy_and_keeps_conservation():
    from llmco2.serving.calibration import Calibration, calibrate

    w = _two(arrivals=(0.0, 1.0))
    s = simulate(w, LinearCost(), SchedulerConfig(chunked_prefill=False, idle_w=100.0))
    calibrate(s, 0.5)
    # busy 16 + 33 J halve, the 97 J idle spell stays
    assert s.energy_j.tolist() == pytest.approx([8.0, 97 + 16.5])
    assert s.energy_j.sum() == pytest.approx(np.sum(s.log_energy_j))
    assert s.prefill_j.tolist() == pytest.approx([5.0, 15 + 97])
    cal = Calibration((0.1, 0.0, 0.0, 0.0, 0.0), "x", "test", 1, (8.0, 512.0))
    assert cal.factor(3.0, 1, 100.0) == pytest.approx(np.exp(0.1))
    slope = Calibration((0.0, 1.0, 0.0, 0.0, 0.0), "x", "test", 1, (8.0, 512.0))
    assert slope.factor(2.0, 1, 10.0) == pytest.approx(8.0)  # batch held at the fitted minimum
    assert slope.factor(4096.0, 1, 10.0) == pytest.approx(512.0)


def test_kv_cache_is_never_overrun():
    # tight cache, chunked prefill mixing decodes: every request finishes and the cache bound holds
    rng = np.random.default_rng(5)
    n = 120
    w = Workload(rng.integers(50, 400, n), rng.integers(20, 300, n), np.zeros(n))
    cap = 3000
    s = simulate(w, LinearCost(), SchedulerConfig(kv_capacity_tokens=cap, max_batched_tokens=256))
    assert np.isfinite(s.finish_s).all()
    assert s.preemptions.sum() > 0
    # KV tokens held at the end of every decode run: batch x (mean context at its start + its steps)
    held = []

    class Spy(LinearCost):
        def decode(self, batch, context):
            held.append(batch * (float(np.mean(context[:1])) + len(context)))
            return super().decode(batch, context)

    simulate(w, Spy(), SchedulerConfig(kv_capacity_tokens=cap, max_batched_tokens=256))
    assert max(held) <= cap + 1e-9
    assert s.energy_j.sum() == pytest.approx(np.sum(s.log_energy_j))
