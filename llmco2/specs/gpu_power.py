"""Static (idle) power of a GPU, and of a card no process uses, from the catalog (:mod:`llmco2.specs.gpus`).

``idle_power_w`` is a sourced idle reading (its source string starts with the kind of idle, :data:`IDLE_KINDS`);
:func:`static_power_w` returns it, a same-die twin's, or a fallback per device class that never depends on the
power limit (:data:`STATIC_POWER_FALLBACK_W`). ``bare_idle_power_w`` is what a card that no process uses draws
(:func:`unused_power_w`: the unused cards of a node a probe sums).
"""

from __future__ import annotations

import logging
import statistics

from llmco2.specs.gpus import BARE_IDLE, GPU, get_gpu, gpu_catalog, mounting, same_die
from llmco2.specs.lookup import Catalog

logger = logging.getLogger(__name__)

#: Kinds of idle reading; every ``idle_power_w`` source string starts with one of them followed by ``:``.
#: LOADED-MODEL IDLE: model weights resident, serving process up, no requests (driver loaded, P-state as the GPU
#: chose). CONTEXT IDLE: a CUDA context holding allocated memory, no kernels (the same DVFS state as a loaded
#: model). MODULE IDLE: a whole SoC module at OS idle, measured at its supply.
IDLE_KINDS = ("LOADED-MODEL IDLE", "CONTEXT IDLE", "MODULE IDLE")

#: Device classes of :func:`device_class`, used by the idle-power fallback.
HBM = "hbm"
SLOT_POWERED = "slot-powered"
GDDR_PCIE = "gddr-pcie"
CONSUMER = "consumer"
EDGE = "edge"
DEVICE_CLASSES = (HBM, SLOT_POWERED, GDDR_PCIE, CONSUMER, EDGE)

#: Form factors of single-device SoCs and modules (edge devices).
EDGE_FORM_FACTORS = frozenset({"module", "SoC"})
#: A PCIe card whose power limit is at most this (W) runs from the x16 slot's 75 W alone (no auxiliary power
#: connector: T4, L4). It is a class boundary, never a scale factor.
SLOT_POWER_W = 75.0

#: Fallback static (idle) power per device class (W): the median of the sourced ``idle_power_w`` figures of the
#: shipped catalog's GPUs of that class (``tests/test_catalog_power.py`` checks these stay equal to that median).
#: It never depends on a GPU's power limit, so capping a GPU's power does not move it.
#:
#: - hbm (data-centre HBM accelerators, SXM/OAM/superchip and PCIe): v100-sxm2-32gb 53, a100-80gb 73.9,
#:   a100-pcie-80gb 80, h100-pcie 80, gaudi2 88, h100-sxm 120, h200 122, mi300x 128, b200 233.6 -> 88
#: - slot-powered (PCIe cards at or below 75 W): l4 28, t4 37 -> 32.5
#: - gddr-pcie (data-centre / workstation GDDR PCIe cards above 75 W): a10g 60, l40s 105.85, a40 110 -> 105.85
#: - consumer (GeForce): rtx-5090 22, rtx-3090 25.5 -> 23.75
#: - edge (SoCs and modules): rk3588-npu 4.5 -> 4.5
STATIC_POWER_FALLBACK_W: dict[str, float] = {
    HBM: 88.0,
    SLOT_POWERED: 32.5,
    GDDR_PCIE: 105.85,
    CONSUMER: 23.75,
    EDGE: 4.5,
}


def device_class(gpu: GPU) -> str:
    """The device class of ``gpu`` for the idle-power fallback (one of :data:`DEVICE_CLASSES`).

    Decided from ``form_factor`` and ``memory_type`` (GeForce cards by their name):
    edge = SoC or module; hbm = any HBM memory; consumer = a GeForce card; slot-powered = a PCIe card limited
    to the slot's 75 W; gddr-pcie = every other card.
    """
    if gpu.form_factor in EDGE_FORM_FACTORS:
        return EDGE
    if gpu.memory_type.upper().startswith("HBM"):
        return HBM
    if "geforce" in gpu.name.lower():
        return CONSUMER
    if gpu.form_factor == "PCIe" and gpu.tdp_w <= SLOT_POWER_W:
        return SLOT_POWERED
    return GDDR_PCIE


