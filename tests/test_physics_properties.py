"""Consistency a user can rely on, as properties of the step physics with the shipped constants
(Hypothesis over models, GPUs, batches and lengths): energy rises with generated tokens; power
lies between idle and the limit; a GPU at least as good as another in every catalog figure (same
power limit and process) is never costlier per token; no power term follows the power limit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmco2.physics.step_physics import step_cost
from llmco2.physics.step_work import step_shapes
from llmco2.serving.physics_params import shipped_params
from llmco2.specs import Request, get_gpu, get_model
from llmco2.specs.gpu_power import static_power_w

MODELS = ["llama3.1-8b", "qwen2-7b", "mixtral-8x7b", "llama3.1-70b", "gemma2-9b"]
GPUS = ["h100-sxm", "a100-80gb", "a100-40gb", "l40s", "a40", "h200", "gh200", "b200", "l4", "v100-sxm2-32gb", "rtx-4090"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fits(model: str, gpu: str, gpus: int) -> bool:
    arch, dev = get_model(model), get_gpu(gpu)
    return arch.param_count() * 2 < 0.8 * dev.memory_bytes * gpus


def _request_energy(model, gpu, gpus, batch, prompt, gen) -> tuple[float, float]:
    """(energy J, latency s) of a whole request from the step physics: a prefill and gen - 1 decode steps."""
    p = shipped_params()
    arch, dev = get_model(model), get_gpu(gpu)
    req = Request(batch_size=batch, prompt_tokens=prompt, generated_tokens=gen, num_gpus=gpus, weight_dtype="fp16",
                  engine="vllm")
    pre = step_cost(step_shapes([(arch, req, dev)], "prefill"), p)
    e, t = float(pre.energy_j[0]), float(pre.time_s[0])
    if gen > 1:
        dec = step_cost(step_shapes([(arch, req, dev)], "decode", float(gen - 1)), p)
        e += float(dec.energy_j[0]) * (gen - 1)
        t += float(dec.time_s[0]) * (gen - 1)
    return e, t


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), gpus=st.sampled_from([1, 2, 4, 8]),
       batch=st.integers(1, 256), prompt=st.integers(1, 4096), gen=st.integers(2, 1024), extra=st.integers(1, 512))
def test_energy_rises_with_generated_tokens_and_power_stays_between_idle_and_the_limit(model, gpu, gpus, batch, prompt, gen,
                                                                                         extra):
    if not _fits(model, gpu, gpus):
        return
    e1, t1 = _request_energy(model, gpu, gpus, batch, prompt, gen)
    e2, t2 = _request_energy(model, gpu, gpus, batch, prompt, gen + extra)
    assert e2 > e1 and t2 > t1
    dev = get_gpu(gpu)
    for e, t in ((e1, t1), (e2, t2)):
        power = e / t / gpus
        assert static_power_w(dev)[0] * (1 - 1e-9) <= power <= dev.tdp_w * (1 + 1e-9)


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), batch=st.integers(1, 256), prompt=st.integers(1, 4096),
       gen=st.integers(2, 512), bw=st.floats(1.0, 3.0), peak=st.floats(1.0, 3.0), idle=st.floats(0.5, 1.0))
def test_a_gpu_at_least_as_good_in_every_figure_is_never_costlier_per_token(model, gpu, batch, prompt, gen, bw, peak, idle):
    """More bandwidth, higher peaks and a lower idle draw at the same power limit and process: never more J per token."""
    if not _fits(model, gpu, 8):
        return
    dev = get_gpu(gpu)
    better = replace(dev, id=f"{dev.id}-better", memory_bandwidth_gb_s=dev.memory_bandwidth_gb_s * bw,
                     peak_dense_tops={k: v * peak for k, v in dev.peak_dense_tops.items()},
                     idle_power_w=static_power_w(dev)[0] * idle, interconnect_bandwidth_gb_s=dev.interconnect_bandwidth_gb_s * bw)
    gpus = next(n for n in (1, 2, 4, 8) if _fits(model, gpu, n))
    base = _request_energy(model, dev, gpus, batch, prompt, gen)[0]
    ours = _request_energy(model, better, gpus, batch, prompt, gen)[0]
    assert ours <= base * (1 + 1e-9)


def test_the_same_die_costs_the_same_whatever_the_module_figure():
    """GH200's GPU is the H100's die: with the same limit figure and memory it is predicted alike, and
    the H200 (same die, more bandwidth, HBM3e) costs less per token than the H100 at batch 1."""
    h100 = _request_energy("llama3.1-8b", "h100-sxm", 1, 1, 512, 256)[0]
    h200 = _request_energy("llama3.1-8b", "h200", 1, 1, 512, 256)[0]
    assert h200 < h100
    module = replace(get_gpu("h100-sxm"), id="h100-on-a-1000w-module", tdp_w=1000.0)
    assert np.isclose(_request_energy("llama3.1-8b", module, 1, 1, 512, 256)[0], h100)
