"""GPU catalog power fields: sourced idle figures, the static-power fallback (never scaled by the power limit),
power-limit scope of superchips, and the golden figures of the GPUs added with them."""

from __future__ import annotations

import dataclasses

import pytest

from llmco2.specs import get_gpu, gpu_catalog, static_power_w
from llmco2.specs.gpu_power import DEVICE_CLASSES, IDLE_KINDS, STATIC_POWER_FALLBACK_W, class_idle_medians, device_class
from llmco2.specs.gpus import gpu_from_dict

# Sourced idle figures (W): each is quoted in the entry's [gpu.sources] idle_power_w string.
SOURCED_IDLE_W = {
    "h100-sxm": 120.0, "a100-80gb": 73.9, "a100-pcie-80gb": 80.0, "gaudi2": 88.0, "h200": 122.0, "h100-pcie": 80.0, "mi300x": 128.0, "b200": 233.6, "v100-sxm2-32gb": 53.0, "l40s": 105.85, "a40": 110.0,
    "t4": 37.0, "l4": 28.0, "rtx-3090": 25.5, "rtx-5090": 22.0, "rk3588-npu": 4.5, "a10g": 60.0,
}
# New entries: (memory GB, bandwidth GB/s, dense fp16 TFLOP/s, power limit W, memory type, form factor).
NEW_GPUS = {
    "a100-pcie-40gb": (40.0, 1555.0, 312.0, 250.0, "HBM2", "PCIe"),
    "v100-sxm2-32gb": (32.0, 900.0, 125.0, 300.0, "HBM2", "SXM2"),
    "v100-pcie-32gb": (32.0, 900.0, 112.0, 250.0, "HBM2", "PCIe"),
    "rtx-5090": (32.0, 1792.0, 209.5, 575.0, "GDDR7", "PCIe"),
}
RAW = {"id": "x", "name": "x", "vendor": "v", "architecture": "a", "form_factor": "PCIe", "memory_type": "GDDR6",
       "memory_size_gb": 1.0, "memory_bandwidth_gb_s": 1.0, "interconnect": "none", "interconnect_bandwidth_gb_s": 0.0,
       "tdp_w": 100.0, "process_node_nm": 7, "gpus_per_node": 1, "release_year": 2020, "peak_dense_tops": {"fp16": 1.0}}
ALL_SOURCED = ("memory_size_gb", "memory_bandwidth_gb_s", "interconnect_bandwidth_gb_s", "tdp_w", "process_node_nm",
               "gpus_per_node", "release_year")


def _raw(**extra: object) -> dict[str, object]:
    """A minimal valid GPU table with every numeric key sourced, plus ``extra`` keys."""
    raw = {**RAW, **extra}
    sources = {key: "s" for key in raw if key in ALL_SOURCED or key in ("idle_power_w", "module_power_w")}
    raw["sources"] = {**sources, "peak_dense_tops.fp16": "s"}
    return raw


def test_sourced_idle_figures() -> None:
    got = {gpu.id: gpu.idle_power_w for gpu in gpu_catalog() if gpu.idle_power_w is not None}
    assert got == pytest.approx(SOURCED_IDLE_W)


@pytest.mark.parametrize("gpu", [g for g in gpu_catalog() if g.idle_power_w is not None], ids=lambda g: g.id)
def test_every_idle_figure_is_below_the_limit_and_sourced_with_its_kind(gpu) -> None:
    assert 0 < gpu.idle_power_w < gpu.tdp_w
    source = gpu.sources["idle_power_w"]
    assert source.split(":", 1)[0] in IDLE_KINDS, source[:60]
    assert "http" in source or "shared/data" in source


def test_h100_idle_cites_the_projects_measurement() -> None:
    source = get_gpu("h100-sxm").sources["idle_power_w"]
    assert "h100_hf/README.md" in source and "120 W" in source


def test_static_power_uses_the_catalog_figure_first() -> None:
    value, text = static_power_w("h100-sxm")
    assert value == 120.0 and "catalog idle_power_w" in text and "LOADED-MODEL IDLE" in text
    assert static_power_w("b200")[0] == 233.6


def test_static_power_twin_differs_only_in_memory_capacity() -> None:
    value, text = static_power_w("v100")  # V100 SXM2 16 GB: the 32 GB board's reading
    assert value == 53.0 and "v100-sxm2-32gb" in text