def _twin_with_idle(gpu: GPU, catalog: Catalog[GPU]) -> GPU | None:
    """A catalog GPU with a sourced idle figure built on the same die and mounted alike.

    Same architecture, die area, process node and mounting (:func:`llmco2.specs.gpus.mounting`; e.g. V100 SXM2 16 GB
    and 32 GB; A100 SXM4 40 GB and 80 GB; H100 SXM, H200 and GH200's GPU; RTX A6000 and A40): the idle
    draw of one board stands for the other, whose memory differs in capacity, stacks or speed. Cards
    (PCIe) are twins only at the same board power as well (one die is sold from 150 W to 300 W
    cards, whose boards differ); for modules the power limit plays no part, so capping a module
    leaves its static power as it is. Among several, the one with the same memory type, form factor and
    memory size is preferred (the RTX A6000 takes the 48 GB A40's reading, not the 24 GB A10G's).
    """
    mount = mounting(gpu)
    twins = [o for o in catalog if o.id != gpu.id and o.idle_power_w is not None and same_die(gpu, o)
             and mounting(o) == mount and (mount == "module" or o.tdp_w == gpu.tdp_w)]
    twins.sort(key=lambda o: (o.memory_type != gpu.memory_type, o.form_factor != gpu.form_factor,
                              o.memory_size_gb != gpu.memory_size_gb, o.id))
    return twins[0] if twins else None


def static_power_w(gpu: GPU | str) -> tuple[float, str]:
    """Static (idle) power of one GPU in watts, and a text saying where the figure comes from.

    1. the catalog's sourced ``idle_power_w``;
    2. else the sourced figure of a catalog twin: the same die, mounted alike;
    3. else :data:`STATIC_POWER_FALLBACK_W` of the GPU's :func:`device_class` (a class median).

    No branch multiplies ``tdp_w``. A fallback at or above the GPU's own limit (possible only for a user-defined
    device far smaller than its class) is clamped to the limit, which caps all power anyway, with a warning.
    """
    gpu = get_gpu(gpu)
    if gpu.idle_power_w is not None:
        kind = gpu.sources.get("idle_power_w", "").split(":", 1)[0].strip()
        return float(gpu.idle_power_w), f"catalog idle_power_w of {gpu.id} ({kind})"
    twin = _twin_with_idle(gpu, gpu_catalog())
    if twin is not None:
        return float(twin.idle_power_w or 0.0), (
            f"idle_power_w of {twin.id}, the same die as {gpu.id}, mounted alike")
    cls = device_class(gpu)
    value = STATIC_POWER_FALLBACK_W[cls]
    text = (f"fallback: median sourced idle power of the catalog's {cls} GPUs ({value:g} W); "
            f"{gpu.id} has no sourced idle figure")
    if value >= gpu.tdp_w:
        logger.warning("static power fallback %.1f W of class %s is not below %s's limit %.1f W; clamped to the limit",
                       value, cls, gpu.id, gpu.tdp_w)
        return float(gpu.tdp_w), text + f", clamped to its power limit {gpu.tdp_w:g} W"
    return value, text


def unused_power_w(gpu: GPU | str) -> tuple[float, str]:
    """Power (W) of a card that no process uses, as a probe summing a whole node reads the cards a run
    left alone, and a text saying where the figure comes from: the catalog's sourced ``bare_idle_power_w``
    (e.g. H100 SXM 71.8 W without a context against 121.7 W with one), else :func:`static_power_w`."""
    gpu = get_gpu(gpu)
    if gpu.bare_idle_power_w is not None:
        return float(gpu.bare_idle_power_w), f"catalog bare_idle_power_w of {gpu.id} ({BARE_IDLE})"
    return static_power_w(gpu)


def class_idle_medians(catalog: Catalog[GPU] | None = None) -> dict[str, float]:
    """Median sourced ``idle_power_w`` (W) per device class of ``catalog`` (the shipped one by default).

    The source of :data:`STATIC_POWER_FALLBACK_W`; classes without a sourced figure are absent.
    """
    groups: dict[str, list[float]] = {}
    for gpu in catalog if catalog is not None else gpu_catalog():
        if gpu.idle_power_w is not None:
            groups.setdefault(device_class(gpu), []).append(float(gpu.idle_power_w))
    return {cls: float(statistics.median(values)) for cls, values in groups.items()}


__all__ = ["DEVICE_CLASSES", "IDLE_KINDS", "STATIC_POWER_FALLBACK_W", "class_idle_medians", "device_class", "static_power_w",
           "unused_power_w"]
