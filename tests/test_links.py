"""Tensor-parallel all-reduces cost what the GPUs' actual link gives: golden values of the link
formulas (llmco2.specs.links), the catalog's link fields and sources, NVLink and single-GPU step
shapes unchanged, and PCIe without peer-to-peer costing more than with it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.physics.hardware_rows import HardwareRows
from llmco2.physics.link_rows import LinkRows
from llmco2.physics.step_physics import StepParams, step_cost
from llmco2.physics.step_work import shapes_of, step_shapes
from llmco2.specs import Request, engine_id, get_gpu, get_model, gpu_catalog
from llmco2.specs.gpus import LINK_KINDS, gpu_from_dict
from llmco2.specs.links import (
    NVLINK,
    PCIE_HOST,
    PCIE_P2P,
    allreduce_bandwidth_bytes_per_s,
    allreduce_extra_latency_s,
    allreduce_latency_s,
    allreduce_path,
    link_table,
)

NVLINK_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200")
GEFORCE = ("rtx-3090", "rtx-4090", "rtx-5090")

# (gpu, tp) -> (path, bandwidth bytes/s, all-reduce latency us, latency beyond NVLink's us)
# latency = 6.6 + 2 (tp - 1) x step (nvlink 0.6, pcie-p2p 1.0, pcie-host 2.5 us); bandwidth in the catalog's
# total-bidirectional unit, through host memory at half the PCIe figure.
GOLDEN = {
    ("h100-sxm", 8): (NVLINK, 900e9, 6.6 + 14 * 0.6, 0.0),
    ("a40", 2): (NVLINK, 112.5e9, 6.6 + 2 * 0.6, 0.0),
    ("a40", 4): (PCIE_P2P, 64e9, 6.6 + 6 * 1.0, 6 * 0.4),
    ("rtx-4090", 2): (PCIE_HOST, 32e9, 6.6 + 2 * 2.5, 2 * 1.9),
    ("rtx-4090", 4): (PCIE_HOST, 32e9, 6.6 + 6 * 2.5, 6 * 1.9),
    ("rtx-4090", 8): (PCIE_HOST, 32e9, 6.6 + 14 * 2.5, 14 * 1.9),
    ("l40s", 4): (PCIE_P2P, 64e9, 6.6 + 6 * 1.0, 6 * 0.4),
    ("rtx-3090", 2): (NVLINK, 112.5e9, 6.6 + 2 * 0.6, 0.0),
    ("rtx-3090", 4): (PCIE_HOST, 32e9, 6.6 + 6 * 2.5, 6 * 1.9),
    ("rtx-5090", 2): (PCIE_HOST, 64e9, 6.6 + 2 * 2.5, 2 * 1.9),
    ("h100-pcie", 4): (PCIE_P2P, 128e9, 6.6 + 6 * 1.0, 6 * 0.4),
}


@pytest.mark.parametrize(("gpu_id", "tp"), sorted(GOLDEN))
def test_link_golden_values(gpu_id: str, tp: int) -> None:
    path, bandwidth, latency_us, extra_us = GOLDEN[(gpu_id, tp)]
    gpu = get_gpu(gpu_id)
    assert allreduce_path(gpu, tp) == path
    assert allreduce_bandwidth_bytes_per_s(gpu, tp) == pytest.approx(bandwidth, rel=1e-12)
    assert allreduce_latency_s(gpu, tp) == pytest.approx(latency_us * 1e-6, rel=1e-9)
    assert allreduce_extra_latency_s(gpu, tp) == pytest.approx(extra_us * 1e-6, rel=1e-9, abs=1e-15)


def test_one_gpu_has_no_all_reduce_latency() -> None:
    for gpu in gpu_catalog():
        assert allreduce_latency_s(gpu, 1) == 0.0 and allreduce_extra_latency_s(gpu, 1) == 0.0


@pytest.mark.parametrize("gpu_id", NVLINK_GPUS)
def test_nvlink_gpus_keep_their_interconnect_figure_at_every_degree(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.link_kind == "fabric"
    for tp in (1, 2, 4, 8):
        assert allreduce_bandwidth_bytes_per_s(gpu, tp) == gpu.interconnect_bytes_per_s  # exactly
        assert allreduce_extra_latency_s(gpu, tp) == 0.0


def test_catalog_link_fields_have_sources() -> None:
    table = link_table()
    assert set(table.paths) == {NVLINK, PCIE_P2P, PCIE_HOST}
    assert table.paths[NVLINK].step_latency_us < table.paths[PCIE_P2P].step_latency_us < table.paths[PCIE_HOST].step_latency_us
    assert table.paths[PCIE_HOST].bandwidth_share < table.paths[PCIE_P2P].bandwidth_share == 1.0
    for path in table.paths.values():
        assert "http" in path.sources["step_latency_us"] and path.sources["bandwidth_share"], path.id
    assert "http" in table.paths[PCIE_HOST].sources["bandwidth_share"] and "http" in table.sources["allreduce_base_latency_us"]
    for gpu in gpu_catalog():
        assert gpu.link_kind in LINK_KINDS and gpu.sources.get("link_kind"), gpu.id
        if gpu.link_kind in ("pcie", "bridge-pairs"):
            assert gpu.sources.get("pcie_p2p"), gpu.id
        if gpu.link_kind == "pcie":  # a PCIe-only card quotes its PCIe figure as its interconnect
            assert gpu.interconnect_bandwidth_gb_s == gpu.pcie_bandwidth_gb_s, gpu.id
    for gpu_id in GEFORCE:
        gpu = get_gpu(gpu_id)
        assert not gpu.pcie_p2p and "http" in gpu.sources["pcie_p2p"], gpu_id
    assert {g.id for g in gpu_catalog() if g.link_kind == "bridge-pairs"} == {
        "a30", "a40", "a100-pcie-40gb", "a100-pcie-80gb", "h100-pcie", "h100-nvl", "rtx-a6000", "rtx-3090"}


def _raw(**kw: object) -> dict:
    raw = {"id": "x", "name": "NVIDIA GeForce X", "vendor": "NVIDIA", "architecture": "a", "form_factor": "PCIe",
           "memory_type": "GDDR6", "memory_size_gb": 24.0, "memory_bandwidth_gb_s": 900.0, "interconnect": "PCIe Gen4 x16",
           "interconnect_bandwidth_gb_s": 64.0, "tdp_w": 300.0, "process_node_nm": 5, "gpus_per_node": 4, "release_year": 2024,
           "peak_dense_tops": {"fp16": 100.0}, "pcie_bandwidth_gb_s": 64.0}
    raw.update(kw)
    raw["sources"] = {k: "s" for k, v in raw.items() if isinstance(v, float | int) and not isinstance(v, bool)} | {"peak_dense_tops.fp16": "s"}
    return raw


def test_a_gpu_file_without_link_fields_gets_them_from_its_interconnect_text() -> None:
    geforce = gpu_from_dict(_raw())
    assert (geforce.link_kind, geforce.pcie_p2p) == ("pcie", False)
    bridged = gpu_from_dict(_raw(name="Card", interconnect="NVLink bridge (GPU pairs); PCIe Gen4 x16 otherwise"))
    assert (bridged.link_kind, bridged.pcie_p2p) == ("bridge-pairs", True)
    assert gpu_from_dict(_raw(interconnect="NVLink 4", interconnect_bandwidth_gb_s=900.0)).link_kind == "fabric"
    assert gpu_from_dict(_raw(interconnect="none", interconnect_bandwidth_gb_s=0.0)).link_kind == "none"
    with pytest.raises(ValueError, match="link_kind"):
        gpu_from_dict(_raw(link_kind="infiniband"))
    with pytest.raises(ValueError, match="pcie_p2p = false without a source"):
        gpu_from_dict(_raw(pcie_p2p=False))


def _items(gpu_id: str, tp: int, batch: int = 8, prompt: int = 512, model: str = "llama3.1-8b") -> list:
    req = Request(batch_size=batch, prompt_tokens=prompt, generated_tokens=9, num_gpus=tp, tensor_parallel=tp, engine="vllm")
    return [(get_model(model), req, get_gpu(gpu_id))]


def _old_shapes(items: list, phase: str, steps: float):
    """Step shapes as before per-row links: the analytic layer's interconnect figure, no link latency."""
    b = LayerBatch.from_items(items, validate=False)
    hw = replace(HardwareRows.of([g for _, _, g in items]), links=None)
    return shapes_of(analyze_layers(b), phase, steps, [engine_id(r.engine) for _, r, _ in items], hw)


