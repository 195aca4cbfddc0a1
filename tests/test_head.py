"""The torch-free output head: physical energies, launch-aware latency, engines, intervals."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.physics.priors import PhaseInputs, PhysicsPrior, idle_power_w
from llmco2.prediction.domain_notes import domain_notes
from llmco2.prediction.head import OutputHead
from llmco2.prediction.intervals import IntervalCalibration, conformal_bounds
from llmco2.prediction.targets import EnergyTarget
from llmco2.specs import Request, get_gpu, get_model
from llmco2.specs.gpu_power import static_power_w


def _finish(head: OutputHead, items: list, z: np.ndarray):
    analysis = analyze_layers(LayerBatch.from_items(items, validate=False))
    return head.finish(z, items, analysis, model_totals(analysis))


def _sweep_items() -> list:
    arch = get_model("llama3.1-8b")
    items = []
    for gpu_id in ("h100-sxm", "a100-40gb", "jetson-orin"):
        gpu = get_gpu(gpu_id)
        for batch in (1, 8, 64):
            for prompt in (16, 1024, 8192):
                for gpus in ((1, 2, 4, 8) if gpu.form_factor not in ("module", "SoC") else (1,)):
                    items.append((arch, Request(batch_size=batch, prompt_tokens=prompt, generated_tokens=129, num_gpus=gpus),
                                  gpu))
    return items


@pytest.mark.parametrize("z_value", [-8.0, 0.0, 8.0])
def test_average_power_stays_between_idle_and_the_power_limit(z_value: float) -> None:
    """Whatever the network outputs (here far beyond any trained range), every phase's average
    power (energy / latency) lies within [GPUs x idle, GPUs x power limit], over a sweep of batch,
    context, GPU count and GPU type."""
    head = OutputHead(EnergyTarget(np.array([0.0, 0.0]), np.array([1.0, 1.0])), PhysicsPrior())
    items = _sweep_items()
    out = _finish(head, items, np.full((len(items), 2), z_value))
    n = np.array([r.num_gpus for _, r, _ in items], dtype=float)
    tdp = np.array([g.tdp_w for _, _, g in items], dtype=float)
    idle = np.array([idle_power_w(g) for _, _, g in items])
    power = out.energy_j / out.latency_s
    assert np.all(out.latency_s > 0) and np.all(np.isfinite(power))
    assert np.all(power <= (n * tdp)[:, None] * (1 + 1e-9))
    assert np.all(power >= (n * idle)[:, None] * (1 - 1e-9))
    assert np.all(out.energy_low_j <= out.energy_j) and np.all(out.energy_high_j >= out.energy_j)


def test_single_token_generation_has_no_decode() -> None:
    head = OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), PhysicsPrior())
    items = [(get_model("qwen2-0.5b"), Request(batch_size=1, prompt_tokens=64, generated_tokens=1), get_gpu("h100-sxm"))]
    out = _finish(head, items, np.zeros((1, 2)))
    assert out.energy_j[0, 1] == 0 and out.latency_s[0, 1] == 0 and out.energy_j[0, 0] > 0


def test_launch_overhead_dominates_small_batch_decode_and_depends_on_the_engine() -> None:
    """Batch-1 decode of an 8B model: with per-kernel launch overhead an eager engine takes far
    longer than the roofline time, a CUDA-graph engine close to it; power is lower when launch-bound."""
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100-sxm")
    items = [(arch, Request(batch_size=1, prompt_tokens=1024, generated_tokens=128, engine=e), gpu) for e in ("hf", "vllm")]
    analysis = analyze_layers(LayerBatch.from_items(items))
    x = PhaseInputs.build(items, analysis, model_totals(analysis))
    prior = PhysicsPrior(efficiency={"datacentre": [1.0, 1.0]}, launch_us={"hf": 20.0, "vllm": 2.0},
                         step_ms={"hf": 2.0, "vllm": 1.5}, sequence_us={"hf": 5.0, "vllm": 20.0})
    lat, busy = prior.latency_s(x)
    kernels = x.kernels[0]
    assert kernels > 32 * 10  # every layer's kernels, launched each step
    assert x.collectives.tolist() == [0.0, 0.0]  # one GPU: no all-reduce
    assert lat[0, 1] == pytest.approx(max(busy[0, 1], 127 * kernels * 20e-6) + 127 * (2e-3 + 1 * 5e-6))
    assert lat[0, 1] > 1.5 * lat[1, 1] and lat[1, 1] < 1.5 * busy[1, 1] + 127 * 1.5e-3
    energy, _ = prior.energy_j(x)
    assert energy[0, 1] / lat[0, 1] < energy[1, 1] / lat[1, 1]  # launch-bound: lower average power
    assert x.idle_w[0] == static_power_w(gpu)[0] < 0.2 * gpu.tdp_w  # the sourced idle reading, not a share of the limit


def test_engine_is_a_global_feature_and_unknown_engines_degrade() -> None:
    from llmco2.graph.features import ENGINE_LEVELS, GLOBAL_FEATURES, global_feature_matrix
    from llmco2.specs import engine_id

    arch, gpu = get_model("qwen2-0.5b"), get_gpu("h100-sxm")
    items = [(arch, Request(batch_size=1, prompt_tokens=32, generated_tokens=8, engine=e), gpu) for e in ("hf", "vllm")]
    analysis = analyze_layers(LayerBatch.from_items(items))
    u = global_feature_matrix(analysis, model_totals(analysis))
    cols = [GLOBAL_FEATURES.index(f"engine_{e}") for e in ENGINE_LEVELS]
    assert u[:, cols].sum(axis=1).tolist() == [1.0, 1.0]
    assert u[0, GLOBAL_FEATURES.index("engine_hf")] == 1 and u[1, GLOBAL_FEATURES.index("engine_vllm")] == 1
    assert engine_id("some-new-engine") == "unknown" and "unknown" in ENGINE_LEVELS


def test_domain_notes_name_unseen_gpu_engine_and_sizes() -> None:
    domain = {"devices": ["h100-sxm"], "engines": ["vllm"], "batch_size": [1, 8], "params": [1, 10**11]}
    item = (get_model("qwen2-0.5b"), Request(batch_size=32, prompt_tokens=8, generated_tokens=8, engine="hf"), get_gpu("b200"))
    notes = " | ".join(domain_notes(domain, item))
    assert "unseen GPU b200" in notes and "unseen engine hf" in notes and "batch size 32" in notes
    assert domain_notes(domain, (item[0], Request(batch_size=2, prompt_tokens=8, generated_tokens=8), get_gpu("h100-sxm"))) == []


def test_conformal_intervals_cover_and_widen_out_of_domain() -> None:
    rng = np.random.default_rng(0)
    resid = rng.normal(0, 0.2, 4000)
    phase = np.repeat([0, 1], 2000)
    cal = IntervalCalibration.fit(resid, phase, ["datacentre"] * 4000)
    fresh = rng.normal(0, 0.2, 20000)
    lo, hi = cal.log_bounds(["datacentre"], [False])
    assert abs(((fresh >= lo[0, 0]) & (fresh <= hi[0, 0])).mean() - 0.8) < 0.03
    wide = cal.with_out_of_domain(rng.normal(0, 0.6, 500), np.repeat([0, 1], 250), "test residuals")
    lo_x, hi_x = wide.log_bounds(["datacentre"], [True])
    assert np.all(lo_x < lo) and np.all(hi_x > hi)
    assert conformal_bounds(np.array([]), (0.1, 0.9)) == [0.0, 0.0]
    again = IntervalCalibration.from_state_dict(wide.state_dict())
    assert np.allclose(again.log_bounds(["edge"], [True])[1], wide.log_bounds(["edge"], [True])[1])


def test_head_state_round_trip_gives_identical_predictions() -> None:
    target = EnergyTarget(np.array([0.1, -0.2]), np.array([0.5, 0.7]), np.array([-3.0, -3.0]), np.array([3.0, 3.0]))
    physics = PhysicsPrior(efficiency={"h100-sxm": [0.4, 0.6], "datacentre": [0.5, 0.5]}, activity=np.array([0.7, 0.4]))
    head = OutputHead(target, physics, IntervalCalibration.fit(np.linspace(-1, 1, 100), np.repeat([0, 1], 50), ["x"] * 100),
                      {"devices": ["h100-sxm"]})
    items = _sweep_items()[::4]
    z = np.random.default_rng(1).normal(size=(len(items), 2))
    a, b = _finish(head, items, z), _finish(OutputHead.from_state_dict(head.state_dict()), items, z)
    for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.notes == b.notes and any(a.notes)


def test_head_imports_neither_torch_nor_pandas() -> None:
    code = ("import sys, llmco2.prediction.head; bad = [m for m in ('torch', 'torch_geometric', 'pandas') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_engines_never_trained_on_reach_the_network_as_unknown() -> None:
    from llmco2.graph.features import GLOBAL_FEATURES, global_feature_matrix

    head = OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), domain={"engines": ["edge", "vllm"]})
    arch, gpu = get_model("qwen2-0.5b"), get_gpu("h100-sxm")
    items = [(arch, Request(batch_size=1, prompt_tokens=32, generated_tokens=8, engine=e), gpu) for e in ("vllm", "hf")]
    analysis = analyze_layers(LayerBatch.from_items(items))
    u = global_feature_matrix(head.network_analysis(analysis), model_totals(analysis))
    assert u[0, GLOBAL_FEATURES.index("engine_vllm")] == 1
    assert u[1, GLOBAL_FEATURES.index("engine_hf")] == 0 and u[1, GLOBAL_FEATURES.index("engine_unknown")] == 1
    assert OutputHead(EnergyTarget(np.zeros(2), np.ones(2))).network_analysis(analysis) is analysis


def test_tensor_parallel_all_reduce_latency_and_per_sequence_cost_per_step() -> None:
    """Two all-reduces per layer and step on more than one GPU (hand count: 32 layers x 2 = 64),
    each costing the prior's latency; the per-sequence cost scales with the batch."""
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100-sxm")
    reqs = [Request(batch_size=b, prompt_tokens=128, generated_tokens=65, num_gpus=n, tensor_parallel=n)
            for b, n in ((1, 1), (1, 2), (16, 2))]
    items = [(arch, r, gpu) for r in reqs]
    analysis = analyze_layers(LayerBatch.from_items(items))
    x = PhaseInputs.build(items, analysis, model_totals(analysis))
    assert x.collectives.tolist() == [0.0, 64.0, 64.0]
    assert x.sequences.tolist() == [1.0, 1.0, 16.0]
    base = PhysicsPrior(efficiency={"datacentre": [1.0, 1.0]}, launch_us={"vllm": 0.0}, step_ms={"vllm": 1.0},
                        sequence_us={"vllm": 0.0}, collective_us=0.0)
    more = PhysicsPrior(efficiency={"datacentre": [1.0, 1.0]}, launch_us={"vllm": 0.0}, step_ms={"vllm": 1.0},
                        sequence_us={"vllm": 30.0}, collective_us=25.0)
    lat0, _ = base.latency_s(x)
    lat1, _ = more.latency_s(x)
    steps = 64  # generated - 1 decode steps
    assert lat1[0, 1] - lat0[0, 1] == pytest.approx(steps * 30e-6)
    assert lat1[1, 1] - lat0[1, 1] == pytest.approx(steps * (30e-6 + 64 * 25e-6))
    assert lat1[2, 1] - lat0[2, 1] == pytest.approx(steps * (16 * 30e-6 + 64 * 25e-6))


