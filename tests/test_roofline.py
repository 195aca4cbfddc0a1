"""Roofline (paper Eq 8) and seed 004's A100 ridge point."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.analytic.layer import analyze_layer
from llmco2.analytic.roofline import BOUNDS, attainable_performance, ridge_point, roofline_point
from llmco2.specs import Request, get_gpu


def test_seed004_a100_ridge_point() -> None:
    a100 = get_gpu("a100-80gb")
    assert a100.peak_dense_tops["fp16"] == 312.0 and a100.memory_bandwidth_gb_s == 2039.0
    assert round(a100.ridge_point("fp16")) == 153  # 312e12 / 2039e9 = 153.0 FLOPs/byte
    assert ridge_point(312e12, 2039e9) == pytest.approx(153.016, abs=1e-3)


def test_eq8_attainable_performance() -> None:
    # below the ridge: BW * AI; at or above: the peak
    assert attainable_performance(10.0, 312e12, 2039e9) == pytest.approx(10.0 * 2039e9)
    assert attainable_performance(200.0, 312e12, 2039e9) == 312e12
    assert attainable_performance(312e12 / 2039e9, 312e12, 2039e9) == 312e12


def test_network_kernel_uses_network_ridge() -> None:
    p = roofline_point(ops=1e6, mem_bytes=4e6, net_bytes=2e6, peak_ops_per_s=312e12, mem_bw_bytes_per_s=2039e9,
                       net_bw_bytes_per_s=600e9, network_kernel=True)
    assert p.intensity == pytest.approx(0.5)
    assert p.perf_ops_per_s == pytest.approx(0.5 * 600e9)
    assert p.time_s == pytest.approx(max(1e6 / 312e12, 4e6 / 2039e9, 2e6 / 600e9))
    assert BOUNDS[int(p.bound)] == "network"


def test_prefill_projection_compute_bound_decode_memory_bound(llama8b, a100) -> None:
    res = analyze_layer(llama8b, Request(batch_size=1, prompt_tokens=2048, generated_tokens=64), a100)
    pre, dec = res.roofline["prefill"]["q_proj"], res.roofline["decode"]["q_proj"]
    assert BOUNDS[int(pre.bound[0])] == "compute" and pre.perf_ops_per_s[0] == 312e12
    assert BOUNDS[int(dec.bound[0])] == "memory"
    # decode q_proj at batch 1: ops 2*H*H per step, bytes H*H*2 weights + 2*H*2 activations per step
    ai = (2 * 4096 * 4096) / (4096 * 4096 * 2 + 4096 * 2 + 4096 * 2)
    assert dec.intensity[0] == pytest.approx(ai)
    assert dec.perf_ops_per_s[0] == pytest.approx(2039e9 * ai)
    assert np.all(res.roofline["decode"]["fuse_attn"].time_s > 0)