@pytest.mark.parametrize("gpu_id", [*NVLINK_GPUS, "rtx-4090", "l40s", "a40"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_nvlink_rows_and_single_gpu_rows_are_unchanged(gpu_id: str, phase: str) -> None:
    steps = 1.0 if phase == "prefill" else 8.0
    degrees = (1, 2, 4, 8) if gpu_id in NVLINK_GPUS else (1,)
    items = [item for tp in degrees for item in _items(gpu_id, tp)]
    new, old = step_shapes(items, phase, steps), _old_shapes(items, phase, steps)
    assert np.array_equal(new.network_s, old.network_s)
    p = StepParams()
    assert np.array_equal(step_cost(new, p).time_s, step_cost(old, p).time_s)


def test_pcie_without_peer_access_costs_more_per_all_reduce_than_with_it() -> None:
    p = StepParams()
    rtx = get_gpu("rtx-4090")
    with_p2p = replace(rtx, pcie_p2p=True)
    for phase, steps in (("prefill", 1.0), ("decode", 8.0)):
        for tp in (2, 4, 8):
            host = step_shapes(_items("rtx-4090", tp), phase, steps)
            p2p = step_shapes([(a, r, with_p2p) for a, r, _ in _items("rtx-4090", tp)], phase, steps)
            l40s = step_shapes(_items("l40s", tp), phase, steps)  # the same PCIe Gen4 x16 figure, with P2P
            assert host.network_s.sum() > p2p.network_s.sum() and host.network_s.sum() > l40s.network_s.sum()
            assert step_cost(host, p).time_s[0] > step_cost(p2p, p).time_s[0]
    # a long prefill is bandwidth-bound: through host memory its all-reduces take about twice as long
    host = step_shapes(_items("rtx-4090", 2, batch=1, prompt=4096), "prefill")
    p2p = step_shapes([(a, r, with_p2p) for a, r, _ in _items("rtx-4090", 2, batch=1, prompt=4096)], "prefill")
    assert host.network_s.sum() / p2p.network_s.sum() == pytest.approx(2.0, rel=0.02)
    # a batch-1 decode step is latency-bound: the extra latency of 2 all-reduces a layer dominates its network time
    host = step_shapes(_items("rtx-4090", 4, batch=1), "decode", 8.0)
    extra = 2 * 32 * allreduce_extra_latency_s(rtx, 4)
    assert extra > 0.9 * (host.network_s.sum() - step_shapes(
        [(a, r, with_p2p) for a, r, _ in _items("rtx-4090", 4, batch=1)], "decode", 8.0).network_s.sum())


def test_bridged_pairs_cross_pcie_beyond_two_gpus() -> None:
    # per byte, a 4-GPU ring over PCIe costs more than a pair over the bridge (the bridge is 112.5 GB/s, PCIe 64)
    gpu = get_gpu("a40")
    assert allreduce_bandwidth_bytes_per_s(gpu, 4) < allreduce_bandwidth_bytes_per_s(gpu, 2)
    tp2, tp4 = (step_shapes(_items("a40", tp, batch=1, prompt=2048), "prefill") for tp in (2, 4))
    bytes_tp2, bytes_tp4 = 2048 / 2 * 4096 * 1 * 2, 2048 / 4 * 4096 * 3 * 2  # tokens / tp x hidden x (tp - 1) x bf16
    per_byte2 = tp2.network_s.sum() / (64 * bytes_tp2)
    per_byte4 = (tp4.network_s.sum() - 64 * allreduce_extra_latency_s(gpu, 4)) / (64 * bytes_tp4)
    assert per_byte4 == pytest.approx(per_byte2 * 112.5 / 64, rel=1e-9)


def test_link_rows_evaluate_each_gpu_and_degree_once() -> None:
    gpus = [get_gpu("rtx-4090"), get_gpu("h100-sxm"), get_gpu("rtx-4090")]
    rows = LinkRows.of(gpus)
    assert len(rows.gpus) == 2 and rows.code.tolist() == [0, 1, 0]
    bw, extra = rows.allreduce(np.array([2.0, 8.0, 4.0]))
    assert bw.tolist() == [32e9, 900e9, 32e9]
    assert extra.tolist() == [allreduce_extra_latency_s(gpus[0], 2), 0.0, allreduce_extra_latency_s(gpus[0], 4)]
    assert rows.take(np.array([2])).allreduce(4.0)[0].tolist() == [32e9]
    assert rows == LinkRows((gpus[1], gpus[0]), np.array([1, 0, 1])) and rows != rows.take(np.array([1, 0, 2]))
    assert np.array_equal(rows, LinkRows.of(list(gpus)))  # as tests compare the fields of HardwareRows
    empty = LinkRows.of([])
    assert empty.allreduce(np.zeros(0))[0].shape == (0,)


@pytest.mark.parametrize(("gpu_id", "tp"), [("h100-sxm", 8), ("a100-40gb", 4), ("l40s", 4)])
def test_an_all_reduce_sends_a_ring_s_bytes_over_one_direction_of_the_link(gpu_id: str, tp: int) -> None:
    """Golden: a prefill of 2048 tokens of Llama-3.1-8B (hidden 4096, 32 layers, bf16) at tensor parallelism
    ``tp``: each of its 2 all-reduces a layer sends 2 (tp - 1) / tp x S bytes, S = 2048 x 4096 x 2 bytes,
    over half the quoted bidirectional link (NCCL's bus-bandwidth convention), plus the path's latency."""
    gpu = get_gpu(gpu_id)
    shapes = step_shapes(_items(gpu_id, tp, batch=1, prompt=2048), "prefill")
    message = 2048 * 4096 * 2
    ring = 2 * (tp - 1) / tp * message
    wire_s = 2 * 32 * ring / (0.5 * allreduce_bandwidth_bytes_per_s(gpu, tp))
    latency_s = 2 * 32 * allreduce_extra_latency_s(gpu, tp)
    assert shapes.network_s.sum() == pytest.approx(wire_s + latency_s, rel=1e-9)
    # the paper's network bytes (the reduce-scatter alone) stay the analytic feature
    a = analyze_layers(LayerBatch.from_items(_items(gpu_id, tp, batch=1, prompt=2048), validate=False))
    assert float(a.costs["prefill"]["all_reduce_attn"].net_bytes[0]) == pytest.approx((tp - 1) / tp * message, rel=1e-12)