def test_power_model_units_compute_bound_prefill_draws_more_than_memory_bound_decode() -> None:
    """Power model ``units``: utilisation = a_c x compute share + a_m x memory share of each GPU's
    time; stays between idle and the power limit on every GPU count."""
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100-sxm")
    items = [(arch, Request(batch_size=8, prompt_tokens=2048, generated_tokens=129, num_gpus=n, tensor_parallel=n), gpu)
             for n in (1, 2, 4)]
    analysis = analyze_layers(LayerBatch.from_items(items))
    x = PhaseInputs.build(items, analysis, model_totals(analysis))
    prior = PhysicsPrior(efficiency={"datacentre": [0.6, 0.6]}, activity=np.array([0.9, 0.8]))
    energy, lat = prior.energy_j(x)
    power = energy / lat / x.num_gpus[:, None]
    assert np.all(power[:, 0] > power[:, 1])  # compute-bound prefill above memory-bound decode
    assert np.all(power >= x.idle_w[:, None] - 1e-9) and np.all(power <= x.tdp_w[:, None] + 1e-9)
    _, busy = prior.latency_s(x)
    u = prior.utilisation(x, lat, busy)
    gpu_s = lat * x.num_gpus[:, None]
    want = np.clip(0.9 * np.minimum(x.compute_s / gpu_s, 1) + 0.8 * np.minimum(x.memory_s / gpu_s, 1), 0, 1)
    np.testing.assert_allclose(u, want)
    old = PhysicsPrior.from_state_dict({"efficiency": {}, "activity": [0.5, 0.5]})
    assert old.power_model == "phase" and old.collective_us == 0.0 and old.sequence_us == {}