def test_fallback_constants_are_the_class_medians_of_the_catalog() -> None:
    assert class_idle_medians() == pytest.approx(STATIC_POWER_FALLBACK_W)
    assert set(STATIC_POWER_FALLBACK_W) == set(DEVICE_CLASSES)


@pytest.mark.parametrize("gpu_id, cls", [
    ("h100-sxm", "hbm"), ("a30", "hbm"), ("gh200", "hbm"), ("mi300x", "hbm"), ("t4", "slot-powered"),
    ("l4", "slot-powered"), ("a10", "gddr-pcie"), ("rtx-6000-ada", "gddr-pcie"), ("rtx-4090", "consumer"),
    ("rtx-5090", "consumer"), ("jetson-orin", "edge"), ("rk3588-npu", "edge"),
])
def test_device_classes(gpu_id: str, cls: str) -> None:
    assert device_class(get_gpu(gpu_id)) == cls


@pytest.mark.parametrize("a, b", [("h100-nvl", "gaudi3"), ("a10", "l40"), ("mi250x", "a30")])
def test_fallback_does_not_scale_with_the_power_limit(a: str, b: str) -> None:
    gpu_a, gpu_b = get_gpu(a), get_gpu(b)
    assert device_class(gpu_a) == device_class(gpu_b) and gpu_a.tdp_w != gpu_b.tdp_w
    assert gpu_a.idle_power_w is None and gpu_b.idle_power_w is None
    assert static_power_w(gpu_a)[0] == static_power_w(gpu_b)[0] == STATIC_POWER_FALLBACK_W[device_class(gpu_a)]
    assert "fallback" in static_power_w(gpu_a)[1]


def test_capping_a_gpu_leaves_its_static_power_unchanged() -> None:
    for gpu_id in ("h100-sxm", "h200", "l4"):
        gpu = get_gpu(gpu_id)
        capped = dataclasses.replace(gpu, tdp_w=gpu.tdp_w * 0.6)
        assert static_power_w(capped)[0] == static_power_w(gpu)[0], gpu_id


def test_every_static_power_is_below_the_limit() -> None:
    for gpu in gpu_catalog():
        value, text = static_power_w(gpu)
        assert 0 < value < gpu.tdp_w, (gpu.id, value, text)


def test_fallback_is_clamped_for_a_device_below_its_class() -> None:
    tiny = gpu_from_dict(_raw(tdp_w=50.0, name="tiny GDDR card"))
    assert device_class(tiny) == "slot-powered"
    big = gpu_from_dict(_raw(id="y", tdp_w=90.0))
    value, text = static_power_w(big)
    assert value == 90.0 and "clamped" in text


def test_gh200_power_scope() -> None:
    gh200 = get_gpu("gh200")
    assert gh200.tdp_w == 700.0 and gh200.module_power_w == 1000.0
    assert gh200.power_scope and "Grace CPU" in gh200.power_scope and "LPDDR5X" in gh200.power_scope
    assert gh200.tdp_w == get_gpu("h100-sxm").tdp_w
    assert "INFERRED" in gh200.sources["tdp_w"] and "700W" in gh200.sources["tdp_w"]
    assert "450W to 1000W" in gh200.sources["module_power_w"]
    b200 = get_gpu("b200")
    assert b200.power_scope and b200.module_power_w is None and b200.tdp_w == 1000.0


def test_module_power_needs_a_scope_and_cannot_be_below_the_gpu_limit() -> None:
    with pytest.raises(ValueError, match="power_scope"):
        gpu_from_dict(_raw(module_power_w=150.0))
    with pytest.raises(ValueError, match="below the GPU"):
        gpu_from_dict(_raw(module_power_w=50.0, power_scope="x"))
    with pytest.raises(ValueError, match="without a source"):
        gpu_from_dict({**_raw(), "module_power_w": 150.0, "power_scope": "x"})


def test_idle_at_or_above_the_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="idle_power_w"):
        gpu_from_dict(_raw(idle_power_w=100.0))


