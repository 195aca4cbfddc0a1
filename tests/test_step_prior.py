"""The step physics as the network's prior for data-centre GPUs (:mod:`llmco2.physics.step_prior`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.physics.priors import PhaseInputs, PhysicsPrior
from llmco2.physics.step_physics import EngineOverhead, StepParams, step_cost
from llmco2.physics.step_prior import StepPrior, step_phase_cost
from llmco2.physics.step_work import step_shapes
from llmco2.prediction.head import OutputHead
from llmco2.prediction.targets import EnergyTarget
from llmco2.specs import Request, get_gpu, get_model

PARAMS = StepParams(eta_compute=0.5, eta_memory=0.85, kernel_gap_s=4e-6, power_base=0.05, power_compute=0.9,
                    memory_pj_per_byte=150.0, engines={"vllm": EngineOverhead(1e-3, 40e-6, 2e-6, True)})


def _items() -> list:
    arch = get_model("llama3.1-8b")
    req = Request(batch_size=8, prompt_tokens=512, generated_tokens=129, engine="vllm")
    return [(arch, req, get_gpu("h100-sxm")), (arch, req, get_gpu("a100-40gb")), (arch, req, get_gpu("jetson-orin"))]


def _analysis(items: list):
    a = analyze_layers(LayerBatch.from_items(items, validate=False))
    return a, model_totals(a)


def test_a_request_is_one_prefill_step_and_generated_minus_one_decode_steps() -> None:
    items = _items()
    a, totals = _analysis(items)
    energy, latency = step_phase_cost(PARAMS, a, PhaseInputs.build(items, a, totals))
    pre = step_cost(step_shapes(items, "prefill"), PARAMS)
    dec = step_cost(step_shapes(items, "decode", 128.0), PARAMS)
    # the same formulas as the serving physics (idle power within the two modules' rounding of 120/700)
    np.testing.assert_allclose(latency[:, 0], pre.time_s, rtol=1e-9)
    np.testing.assert_allclose(latency[:, 1], 128 * dec.time_s, rtol=1e-9)
    np.testing.assert_allclose(energy, np.stack([pre.energy_j, 128 * dec.energy_j], axis=1), rtol=0.01)


def test_memory_power_is_charged_per_byte_and_held_at_the_power_limit() -> None:
    items = _items()[:2]
    shapes = step_shapes(items, "decode", 128.0)
    without = step_cost(shapes, replace(PARAMS, memory_pj_per_byte=0.0))
    with_bytes = step_cost(shapes, PARAMS)
    moved_w = 150e-12 * shapes.memory_s.sum(axis=1) * shapes.mem_bw_bytes_per_s / with_bytes.time_s
    np.testing.assert_allclose(with_bytes.power_w - without.power_w, np.minimum(moved_w, shapes.tdp_w - without.power_w), rtol=1e-6)
    huge = step_cost(shapes, replace(PARAMS, memory_pj_per_byte=1e6))
    np.testing.assert_allclose(huge.power_w, shapes.tdp_w * shapes.num_gpus)


def test_head_uses_the_step_physics_for_data_centre_gpus_and_not_the_network_on_unseen_ones() -> None:
    items = _items()
    a, totals = _analysis(items)
    head = OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), PhysicsPrior(), domain={"devices": ["h100-sxm", "jetson-orin"]},
                      step=StepPrior(PARAMS))
    plain = OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), PhysicsPrior(), domain={"devices": ["h100-sxm", "jetson-orin"]})
    prior, _, x = head.prior(items, a, totals)
    physical, _, _ = plain.prior(items, a, totals)
    expected, _ = step_phase_cost(PARAMS, a, x)
    np.testing.assert_allclose(prior[:2], expected[:2])  # data-centre GPUs: the step physics
    np.testing.assert_allclose(prior[2], physical[2])  # the edge module keeps the per-device prior
    z = np.full((3, 2), 0.5)  # the network asks for exp(0.5) more energy everywhere
    out = head.finish(z, items, a, totals)
    np.testing.assert_allclose(out.energy_j[0], np.exp(0.5) * prior[0])  # a trained GPU: corrected
    np.testing.assert_allclose(out.energy_j[1], prior[1])  # the unseen A100: the step physics alone
    np.testing.assert_allclose(out.energy_j[2], np.exp(0.5) * prior[2])


def test_step_prior_round_trips_through_the_head_state() -> None:
    head = OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), PhysicsPrior(), step=StepPrior(PARAMS))
    back = OutputHead.from_state_dict(head.state_dict())
    assert back.step is not None and back.step.params == PARAMS
    assert OutputHead.from_state_dict(OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), PhysicsPrior()).state_dict()).step is None


def test_old_step_files_read_without_per_byte_memory_power() -> None:
    raw = PARAMS.to_dict()
    del raw["memory_pj_per_byte"]
    assert StepParams.from_dict(raw).memory_pj_per_byte == 0.0
    with pytest.raises(KeyError):
        StepParams.from_dict({k: v for k, v in raw.items() if k != "eta_compute"})


def test_a_request_whose_kv_cache_does_not_fit_is_costed_as_waves_of_the_sequences_that_do() -> None:
    """Llama-2-7B with 1,024 + 1,024 tokens on an A100-40GB holds 20 sequences beside its weights (as the fitted
    isolated rows are costed: tests/test_step_isolated.py): batch 64 under vLLM costs 3.2 times batch 20 in both
    phases; under HF generate (a static batch) it is costed as one batch of 64."""
    arch, gpu = get_model("llama2-7b"), get_gpu("a100-40gb")
    items = [(arch, Request(batch_size=b, prompt_tokens=1024, generated_tokens=1024, engine=e), gpu)
             for b, e in ((64, "vllm"), (20, "vllm"), (64, "hf"))]
    a, totals = _analysis(items)
    params = replace(PARAMS, engines={**PARAMS.engines, "hf": EngineOverhead(1e-3, 40e-6, 2e-6, False)})
    energy, latency = step_phase_cost(params, a, PhaseInputs.build(items, a, totals))
    np.testing.assert_allclose(energy[0], 3.2 * energy[1], rtol=1e-9)
    np.testing.assert_allclose(latency[0], 3.2 * latency[1], rtol=1e-9)
    assert latency[2, 1] < latency[0, 1]  # the static batch of 64 at once: fewer, longer decode steps