def test_unseen_gpu_correction_is_held_to_its_groups_training_range() -> None:
    """A GPU outside the training domain gets at most the correction the training GPUs of its
    group (data-centre or edge) needed; a trained GPU keeps the network's correction."""
    from llmco2.prediction.targets import EnergyTarget

    arch = get_model("qwen2-0.5b")
    items = [(arch, Request(batch_size=1, prompt_tokens=64, generated_tokens=9), get_gpu(g)) for g in ("h100-sxm", "l4")]
    analysis = analyze_layers(LayerBatch.from_items(items))
    totals = model_totals(analysis)
    target = EnergyTarget(np.zeros(2), np.ones(2), group_bounds={"datacentre": [np.log(0.75), np.log(2.0)]})
    head = OutputHead(target, PhysicsPrior(efficiency={"datacentre": [0.5, 0.5]}), domain={"devices": ["h100-sxm"]})
    z = np.full((2, 2), np.log(0.3))  # the network asks for 0.3x the prior on both GPUs
    out = head.finish(z, items, analysis, totals)
    ratio = out.energy_j / out.prior_j
    np.testing.assert_allclose(ratio[0], 0.3)  # trained GPU: the network's correction
    np.testing.assert_allclose(ratio[1], 0.75)  # unseen L4: held at the data-centre minimum
    assert EnergyTarget.from_state_dict(target.state_dict()).group_bounds == target.group_bounds
    bounds = EnergyTarget.group_log_ratio_bounds(np.log([0.5, 2.0, 1.0, np.inf]), ["edge", "edge", "datacentre", "edge"])
    assert bounds == {"datacentre": [0.0, 0.0], "edge": [pytest.approx(np.log(0.5)), pytest.approx(np.log(2.0))]}