@pytest.mark.parametrize("gpu_id", sorted(NEW_GPUS))
def test_new_gpus_golden(gpu_id: str) -> None:
    gpu = get_gpu(gpu_id)
    memory, bandwidth, fp16, tdp, memory_type, form_factor = NEW_GPUS[gpu_id]
    assert (gpu.memory_size_gb, gpu.memory_bandwidth_gb_s, gpu.tdp_w) == (memory, bandwidth, tdp)
    assert (gpu.memory_type, gpu.form_factor) == (memory_type, form_factor)
    assert gpu.peak_dense_tops["fp16"] == pytest.approx(fp16)
    for key in ("memory_size_gb", "memory_bandwidth_gb_s", "tdp_w", "die_area_mm2", "transistors_billion",
                "process_node_nm", "gpus_per_node", "release_year", "interconnect_bandwidth_gb_s", "pcie_bandwidth_gb_s",
                *(f"peak_dense_tops.{d}" for d in gpu.peak_dense_tops)):
        assert "http" in gpu.sources[key], (gpu_id, key)


def test_new_gpu_details() -> None:
    rtx5090 = get_gpu("rtx-5090")
    assert rtx5090.peak_dense_tops == pytest.approx({"fp32": 104.8, "fp16": 209.5, "bf16": 209.5, "fp8": 419.0,
                                                     "fp4": 1676.0})
    assert (rtx5090.architecture, rtx5090.die_area_mm2, rtx5090.transistors_billion) == ("Blackwell", 744.0, 92.2)
    assert rtx5090.interconnect_bandwidth_gb_s == 128.0 and rtx5090.release_year == 2025
    a100 = get_gpu("a100-pcie-40gb")
    assert a100.interconnect_bandwidth_gb_s == 600.0 and a100.pcie_bandwidth_gb_s == 64.0 and a100.die_area_mm2 == 826.0
    v100_pcie = get_gpu("v100-pcie-32gb")
    assert v100_pcie.peak_dense_tops == pytest.approx({"fp32": 14.0, "fp16": 112.0})
    assert v100_pcie.interconnect_bandwidth_gb_s == 32.0
    v100_sxm2 = get_gpu("v100-sxm2-32gb")
    assert v100_sxm2.interconnect_bandwidth_gb_s == 300.0 and v100_sxm2.release_year == 2018
    old = get_gpu("v100")  # the 16 GB SXM2 entry is unchanged
    assert (old.memory_size_gb, old.tdp_w, old.release_year, old.idle_power_w) == (16.0, 300.0, 2017, None)


@pytest.mark.parametrize("alias, gpu_id", [
    ("A100-PCIE-40GB", "a100-pcie-40gb"), ("a100 pcie 40gb", "a100-pcie-40gb"), ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("V100-SXM2-32GB", "v100-sxm2-32gb"), ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"), ("v100 32gb sxm2", "v100-sxm2-32gb"),
    ("V100-PCIE-32GB", "v100-pcie-32gb"), ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA GeForce RTX 5090", "rtx-5090"), ("rtx 5090", "rtx-5090"),
    ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("a100 40gb", "a100-40gb"),
])
def test_new_aliases_resolve_without_collisions(alias: str, gpu_id: str) -> None:
    assert get_gpu(alias).id == gpu_id


@pytest.mark.parametrize("gpu_id, tdp", [("rtx-4090", 450.0), ("rtx-6000-ada", 300.0), ("l4", 72.0), ("l40s", 350.0)])
def test_checked_consumer_and_workstation_limits(gpu_id: str, tdp: float) -> None:
    assert get_gpu(gpu_id).tdp_w == tdp


def test_a_module_on_the_same_die_takes_its_twins_idle_reading() -> None:
    """A100 SXM4 40 GB and 80 GB; H100 SXM, H200 and GH200's GPU: one die, mounted alike."""
    assert static_power_w("a100-40gb") == (73.9, "idle_power_w of a100-80gb, the same die as a100-40gb, mounted alike")
    assert static_power_w("gh200")[0] == static_power_w("h100-sxm")[0] == 120.0
    assert static_power_w("h200")[0] == 122.0  # its own reading wins over its twin's
    # cards need the same board power too: the 150 W A10 does not take the 300 W A40's reading
    assert "fallback" in static_power_w("a10")[1] and static_power_w("rtx-a6000")[0] == 110.0


