"""Step physics: hand-checked formulas, the closed-form steady state against the simulator, the
joint fit recovering known constants, engine versions, and the serving interval."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmco2.physics.step_fit import Observation, fit_step_params
from llmco2.physics.step_physics import EngineOverhead, StepParams, arithmetic_power_w, step_cost
from llmco2.physics.step_work import SLOTS, step_shapes
from llmco2.serving import GridCostModel, SchedulerConfig, Workload, memory_budget, simulate
from llmco2.serving.api import server_setup
from llmco2.serving.api import steady_state as simulated_steady_state
from llmco2.serving.steady import ServerCase, steady_shapes, steady_state
from llmco2.specs import Request, engine_level_index, engine_levels, get_engine, get_gpu, get_model
from llmco2.specs.gpu_power import static_power_w

GRAPHS = EngineOverhead(1e-3, 20e-6, 2e-6, True)


def _decode_item(batch: int = 8, tp: int = 1, engine: str = "vllm"):
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100-sxm")
    req = Request(batch_size=batch, prompt_tokens=512, generated_tokens=9, num_gpus=tp, tensor_parallel=tp, engine=engine)
    return arch, req, gpu


def test_step_time_is_the_sum_of_kernel_rooflines_gaps_and_overheads():
    x = step_shapes([_decode_item()], "decode", 8.0)
    p = StepParams(eta_compute=0.5, eta_memory=0.8, kernel_gap_s=4e-6, engines={"vllm": GRAPHS})
    c = step_cost(x, p)
    kernels = np.maximum(x.compute_s / 0.5, x.memory_s / 0.8).sum()
    expected = kernels + 4e-6 * x.kernels[0] + 1e-3 + 20e-6 * 8
    assert c.time_s[0] == pytest.approx(expected, rel=1e-12)
    # 32 layers of q, k, v, fused attention, out, add, 2 norms, gate, up, act, down, add + 3 head kernels
    assert x.kernels[0] == 13 * 32 + 3
    # a decode step streams every weight but the input embedding table (a gather of a few rows), in bf16
    arch = get_model("llama3.1-8b")
    streamed = (arch.param_count() - arch.vocab_size * arch.hidden_size) * 2
    assert x.weight_s.sum() * get_gpu("h100-sxm").memory_bandwidth_bytes_per_s == pytest.approx(streamed, rel=0.01)


def test_power_lies_between_idle_and_the_limit_and_grows_with_utilisation():
    p = StepParams(engines={"vllm": GRAPHS})
    small = step_cost(step_shapes([_decode_item(1)], "decode", 8.0), p)
    big = step_cost(step_shapes([_decode_item(256)], "decode", 8.0), p)
    gpu = get_gpu("h100-sxm")
    idle = static_power_w(gpu)[0]
    for c in (small, big):
        assert idle < c.power_w[0] <= gpu.tdp_w
    assert big.power_w[0] > small.power_w[0]
    assert big.energy_j[0] == pytest.approx(big.power_w[0] * big.time_s[0])


def test_eager_engine_waits_for_the_host_launching_every_kernel():
    eager = EngineOverhead(0.0, 0.0, 100e-6, False)
    x = step_shapes([_decode_item(1, engine="hf")], "decode", 8.0)
    c = step_cost(x, StepParams(engines={"hf": eager}))
    assert c.time_s[0] == pytest.approx(max(c.gpu_time_s[0], x.kernels[0] * 100e-6))


def test_vllm_v0_is_its_own_engine_with_the_network_level_of_vllm():
    v0 = get_engine("vllm-v0")
    assert v0.id == "vllm-v0" and v0.step_overhead_ms > get_engine("vllm").step_overhead_ms
    assert "vllm-v0" not in engine_levels()
    assert engine_level_index("vllm-v0") == engine_level_index("vllm") == engine_levels().index("vllm")


def _case(cap: int, chunked: bool) -> ServerCase:
    arch, gpu, req = server_setup("llama3.1-8b", "h100-sxm", 1, None, "vllm" if chunked else "vllm-v0", "bf16")
    rng = np.random.default_rng(0)
    prompts = rng.integers(100, 600, 600)
    outputs = rng.integers(50, 400, 600)
    kv = memory_budget(arch, gpu, req)["kv_capacity_tokens"]
    return ServerCase(arch, gpu, req, cap, float(kv), prompts, outputs, chunked)


@pytest.mark.parametrize("chunked", [True, False])
def test_closed_form_steady_state_agrees_with_the_simulator(chunked):
    case = _case(32, chunked)
    p = StepParams(engines={"vllm": GRAPHS, "vllm-v0": EngineOverhead(4e-3, 100e-6, 2e-6, True)})
    closed = steady_state(steady_shapes([case]), p)
    cost = GridCostModel.from_physics(case.arch, case.gpu, case.request, p)
    cfg = SchedulerConfig(max_batch=32, max_batched_tokens=8192, chunked_prefill=chunked,
                          kv_capacity_tokens=int(case.kv_capacity_tokens), idle_w=cost.idle_w)
    sim = simulated_steady_state(simulate(Workload(case.prompts, case.outputs, None, concurrency=32), cost, cfg))
    assert closed.j_per_output_token[0] == pytest.approx(sim["j_per_output_token"], rel=0.15)
    assert closed.power_w[0] == pytest.approx(sim["average_power_w"], rel=0.1)


def test_request_starts_are_a_poisson_count_and_the_median_step_starts_none_while_that_is_likelier_than_not():
    """r = B / mean output requests start per decode step, a Poisson count: a share 1 - exp(-r) of the
    steps carries a prefill, the prompts per such step keep the total r, and the median inter-token
    latency is the decode step's exactly while exp(-r) >= 1/2 (r <= ln 2)."""
    from dataclasses import replace

    p = StepParams(engines={"vllm": GRAPHS})
    case = _case(32, True)
    for cap in (8, 64, 128, 256, 512):
        x = steady_shapes([replace(case, cap=cap)])
        r = float(x.starts[0])
        s = max(round(r / -np.expm1(-r)), 1)
        assert x.share[0] * s == pytest.approx(r)  # every started request is prefilled once
        st = steady_state(x, p)
        decode = step_cost(x.decode, p, None, online=True).time_s[0]
        mixed = step_cost(x.prefill, p, None, online=True).time_s[0]
        assert st.itl_median_s[0] == pytest.approx(decode if r <= np.log(2.0) else mixed)
    mean_out = float(np.mean(case.outputs))
    assert 64 / mean_out < np.log(2.0) < 256 / mean_out  # both sides of the median's switch are covered