def test_same_die_siblings_in_the_catalog() -> None:
    """GH100, GA100 and GA102 parts find the seen GPU on their die; other dies find none."""
    from llmco2.specs.gpus import closest_same_die, same_die

    seen = [get_gpu(g) for g in ("a100-40gb", "a100-80gb", "a40", "gaudi2", "h100-sxm")]
    found = {g: closest_same_die(get_gpu(g), seen) for g in ("h200", "gh200", "h20", "a100-pcie-80gb", "a30", "rtx-3090", "l40s", "b200")}
    assert {g: (s.id if s else None) for g, s in found.items()} == {
        "h200": "h100-sxm", "gh200": "h100-sxm", "h20": "h100-sxm", "a100-pcie-80gb": "a100-80gb", "a30": "a100-40gb",
        "rtx-3090": "a40", "l40s": None, "b200": None}
    assert same_die(get_gpu("h200"), get_gpu("h100-sxm")) and not same_die(get_gpu("h100-sxm"), get_gpu("b200"))
    assert closest_same_die(get_gpu("h100-sxm"), [get_gpu("h100-sxm")]) is None  # itself is no sibling


def test_an_unseen_gpu_on_a_seen_die_takes_that_gpus_correction() -> None:
    """With the shipped checkpoint, a GH200 (unseen; GH100 like the seen H100 SXM and H200) gets
    the network's correction of its closest seen sibling on its own step physics, says so, and at
    batch 1 costs less per request than the H100 (same die, more bandwidth); a B200 (no seen
    sibling) keeps the step physics alone."""
    from llmco2.prediction.domain_notes import seen_sibling
    from llmco2.prediction.inference import load_inference
    from llmco2.prediction.loading import default_checkpoint_path

    model = load_inference(default_checkpoint_path())
    sibling = seen_sibling(model.head.domain, get_gpu("gh200"), "vllm")
    assert sibling is not None and sibling.id in ("h100-sxm", "h200")
    arch = get_model("llama3.1-8b")
    req = Request(batch_size=1, prompt_tokens=512, generated_tokens=256, engine="vllm")
    out = model.predict([(arch, req, get_gpu(g)) for g in (sibling.id, "gh200", "b200", "h100-sxm")])
    ratio = out.energy_j / out.prior_j
    assert ratio[0] == pytest.approx(ratio[1], rel=1e-5) and abs(ratio[0, 1] - 1.0) > 0.02
    assert ratio[2] == pytest.approx([1.0, 1.0])
    assert out.energy_j[1].sum() < out.energy_j[3].sum()
    assert f"correction learnt on {sibling.id} (the same die)" in " ".join(out.notes[1])
    assert "extrapolated through its peak throughput" in " ".join(out.notes[2])


def test_a_sibling_needs_the_engine_seen_on_it() -> None:
    """The correction carries only where the training rows showed the sibling with the request's
    engine (an engine never seen anywhere is the network's ``unknown`` level, trained on every
    GPU); a domain without its GPUs' engines gives no sibling."""
    from llmco2.prediction.domain_notes import seen_sibling

    domain = {"devices": ["a100-80gb", "h100-sxm"], "engines": ["hf", "vllm-eager"],
              "device_engines": {"a100-80gb": ["vllm-eager"], "h100-sxm": ["hf"]}}
    assert seen_sibling(domain, get_gpu("a100-pcie-80gb"), "vllm-eager").id == "a100-80gb"
    assert seen_sibling(domain, get_gpu("a100-pcie-80gb"), "hf") is None  # hf ran on the H100 only
    assert seen_sibling(domain, get_gpu("h200"), "some-new-engine").id == "h100-sxm"
    assert seen_sibling(domain, get_gpu("h100-sxm"), "hf") is None  # a seen GPU is its own
    assert seen_sibling({k: v for k, v in domain.items() if k != "device_engines"}, get_gpu("h200"), "hf") is None
