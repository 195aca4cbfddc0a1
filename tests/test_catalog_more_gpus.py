"""Golden figures of the GPUs added for measurements people publish on them: AWS's A10G, the H800 and
A800 export parts, GB200's Blackwell GPU, AMD's MI325X, the L20, the GeForce RTX 4080, Blackwell Ultra (B300,
GB300), AMD's MI355X and the RTX PRO 6000 Blackwell."""

from __future__ import annotations

import pytest

from llmco2.specs import get_gpu, static_power_w
from llmco2.specs.gpu_power import device_class

# (memory GB, bandwidth GB/s, dense fp16 TFLOP/s, power limit W, memory type, form factor, device class)
GOLDEN = {
    "a10g": (24.0, 600.0, 70.0, 300.0, "GDDR6", "PCIe", "gddr-pcie"),
    "h800": (80.0, 3350.0, 989.5, 700.0, "HBM3", "SXM5", "hbm"),
    "a800-80gb": (80.0, 2039.0, 312.0, 400.0, "HBM2e", "SXM4", "hbm"),
    "gb200": (186.0, 8000.0, 2500.0, 1200.0, "HBM3e", "superchip", "hbm"),
    "mi325x": (256.0, 6000.0, 1307.4, 1000.0, "HBM3e", "OAM", "hbm"),
    "l20": (48.0, 864.0, 119.0, 275.0, "GDDR6", "PCIe", "gddr-pcie"),
    "rtx-4080": (16.0, 716.8, 97.5, 320.0, "GDDR6X", "PCIe", "consumer"),
    "b300": (270.0, 7700.0, 2250.0, 1100.0, "HBM3e", "SXM6", "hbm"),
    "gb300": (279.0, 8000.0, 2500.0, 1400.0, "HBM3e", "superchip", "hbm"),
    "mi355x": (288.0, 8000.0, 2500.0, 1400.0, "HBM3e", "OAM", "hbm"),
    "rtx-pro-6000": (96.0, 1792.0, 503.8, 600.0, "GDDR7", "PCIe", "gddr-pcie"),
}


@pytest.mark.parametrize("gpu_id", sorted(GOLDEN))
def test_golden_figures_and_every_number_sourced(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    memory, bandwidth, fp16, tdp, memory_type, form_factor, cls = GOLDEN[gpu_id]
    assert (gpu.memory_size_gb, gpu.memory_bandwidth_gb_s, gpu.tdp_w) == (memory, bandwidth, tdp)
    assert (gpu.memory_type, gpu.form_factor, device_class(gpu)) == (memory_type, form_factor, cls)
    assert gpu.peak_dense_tops["fp16"] == pytest.approx(fp16)
    numbers = [k for k in ("memory_size_gb", "memory_bandwidth_gb_s", "tdp_w", "die_area_mm2", "transistors_billion",
                           "process_node_nm", "gpus_per_node", "release_year", "interconnect_bandwidth_gb_s",
                           "pcie_bandwidth_gb_s", "idle_power_w", "module_power_w") if getattr(gpu, k) is not None]
    for key in (*numbers, *(f"peak_dense_tops.{d}" for d in gpu.peak_dense_tops)):
        assert "http" in gpu.sources[key], (gpu_id, key)


@pytest.mark.parametrize("alias, gpu_id", [
    ("NVIDIA A10G", "a10g"), ("a10g", "a10g"), ("A10", "a10"), ("NVIDIA H800", "h800"), ("h100", "h100-sxm"),
    ("NVIDIA A800", "a800-80gb"), ("NVIDIA GB200", "gb200"), ("AMD Instinct MI325X", "mi325x"), ("mi300x", "mi300x"),
    ("NVIDIA L20", "l20"), ("NVIDIA GeForce RTX 4080", "rtx-4080"), ("rtx 4090", "rtx-4090"),
    ("AMD Instinct MI300X VF", "mi300x"),  # as amd-smi names an SR-IOV virtual function
])
def test_aliases_resolve_without_taking_a_neighbours_name(alias: str, gpu_id: str) -> None:
    assert get_gpu(alias).id == gpu_id


def test_export_parts_differ_from_their_parents_only_in_the_link() -> None:
    """H800 and A800 keep the H100 SXM's and A100 SXM's compute and memory; NVLink is cut to 400 GB/s."""
    for part, parent in (("h800", "h100-sxm"), ("a800-80gb", "a100-80gb")):
        a, b = get_gpu(part), get_gpu(parent)
        assert a.peak_dense_tops["bf16"] == b.peak_dense_tops["bf16"]
        assert (a.memory_bandwidth_gb_s, a.tdp_w) == (b.memory_bandwidth_gb_s, b.tdp_w)
        assert a.interconnect_bandwidth_gb_s == 400.0 < b.interconnect_bandwidth_gb_s
        assert static_power_w(part)[0] == static_power_w(parent)[0]  # the same die, mounted alike


def test_gb200_power_scope() -> None:
    """The physics uses one Blackwell GPU's own limit; the superchip's figure (CPU, LPDDR5X, two GPUs) is recorded apart."""
    gb200 = get_gpu("gb200")
    assert gb200.tdp_w == 1200.0 > get_gpu("b200").tdp_w
    assert gb200.module_power_w is not None and gb200.module_power_w > 2 * gb200.tdp_w
    assert gb200.power_scope and "Grace CPU" in gb200.power_scope and "physics uses tdp_w" in gb200.power_scope
    assert gb200.peak_dense_tops["fp4"] == 4 * gb200.peak_dense_tops["bf16"]


def test_an_nvl72_rack_is_one_nvlink_domain() -> None:
    """A tensor- or expert-parallel group of GB200 or GB300 GPUs may span the 72-GPU rack, not only a 4-GPU tray."""
    for gpu_id in ("gb200", "gb300"):
        assert get_gpu(gpu_id).gpus_per_node == 72 and get_gpu(gpu_id).link_kind == "fabric"


def test_a10g_is_not_the_a10() -> None:
    """AWS's A10G runs at twice the A10's power limit and at half its fp16 tensor rate (GeForce-class accumulate)."""
    a10g, a10 = get_gpu("a10g"), get_gpu("a10")
    assert a10g.tdp_w == 2 * a10.tdp_w
    assert a10g.peak_dense_tops["fp16"] < a10.peak_dense_tops["fp16"]
    assert static_power_w("a10g") == (60.0, "catalog idle_power_w of a10g (LOADED-MODEL IDLE)")


def test_rtx_4080_keeps_the_geforce_rules() -> None:
    gpu = get_gpu("rtx-4080")
    assert gpu.pcie_p2p is False and gpu.link_kind == "pcie"
    assert gpu.fp16_accumulate_dense_tops == pytest.approx(2 * gpu.peak_dense_tops["fp16"], rel=1e-3)