def test_joint_fit_recovers_the_constants_that_generated_the_observations():
    truth = StepParams(eta_compute=0.55, eta_memory=0.75, kernel_gap_s=3e-6, collective_s=20e-6, power_base=0.15,
                       power_compute=0.8, memory_pj_per_byte=200.0, engines={"vllm": EngineOverhead(2e-3, 40e-6, 2e-6, True)})
    cases = [_case(cap, True) for cap in (1, 4, 16, 64, 256)]
    shapes = steady_shapes(cases)
    st = steady_state(shapes, truth)
    obs = [Observation("J", st.j_per_output_token, lambda p: steady_state(shapes, p).j_per_output_token),
           Observation("itl", st.itl_median_s, lambda p: steady_state(shapes, p).itl_median_s),
           Observation("power", st.power_w, lambda p: steady_state(shapes, p).power_w)]
    fitted, report = fit_step_params(obs, ["vllm"], names=("eta_memory", "power_base", "memory_pj_per_byte"),
                                     base=StepParams(eta_compute=0.55, kernel_gap_s=3e-6, collective_s=20e-6, power_compute=0.8,
                                                     engines=truth.engines))
    assert fitted.eta_memory == pytest.approx(0.75, rel=0.05)
    assert all(v < 1.0 for v in report.values())


