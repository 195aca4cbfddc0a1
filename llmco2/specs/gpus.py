"""GPU / accelerator catalog: typed records loaded from ``specs/data/gpus.toml``.

Every number in the data file carries a source (``[gpu.sources]``). Peaks are **dense**
(no 2:4 structured sparsity). The LLMCO2 paper's Table 2 mixes sparse and dense figures
(its A100 "FP16 624" and H100 "FP16 1979" are FP16 *with sparsity*); those values are kept
verbatim in :attr:`GPU.paper_table2` for reference and are never used in computation.

Power fields: ``tdp_w`` is the GPU's own power limit (what its power cap governs; the figure power is capped
at). Where a package carries more than the GPU (a superchip with a CPU and its memory), ``module_power_w``
holds the whole-module figure and ``power_scope`` says what each figure covers. ``idle_power_w`` is a
sourced idle reading (its source string starts with the kind of idle) and ``bare_idle_power_w`` what a card that
no process uses draws; :mod:`llmco2.specs.gpu_power` turns them into a GPU's static power, with a fallback that
never depends on the power limit.

Link fields: ``link_kind`` says what joins a node's GPUs (:data:`LINK_KINDS`) and ``pcie_p2p`` whether the
stock driver lets them reach each other's memory over PCIe; :mod:`llmco2.specs.links` turns them, with the
tensor-parallel degree, into the bandwidth and latency of an all-reduce.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError, UnknownIdError
from llmco2.specs.dtypes import DTYPE_BYTES, canonical_dtype
from llmco2.specs.lookup import Catalog, close_matches
from llmco2.specs.toml_cache import load_toml

logger = logging.getLogger(__name__)

TERA = 1e12
GIGA = 1e9

#: What joins the GPUs of a node. ``fabric``: dedicated links join every GPU (NVLink with NVSwitch or a
#: mesh, AMD Infinity Fabric, Gaudi's on-die RoCE); ``bridge-pairs``: an NVLink bridge joins PAIRS of cards
#: and the rest goes over PCIe; ``pcie``: no GPU-to-GPU link, all traffic crosses PCIe; ``none``: a single
#: device (SoC or module).
LINK_KINDS = ("fabric", "bridge-pairs", "pcie", "none")


@dataclass(frozen=True)
class GPU:
    """One accelerator. Field names carry units; ``peak_dense_tops`` is tera-ops/s per dtype.

    Power fields (watts):

    - ``tdp_w``: the GPU's own power limit, the figure its power cap governs and power is capped at.
    - ``idle_power_w``: a sourced idle reading (preferably a GPU holding a loaded model and running nothing);
      absent where no public figure exists. Its source string starts with the kind of idle.
    - ``fp16_accumulate_dense_tops`` (not power; tera-ops/s): the dense fp16 tensor rate with fp16 accumulation
      where it exceeds the catalog's fp16 figure (GeForce cards run fp32 accumulation at half rate), for engines
      whose fp16 GEMMs accumulate in fp16 (:func:`tensor_peak_ops_per_s`).
    - ``bare_idle_power_w``: a sourced reading of the GPU with no process on it (no context: the P-state an unused
      card of a node rests in), where it differs from ``idle_power_w`` or a source gives it; its source string
      starts with ``BARE IDLE:``.
    - ``module_power_w``: the whole module's figure where the package holds more than the GPU (a superchip's
      CPU and its memory); ``None`` where ``tdp_w`` already covers the whole device.
    - ``power_scope``: what ``tdp_w`` and ``module_power_w`` include, and why ``tdp_w`` holds the figure it does.

    Link fields: ``interconnect_bandwidth_gb_s`` is the GPU-to-GPU figure as vendors quote it (total
    bidirectional GB/s per GPU; a bridged card's bridge, a PCIe-only card's PCIe x16) and
    ``pcie_bandwidth_gb_s`` the host link (bidirectional GB/s). ``link_kind`` is one of :data:`LINK_KINDS`;
    ``pcie_p2p`` is false where the driver gives the cards no peer access over PCIe (GeForce since the RTX 30
    series), so collectives that cross PCIe are staged through host memory.
    """

    id: str
    name: str
    vendor: str
    architecture: str
    form_factor: str
    memory_type: str
    memory_size_gb: float
    memory_bandwidth_gb_s: float
    interconnect: str
    interconnect_bandwidth_gb_s: float
    tdp_w: float
    process_node_nm: int
    gpus_per_node: int
    release_year: int
    peak_dense_tops: dict[str, float]
    sources: dict[str, str]
    aliases: tuple[str, ...] = ()
    die_area_mm2: float | None = None
    idle_power_w: float | None = None
    bare_idle_power_w: float | None = None
    fp16_accumulate_dense_tops: float | None = None
    module_power_w: float | None = None
    power_scope: str | None = None
    pcie_bandwidth_gb_s: float | None = None
    transistors_billion: float | None = None
    paper_table2: dict[str, Any] | None = None
    link_kind: str = "fabric"
    pcie_p2p: bool = True

    # -- derived quantities in SI units -------------------------------------------------------
    def peak_ops_per_s(self, dtype: str) -> float:
        """Dense peak throughput for ``dtype`` in operations per second.

        Raises `InvalidInputError` naming the dtypes this device does support.
        """
        key = canonical_dtype(dtype)
        if key not in self.peak_dense_tops:
            raise InvalidInputError(
                f"{self.id} has no published {key} throughput; supported: "
                f"{', '.join(sorted(self.peak_dense_tops))}",
                field="dtype",
            )
        return self.peak_dense_tops[key] * TERA

    def supports(self, dtype: str) -> bool:
        return canonical_dtype(dtype) in self.peak_dense_tops

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_s * GIGA

    @property
    def interconnect_bytes_per_s(self) -> float:
        return self.interconnect_bandwidth_gb_s * GIGA

    @property
    def memory_bytes(self) -> float:
        return self.memory_size_gb * GIGA

    def ridge_point(self, dtype: str) -> float:
        """Memory ridge point (ops per byte): peak / memory bandwidth (paper's MRP)."""
        return self.peak_ops_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    def network_ridge_point(self, dtype: str) -> float:
        """Network ridge point (ops per byte): peak / interconnect bandwidth (paper's NRP)."""
        if self.interconnect_bandwidth_gb_s <= 0:
            return float("inf")
        return self.peak_ops_per_s(dtype) / self.interconnect_bytes_per_s


_GPU_FIELDS = {f.name for f in fields(GPU)}
_NUMERIC_SOURCED = (
    "memory_size_gb",
    "memory_bandwidth_gb_s",
    "interconnect_bandwidth_gb_s",
    "tdp_w",
    "process_node_nm",
    "gpus_per_node",
    "release_year",
    "die_area_mm2",
    "idle_power_w",
    "bare_idle_power_w",
    "fp16_accumulate_dense_tops",
    "module_power_w",
    "pcie_bandwidth_gb_s",
    "transistors_billion",
)


def gpu_from_dict(raw: dict[str, Any], origin: str = "gpus.toml") -> GPU:
    """Build a `GPU` from one ``[[gpu]]`` table, checking keys, dtypes and sources."""
    unknown = set(raw) - _GPU_FIELDS
    if unknown:
        raise ValueError(f"{origin}: gpu {raw.get('id')!r} has unknown keys {sorted(unknown)}")
    data = dict(raw)
    data["aliases"] = tuple(str(a).lower() for a in data.get("aliases", ()))
    peaks = {canonical_dtype(k): float(v) for k, v in data.get("peak_dense_tops", {}).items()}
    data["peak_dense_tops"] = peaks
    data.setdefault("link_kind", default_link_kind(str(data.get("interconnect", "")),
                                                   float(data.get("interconnect_bandwidth_gb_s", 0.0))))
    data.setdefault("pcie_p2p", "geforce" not in str(data.get("name", "")).lower())  # GeForce: no peer access over PCIe
    gpu = GPU(**data)
    missing = [k for k in _NUMERIC_SOURCED if getattr(gpu, k) is not None and k not in gpu.sources]
    missing += [f"peak_dense_tops.{k}" for k in peaks if f"peak_dense_tops.{k}" not in gpu.sources]
    if missing:
        raise ValueError(f"{origin}: gpu {gpu.id!r} has numbers without a source: {missing}")
    bad = [k for k in peaks if k not in DTYPE_BYTES]
    if bad:
        raise ValueError(f"{origin}: gpu {gpu.id!r} has unknown dtypes {bad}")
    _check_power_fields(gpu, origin)
    _check_link_fields(gpu, origin)
    if raw.get("pcie_p2p") is False and "pcie_p2p" not in gpu.sources:
        raise ValueError(f"{origin}: gpu {gpu.id!r} says pcie_p2p = false without a source")
    return gpu


def default_link_kind(interconnect: str, interconnect_bandwidth_gb_s: float) -> str:
    """The :data:`LINK_KINDS` entry a GPU table without ``link_kind`` gets, from its ``interconnect`` text:
    ``none`` without a link, ``bridge-pairs`` for an NVLink bridge, ``pcie`` for a PCIe-only card, else
    ``fabric``."""
    text = interconnect.lower()
    if interconnect_bandwidth_gb_s <= 0 or text == "none":
        return "none"
    if "bridge" in text:
        return "bridge-pairs"
    return "pcie" if text.startswith("pcie") else "fabric"


def _check_link_fields(gpu: GPU, origin: str) -> None:
    """A known link kind, and a bridged card needs its PCIe figure (the path beyond the pair)."""
    if gpu.link_kind not in LINK_KINDS:
        raise ValueError(f"{origin}: gpu {gpu.id!r} link_kind {gpu.link_kind!r} is not one of {LINK_KINDS}")
    if gpu.link_kind == "bridge-pairs" and not gpu.pcie_bandwidth_gb_s:
        raise ValueError(f"{origin}: gpu {gpu.id!r} joins pairs by a bridge but has no pcie_bandwidth_gb_s for the rest")


def _check_power_fields(gpu: GPU, origin: str) -> None:
    """Power fields must be consistent: idle below the limit, a module figure at least the GPU's, with a scope."""
    if gpu.idle_power_w is not None and not 0 < gpu.idle_power_w < gpu.tdp_w:
        raise ValueError(f"{origin}: gpu {gpu.id!r} idle_power_w {gpu.idle_power_w} W is not between 0 and "
                         f"its power limit tdp_w {gpu.tdp_w} W")
    if gpu.bare_idle_power_w is not None:
        if not 0 < gpu.bare_idle_power_w < gpu.tdp_w:
            raise ValueError(f"{origin}: gpu {gpu.id!r} bare_idle_power_w {gpu.bare_idle_power_w} W is not between 0 and "
                             f"its power limit tdp_w {gpu.tdp_w} W")
        if gpu.idle_power_w is not None and gpu.bare_idle_power_w > gpu.idle_power_w:
            raise ValueError(f"{origin}: gpu {gpu.id!r} bare_idle_power_w {gpu.bare_idle_power_w} W is above its idle_power_w "
                             f"{gpu.idle_power_w} W (a card with a process holds at least its bare draw)")
        if not gpu.sources.get("bare_idle_power_w", "").startswith(BARE_IDLE + ":"):
            raise ValueError(f"{origin}: gpu {gpu.id!r} bare_idle_power_w's source must start with '{BARE_IDLE}:'")
    if gpu.fp16_accumulate_dense_tops is not None and not gpu.fp16_accumulate_dense_tops >= max(gpu.peak_dense_tops.get("fp16", 0.0), 1e-9):
        raise ValueError(f"{origin}: gpu {gpu.id!r} fp16_accumulate_dense_tops {gpu.fp16_accumulate_dense_tops} is below its "
                         f"fp16 peak {gpu.peak_dense_tops.get('fp16')}")
    if gpu.module_power_w is not None:
        if gpu.module_power_w < gpu.tdp_w:
            raise ValueError(f"{origin}: gpu {gpu.id!r} module_power_w {gpu.module_power_w} W is below the GPU's "
                             f"own limit tdp_w {gpu.tdp_w} W")
        if not gpu.power_scope:
            raise ValueError(f"{origin}: gpu {gpu.id!r} has module_power_w but no power_scope saying what it covers")


def load_gpu_file(path: str | Path) -> list[GPU]:
    """Load every ``[[gpu]]`` table of a TOML file."""
    doc = load_toml(path)
    return [gpu_from_dict(entry, origin=str(path)) for entry in doc.get("gpu", [])]


@functools.cache
def gpu_catalog() -> Catalog[GPU]:
    """The shipped GPU catalog (cached)."""
    path = resources.files("llmco2.specs") / "data" / "gpus.toml"
    with resources.as_file(path) as real:
        return Catalog("gpu", load_gpu_file(real))


def get_gpu(name: str | GPU) -> GPU:
    """Look a GPU up by id or alias (``h100`` = ``h100-sxm``); close matches on failure."""
    if isinstance(name, GPU):
        return name
    return gpu_catalog().get(name, field="gpu")


#: The kind every ``bare_idle_power_w`` source string starts with: the GPU with no process on it (no context),
#: driver loaded, resting in the P-state it chose.
BARE_IDLE = "BARE IDLE"


def tensor_peak_ops_per_s(gpu: GPU, dtype: str, fp16_accumulate: bool = False) -> float:
    """Dense tensor peak (ops/s) of ``dtype`` on ``gpu`` (:meth:`GPU.peak_ops_per_s`); ``fp16_accumulate``: the
    GEMMs of an engine that accumulates fp16 products in fp16 (llama.cpp's cuBLAS path) run at
    ``fp16_accumulate_dense_tops`` where the GPU has one (GeForce cards, whose fp32 accumulation runs at half rate)."""
    if fp16_accumulate and gpu.fp16_accumulate_dense_tops is not None and canonical_dtype(dtype) == "fp16":
        return gpu.fp16_accumulate_dense_tops * TERA
    return gpu.peak_ops_per_s(dtype)


def mounting(gpu: GPU) -> str:
    """``"module"`` for a GPU on a mezzanine or superchip module (SXM, OAM, superchip), else ``"card"``."""
    return "module" if gpu.form_factor.upper().startswith(("SXM", "OAM")) or gpu.form_factor == "superchip" else "card"


def same_die(a: GPU, b: GPU) -> bool:
    """Whether ``a`` and ``b`` are the same silicon: vendor, architecture, die area (mm^2) and
    process node agree (H100 SXM, H100 PCIe, H100 NVL, H20, H200 and GH200's GPU are GH100; the
    A30 and the A100s GA100; the A10, A40, RTX A6000 and RTX 3090 GA102). A GPU without a die
    area in the catalog has no such sibling."""
    return (a.die_area_mm2 is not None and a.vendor == b.vendor and a.architecture == b.architecture
            and a.die_area_mm2 == b.die_area_mm2 and a.process_node_nm == b.process_node_nm)


def closest_same_die(gpu: GPU, candidates: Sequence[GPU]) -> GPU | None:
    """Of ``candidates`` on ``gpu``'s die (:func:`same_die`; ``gpu`` itself excluded), the one
    mounted alike (module or card) and then closest in memory bandwidth and power limit (sum of
    the absolute log ratios); ``None`` when no candidate shares the die."""
    twins = [c for c in candidates if c.id != gpu.id and same_die(gpu, c)]
    if not twins:
        return None

    def distance(c: GPU) -> tuple[bool, float, str]:
        return (mounting(c) != mounting(gpu), abs(math.log(c.memory_bandwidth_gb_s / gpu.memory_bandwidth_gb_s))
                + abs(math.log(c.tdp_w / gpu.tdp_w)), c.id)

    return min(twins, key=distance)


__all__ = ["BARE_IDLE", "GPU", "LINK_KINDS", "UnknownIdError", "close_matches", "closest_same_die", "default_link_kind",
           "get_gpu", "gpu_catalog", "gpu_from_dict", "load_gpu_file", "mounting", "same_die", "tensor_peak_ops_per_s"]