def test_an_unused_card_draws_its_bare_idle_where_the_catalog_has_one() -> None:
    """A card no process uses rests below a card holding a context (H100 SXM 71.8 W against 120 W); a GPU without
    a sourced bare figure falls back to its static power."""
    from llmco2.specs.gpu_power import unused_power_w
    from llmco2.specs.gpus import BARE_IDLE

    assert unused_power_w("h100-sxm") == (71.8, f"catalog bare_idle_power_w of h100-sxm ({BARE_IDLE})")
    assert unused_power_w("gaudi2")[0] == 87.5 and unused_power_w("t4")[0] == 9.0
    assert unused_power_w("a100-80gb") == static_power_w("a100-80gb")
    for gpu in gpu_catalog():
        if gpu.bare_idle_power_w is not None:
            assert gpu.bare_idle_power_w <= (gpu.idle_power_w or gpu.tdp_w)
            assert gpu.sources["bare_idle_power_w"].startswith(BARE_IDLE + ":") and "http" in gpu.sources["bare_idle_power_w"]


def test_a_bare_idle_figure_needs_its_kind_and_a_value_below_the_limit() -> None:
    raw = _raw(bare_idle_power_w=150.0)
    raw["sources"]["bare_idle_power_w"] = "BARE IDLE: a snapshot above the 100 W limit"
    with pytest.raises(ValueError, match="bare_idle_power_w 150.0 W is not between 0 and its power limit"):
        gpu_from_dict(raw)
    raw = _raw(bare_idle_power_w=20.0)
    raw["sources"]["bare_idle_power_w"] = "a snapshot"
    with pytest.raises(ValueError, match="BARE IDLE"):
        gpu_from_dict(raw)
    raw = _raw(idle_power_w=20.0, bare_idle_power_w=30.0)
    raw["sources"]["bare_idle_power_w"] = "BARE IDLE: above the card's draw with a process"
    with pytest.raises(ValueError, match="above its idle_power_w"):
        gpu_from_dict(raw)


def test_an_engine_that_accumulates_fp16_in_fp16_runs_a_geforce_card_at_its_fp16_accumulate_rate() -> None:
    """llama.cpp's cuBLAS path accumulates fp16 products in fp16, which a GeForce card runs at twice its fp32-accumulate
    rate (the catalog's fp16 figure); a data-centre card, another dtype or another engine keep the catalog's peak."""
    from llmco2.analytic.layer import LayerBatch
    from llmco2.specs import Request, get_engine, get_model
    from llmco2.specs.gpus import tensor_peak_ops_per_s

    g4090, a100 = get_gpu("rtx-4090"), get_gpu("a100-80gb")
    assert tensor_peak_ops_per_s(g4090, "fp16", True) == pytest.approx(330.3e12)
    assert tensor_peak_ops_per_s(g4090, "fp16", False) == g4090.peak_ops_per_s("fp16") == pytest.approx(165.2e12)
    assert tensor_peak_ops_per_s(g4090, "int8", True) == g4090.peak_ops_per_s("int8")
    assert tensor_peak_ops_per_s(a100, "fp16", True) == a100.peak_ops_per_s("fp16")
    assert get_engine("llama-cpp").fp16_accumulate and "CUBLAS_COMPUTE_16F" in get_engine("llama-cpp").sources["fp16_accumulate"]
    assert not get_engine("vllm").fp16_accumulate
    arch = get_model("llama3.1-8b")
    b = LayerBatch.from_items([(arch, Request(batch_size=1, prompt_tokens=64, generated_tokens=2, engine=e), g4090)
                               for e in ("llama-cpp", "vllm")])
    assert b.peak_ops_per_s.tolist() == pytest.approx([330.3e12, 165.2e12]) and b.peak_boost.tolist() == pytest.approx([330.3 / 165.2, 1.0])
    from llmco2.physics.step_work import step_shapes

    items = [(arch, Request(batch_size=1, prompt_tokens=512, generated_tokens=1, engine=e), g4090) for e in ("llama-cpp", "vllm")]
    x = step_shapes(items, "prefill")  # the faster rate's operations keep an fp16 operation's energy: peak16 doubles too
    assert x.peak16_ops_per_s.tolist() == pytest.approx([330.3e12, 165.2e12])
    assert x.compute_s.sum(axis=1)[0] == pytest.approx(x.compute_s.sum(axis=1)[1] * 165.2 / 330.3)
    with pytest.raises(ValueError, match="fp16_accumulate_dense_tops"):
        gpu_from_dict({**_raw(fp16_accumulate_dense_tops=0.5), "sources": {**_raw()["sources"], "fp16_accumulate_dense_tops": "s"}})