def test_serving_json_has_an_interval_that_widens_on_an_unseen_gpu(capsys):
    from llmco2.cli import main

    def run(gpu: str) -> dict:
        rc = main(["predict", "--model", "llama3.1-8b", "--gpu", gpu, "--prompt-tokens", "500", "--gen-tokens", "100",
                   "--serving", "--concurrency", "8", "--max-batch", "8", "--json"])
        assert rc == 0
        return json.loads(capsys.readouterr().out)["serving"]

    seen, unseen = run("h100-sxm"), run("l40s")
    for sv in (seen, unseen):
        lo, hi = sv["j_per_output_token_interval"]
        assert lo < sv["j_per_output_token"] < hi
        assert sv["cost_model"] == "step physics"
    width = lambda sv: sv["j_per_output_token_interval"][1] / sv["j_per_output_token_interval"][0]  # noqa: E731
    assert width(unseen) > width(seen)


def test_expert_gemms_of_a_moe_model_run_at_eta_expert_and_dense_models_do_not():
    gpu = get_gpu("h100-sxm")
    req = Request(batch_size=32, prompt_tokens=512, generated_tokens=9, num_gpus=2, tensor_parallel=2, engine="vllm")
    moe = step_shapes([(get_model("mixtral-8x7b"), req, gpu)], "decode", 8.0)
    dense = step_shapes([(get_model("llama3.1-8b"), req, gpu)], "decode", 8.0)
    assert moe.moe.tolist() == [1.0] and dense.moe.tolist() == [0.0]
    full, slow = StepParams(engines={"vllm": GRAPHS}), StepParams(eta_expert=0.5, engines={"vllm": GRAPHS})
    kernels = np.maximum(moe.compute_s / full.eta_compute, moe.memory_s / full.eta_memory)
    experts = kernels[0, [SLOTS.index(k) for k in ("gate_proj", "up_proj", "down_proj")]].sum()
    assert experts > 0
    # halving the experts' efficiency adds exactly their time once more; a dense model is unchanged
    assert step_cost(moe, slow).gpu_time_s[0] - step_cost(moe, full).gpu_time_s[0] == pytest.approx(experts, rel=1e-9)
    assert step_cost(dense, slow).time_s[0] == step_cost(dense, full).time_s[0]


def test_busy_power_follows_the_share_of_the_step_that_kernels_run():
    gpu = get_gpu("h100-sxm")
    req = Request(batch_size=32, prompt_tokens=512, generated_tokens=9, num_gpus=2, tensor_parallel=2, engine="vllm")
    moe = step_shapes([(get_model("mixtral-8x7b"), req, gpu)], "decode", 8.0)
    base = StepParams(power_base=0.0, power_compute=0.0, memory_pj_per_byte=0.0, engines={"vllm": GRAPHS})
    busy = StepParams(power_base=0.0, power_compute=0.0, memory_pj_per_byte=0.0, power_busy=0.5, engines={"vllm": GRAPHS})
    idle = float(moe.idle_w[0])
    c0 = step_cost(moe, base)
    # without activity terms: idle plus the DRAM's own energy per byte moved
    dram_w = moe.dram_pj_per_byte[0] * 1e-12 * moe.memory_s.sum() / c0.time_s[0] * moe.mem_bw_bytes_per_s[0]
    assert moe.dram_pj_per_byte[0] == pytest.approx((5.0 + 0.23) * 8)  # HBM3 device + interposer link (memory_energy.toml)
    assert c0.power_w[0] == pytest.approx(2 * (idle + dram_w))
    kernels = np.maximum(moe.compute_s / busy.eta_compute, moe.memory_s / busy.eta_memory).sum(axis=1)[0]
    cost = step_cost(moe, busy)
    share = kernels / cost.time_s[0]
    assert 0.0 < share < 1.0
    assert cost.power_w[0] == pytest.approx(2 * (idle * (1 + 0.5 * share) + dram_w))  # the busy silicon: a multiple of its static draw
    # slower expert kernels keep the GPU busy longer: its busy power rises (the per-byte term falls)
    slow = step_cost(moe, busy.with_values(eta_expert=0.5))
    slow0 = step_cost(moe, base.with_values(eta_expert=0.5))
    assert slow.power_w[0] - slow0.power_w[0] > cost.power_w[0] - c0.power_w[0]


def test_no_power_term_scales_with_the_power_limit_which_only_caps():
    """Two GPUs that differ only in their power limit draw the same power until the lower limit binds."""
    from dataclasses import replace

    h100 = get_gpu("h100-sxm")
    capped = replace(h100, id="h100-capped", tdp_w=450.0)
    p = StepParams(engines={"vllm": GRAPHS}, power_base=0.0, power_busy=0.2)
    arch = get_model("llama3.1-8b")
    for batch in (1, 8):
        req = Request(batch_size=batch, prompt_tokens=512, generated_tokens=9, engine="vllm")
        a = step_cost(step_shapes([(arch, req, h100)], "decode", 8.0), p).power_w[0]
        b = step_cost(step_shapes([(arch, req, capped)], "decode", 8.0), p).power_w[0]
        assert a == b < 450.0
    big = Request(batch_size=64, prompt_tokens=2048, generated_tokens=1, engine="vllm")
    a = step_cost(step_shapes([(arch, big, h100)], "prefill"), p).power_w[0]
    b = step_cost(step_shapes([(arch, big, capped)], "prefill"), p).power_w[0]
    assert a > 450.0 and b == 450.0  # a compute-bound prefill reaches the lower cap


def test_an_operation_in_a_faster_precision_costs_proportionally_less_energy():
    """At its peak the arithmetic draws the same power in every precision: an FP8 operation on a GPU
    that runs FP8 twice as fast as FP16 costs half the energy of an FP16 one."""
    gpu = get_gpu("h100-sxm")
    p = StepParams(engines={"vllm": GRAPHS}, power_base=0.0, power_busy=0.0, memory_pj_per_byte=0.0)
    arch = get_model("llama3.1-8b")
    costs = {}
    for dtype in ("fp16", "fp8"):
        req = Request(batch_size=64, prompt_tokens=2048, generated_tokens=1, weight_dtype=dtype, engine="vllm")
        x = step_shapes([(arch, req, gpu)], "prefill")
        c = step_cost(x, p)
        dram_w = x.dram_pj_per_byte[0] * 1e-12 * x.memory_s.sum() / c.time_s[0] * x.mem_bw_bytes_per_s[0]
        ops = x.compute_s.sum() * gpu.peak_ops_per_s(dtype)
        costs[dtype] = (c.power_w[0] - x.idle_w[0] - dram_w) * c.time_s[0] / ops  # J per operation
    assert costs["fp8"] == pytest.approx(costs["fp16"] / 2, rel=1e-9)
    # an FP16 operation on a 4 nm GPU costs op_pj_7nm x (4 / 7) ^ op_node_exp pJ, whatever its peak
    assert costs["fp16"] == pytest.approx(arithmetic_power_w(p, 4.0, 989.5e12) / 989.5e12, rel=1e-9)
    assert costs["fp16"] == pytest.approx(p.op_pj_7nm * 1e-12 * 4.0 / 7.0, rel=1e-9)


def test_an_engine_all_reduce_cost_adds_per_collective_and_only_with_tensor_parallelism():
    from dataclasses import replace

    slow = replace(GRAPHS, collective_s=100e-6)
    tp2, tp1 = step_shapes([_decode_item(tp=2)], "decode", 8.0), step_shapes([_decode_item(tp=1)], "decode", 8.0)
    assert tp2.collectives[0] == 2 * 32 and tp1.collectives[0] == 0  # two all-reduces a layer
    fast_p, slow_p = StepParams(engines={"vllm": GRAPHS}), StepParams(engines={"vllm": slow})
    assert step_cost(tp2, slow_p).time_s[0] - step_cost(tp2, fast_p).time_s[0] == pytest.approx(64 * 100e-6, rel=1e-9)
    assert step_cost(tp1, slow_p).time_s[0] == step_cost(tp1, fast_p).time_s[0]
    # a step file written before engines had the field reads as no extra cost
    raw = slow_p.to_dict()
    assert StepParams.from_dict(raw).engine("vllm").collective_s == 100e-6
    del raw["engines"]["vllm"]["collective_s"]
    assert StepParams.from_dict(raw).engine("vllm").collective_s == 0.0


@pytest.mark.parametrize("field", ["collective_s", "serving_worker_s"])
def test_online_engine_costs_are_fitted_only_for_engines_that_serving_rows_ran(field: str):
    from llmco2.physics.step_fit import _engine_fields

    assert field in _engine_fields(GRAPHS, online=True)
    assert field not in _engine_fields(GRAPHS, online=False)


def test_gpu_work_per_sequence_is_fitted_only_for_engines_whose_serving_rows_measured_power():
    from llmco2.physics.step_fit import _engine_fields

    assert "sequence_bytes" in _engine_fields(GRAPHS, online=True, power=True)
    assert "sequence_bytes" not in _engine_fields(GRAPHS, online=True, power=False)


def test_an_online_server_pays_its_per_worker_step_cost_once_per_extra_gpu_and_offline_runs_do_not():
    from dataclasses import replace

    slow = replace(GRAPHS, serving_worker_s=5e-3)
    fast_p, slow_p = StepParams(engines={"vllm": GRAPHS}), StepParams(engines={"vllm": slow})
    for tp in (1, 2, 4):
        x = step_shapes([_decode_item(tp=tp)], "decode", 8.0)
        extra = step_cost(x, slow_p, online=True).time_s[0] - step_cost(x, fast_p, online=True).time_s[0]
        assert extra == pytest.approx((tp - 1) * 5e-3, rel=1e-9, abs=1e-15)
        assert step_cost(x, slow_p).time_s[0] == step_cost(x, fast_p).time_s[0]  # an offline batch run
    # the waiting GPUs draw less: the same work spread over a longer step
    x = step_shapes([_decode_item(tp=4)], "decode", 8.0)
    assert step_cost(x, slow_p, online=True).power_w[0] < step_cost(x, fast_p, online=True).power_w[0]
    raw = slow_p.to_dict()
    assert StepParams.from_dict(raw).engine("vllm").serving_worker_s == 5e-3
    del raw["engines"]["vllm"]["serving_worker_s"]
    assert StepParams.from_dict(raw).engine("vllm").serving_worker_s == 0.0


def test_a_step_file_without_power_busy_reads_as_no_busy_power():
    raw = StepParams(power_busy=0.4).to_dict()
    assert StepParams.from_dict(raw).power_busy == 0.4
    del raw["power_busy"]
    assert StepParams.from_dict(raw).power_busy == 0.0


def test_a_step_file_without_eta_expert_reads_as_dense_rate_experts():
    raw = StepParams(eta_expert=0.7).to_dict()
    assert StepParams.from_dict(raw).eta_expert == 0.7
    del raw["eta_expert"]
    assert StepParams.from_dict(raw).eta_expert == 1.0


def test_gpu_work_per_sequence_lengthens_the_step_as_memory_bound_kernels_and_draws_more_than_host_time():
    """The same per-sequence time spent as GPU work (bytes at eta_memory of the bandwidth) or on the
    host: equal step times, but the GPU work keeps the kernels running and moves bytes, so it draws more."""
    from dataclasses import replace

    x = step_shapes([_decode_item(64)], "decode", 8.0)
    bw = float(x.mem_bw_bytes_per_s[0])
    p = StepParams(eta_memory=0.8, power_busy=0.5, engines={"vllm": GRAPHS})
    base = step_cost(x, p)
    per_seq_s = 40e-6
    gpu = step_cost(x, replace(p, engines={"vllm": replace(GRAPHS, sequence_bytes=per_seq_s * 0.8 * bw)}))
    host = step_cost(x, replace(p, engines={"vllm": replace(GRAPHS, sequence_s=GRAPHS.sequence_s + per_seq_s)}))
    assert gpu.time_s[0] == pytest.approx(base.time_s[0] + 64 * per_seq_s, rel=1e-9)
    assert host.time_s[0] == pytest.approx(gpu.time_s[0], rel=1e-9)
    assert gpu.gpu_time_s[0] == pytest.approx(base.gpu_time_s[0] + 64 * per_seq_s, rel=1e-9)
    assert host.gpu_time_s[0] == pytest.approx(base.gpu_time_s[0], rel=1e-12)
    assert host.power_w[0] < base.power_w[0] < gpu.power_w[0]
    raw = replace(p, engines={"vllm": replace(GRAPHS, sequence_bytes=1e6)}).to_dict()
    assert StepParams.from_dict(raw).engine("vllm").sequence_bytes == 1e6
    del raw["engines"]["vllm"]["sequence_bytes"]
    assert StepParams.from_dict(raw).engine("vllm").sequence_bytes == 0.0


def test_weight_only_low_bit_gemms_run_at_their_share_of_the_compute_rate_where_compute_binds() -> None:
    """AWQ (4-bit weights, 16-bit arithmetic): at batch 1 the linear layers stream the packed weights (memory-bound, as
    fast as the 16-bit path allows for a quarter of the bytes); at batch 512 of a prefill they are compute-bound and
    run at WEIGHT_ONLY_COMPUTE_RATE of the 16-bit GEMM's rate, so slower than fp16 weights; the operations and so their
    arithmetic energy are the same."""
    from llmco2.physics.step_physics import kernel_seconds
    from llmco2.physics.step_work import LINEAR_SLOT_INDEX
    from llmco2.specs.quantisation import WEIGHT_ONLY_COMPUTE_RATE

    arch, gpu = get_model("llama3.1-8b"), get_gpu("a100-80gb")
    p = StepParams()

    def linear_seconds(batch: int, quantisation: str | None, phase: str) -> tuple[float, float]:
        req = Request(batch_size=batch, prompt_tokens=512, generated_tokens=2, engine="vllm", quantisation=quantisation)
        x = step_shapes([(arch, req, gpu)], phase)
        k = kernel_seconds(x.compute_s, x.memory_s, x.moe, p, x.linear_rate)[0, LINEAR_SLOT_INDEX].sum()
        return float(k), float(x.compute_s[0, LINEAR_SLOT_INDEX].sum())

    fp16_small, _ = linear_seconds(1, None, "decode")
    awq_small, _ = linear_seconds(1, "awq", "decode")
    assert awq_small < 0.5 * fp16_small
    fp16_big, ops_fp16 = linear_seconds(512, None, "prefill")
    awq_big, ops_awq = linear_seconds(512, "awq", "prefill")
    assert ops_awq == pytest.approx(ops_fp16)
    assert awq_big == pytest.approx(fp16_big / WEIGHT_ONLY_COMPUTE_RATE, rel=1e-6)


def test_layers_that_synchronise_the_host_pay_host_and_gpu_time_one_after_the_other() -> None:
    """bitsandbytes LLM.int8 synchronises the host twice per linear layer, so under an engine without CUDA graphs a
    step costs its GPU time plus its launch time, not the larger of the two; fp16 layers, which never wait, overlap
    them; under CUDA graphs there is no launch time to add. The rows' shapes say which is which (``host_synced``)."""
    from llmco2.physics.step_physics import overhead_arrays

    arch, gpu = get_model("llama3.2-1b"), get_gpu("a100-pcie-40gb")
    p = StepParams(engines={"hf": EngineOverhead(0.01, 0.0, 5e-6, False), "vllm": EngineOverhead(0.0, 0.0, 5e-6, True)})
    for engine in ("hf", "vllm"):
        items = [(arch, Request(batch_size=16, prompt_tokens=128, generated_tokens=128, engine=engine, quantisation=q), gpu)
                 for q in (None, "bnb-int8")]
        x = step_shapes(items, "decode", 127.0)
        assert x.host_synced.tolist() == [0.0, 1.0]
        oh = overhead_arrays(x.engines, p)
        cost = step_cost(x, p, oh)
        host = x.kernels * oh[2] * (1.0 - oh[3])
        gpu_s = cost.gpu_time_s
        assert cost.time_s[0] == pytest.approx(max(gpu_s[0], host[0]) + oh[0][0], rel=1e-12)
        assert cost.time_s[1] == pytest.approx(gpu_s[1] + host[1] + oh[0][1], rel=1e-12)
        if engine == "hf":
            assert host[1] > 0.0 and x.kernels[1] > 8 * x.kernels[0]
        else:
            assert host[1] == 0.0
        one = x.take(np.array([1]))
        assert one.host_synced.tolist() == [1.0] and x.take(np.array([0])).merged(one).host_synced.tolist() == [1.0]
