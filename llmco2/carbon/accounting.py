"""Carbon accounting: operational (energy x PUE x grid intensity, the paper's Eq 1) and embodied
(LLMCarbon's manufacturing carbon of the GPUs, amortised over their lifetime and charged for the
time the request occupies them).

Units: energy in J, intensity in g CO2eq per kWh, carbon in g CO2eq, embodied constants in kg.
Tables live in ``carbon/data/*.toml``, each row with its source and year; nothing is fetched at
prediction time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import GPU
from llmco2.specs.lookup import Catalog
from llmco2.specs.toml_cache import load_toml

J_PER_KWH = 3.6e6
SECONDS_PER_YEAR = 365.0 * 24.0 * 3600.0


def _load(name: str) -> dict[str, Any]:
    with resources.as_file(resources.files("llmco2.carbon") / "data" / f"{name}.toml") as path:
        return load_toml(path)


@dataclass(frozen=True)
class GridRegion:
    """Annual average carbon intensity of a region's electricity (g CO2eq/kWh)."""

    id: str
    name: str
    kind: str
    g_co2eq_per_kwh: float
    year: int
    source: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class PUEDefault:
    """A power usage effectiveness figure (facility energy / IT energy)."""

    id: str
    name: str
    value: float
    year: int | None
    source: str
    aliases: tuple[str, ...] = ()


@functools.cache
def grid_regions() -> tuple[Catalog[GridRegion], str]:
    """The grid-intensity table and its default region id."""
    doc = _load("grid_intensity")
    rows = [GridRegion(id=r["id"], name=r["name"], kind=r["kind"], g_co2eq_per_kwh=float(r["g_co2eq_per_kwh"]),
                       year=int(r["year"]), source=r["source"], aliases=tuple(str(a).lower() for a in r.get("aliases", ())))
            for r in doc["region"]]
    return Catalog("region", rows), doc["default_region"]


@functools.cache
def pue_defaults() -> tuple[Catalog[PUEDefault], str]:
    """The PUE table and its default id."""
    doc = _load("pue")
    rows = [PUEDefault(id=r["id"], name=r.get("name", r["id"]), value=float(r["value"]), year=r.get("year"), source=r["source"],
                       aliases=tuple(str(a).lower() for a in r.get("aliases", ()))) for r in doc["pue"]]
    return Catalog("PUE", rows), doc["default"]


def region(name: str | None = None) -> GridRegion:
    """A region by id or alias (``fra``, ``fr``, ``france``, ``gcp:europe-west9``); default: the world."""
    cat, default = grid_regions()
    return cat.get(name or default, field="region")


def pue(name: str | None = None) -> PUEDefault:
    """A PUE default by id (``google``, ``aws``, ``industry_average``, ``edge_device``, ...)."""
    cat, default = pue_defaults()
    return cat.get(name or default, field="pue")


def operational_g(energy_j: ArrayLike, pue_value: float, intensity_g_per_kwh: float) -> NDArray[np.float64]:
    """Operational carbon (g CO2eq) = energy (kWh) x PUE x grid intensity (g/kWh) (paper Eq 1)."""
    if pue_value < 1.0:
        raise InvalidInputError(f"PUE is facility over IT energy and cannot be below 1, got {pue_value}", field="pue")
    if intensity_g_per_kwh < 0:
        raise InvalidInputError(f"must be >= 0 g CO2eq/kWh, got {intensity_g_per_kwh}", field="carbon_intensity")
    return np.asarray(energy_j, dtype=np.float64) / J_PER_KWH * pue_value * intensity_g_per_kwh


# -- embodied ---------------------------------------------------------------------------------------
@functools.cache
def _embodied_tables() -> dict[str, Any]:
    doc = _load("embodied")
    nodes = sorted((int(r["node_nm"]), float(r["kg_co2eq_per_cm2"])) for r in doc["logic_node"])
    memory = {r["type"]: float(r["kg_co2eq_per_gb"]) for r in doc["memory"]}
    mapping = {r["memory_type"].lower(): r["memory"] for r in doc["device_memory_type"]}
    return {"nodes": nodes, "memory": memory, "mapping": mapping, "lifetime_years": float(doc["defaults"]["lifetime_years"]),
            "packaging_kg": float(doc["defaults"].get("packaging_kg_co2eq_per_ic", 0.0))}


def default_lifetime_years() -> float:
    return _embodied_tables()["lifetime_years"]


def logic_kg_per_cm2(node_nm: int) -> float:
    """Carbon per area of a logic die (kg CO2eq/cm²) for a process node: LLMCarbon's table, a node
    without a row taking the nearest larger node (below the smallest row: the smallest)."""
    nodes = _embodied_tables()["nodes"]
    larger = [v for n, v in nodes if n >= node_nm]
    if larger:
        return larger[0]
    return nodes[-1][1] if node_nm > nodes[-1][0] else nodes[0][1]


def memory_kg_per_gb(memory_type: str) -> float:
    """Embodied carbon of memory (kg CO2eq/GB) for a GPU catalog memory type (HBM3, GDDR6, ...)."""
    t = _embodied_tables()
    key = memory_type.lower()
    kind = t["mapping"].get(key)
    if kind is None:  # e.g. "LPDDR4x/LPDDR5": match the first listed type
        kind = t["mapping"].get(key.split("/")[0])
    if kind is None or kind not in t["memory"]:
        raise InvalidInputError(f"no embodied-carbon figure for memory type {memory_type!r}", field="memory_type")
    return t["memory"][kind]


@dataclass(frozen=True)
class DeviceEmbodied:
    """Manufacturing carbon of one accelerator (kg CO2eq): logic die + memory + packaging."""

    gpu: str
    logic_kg: float
    memory_kg: float
    packaging_kg: float

    @property
    def total_kg(self) -> float:
        return self.logic_kg + self.memory_kg + self.packaging_kg


def device_embodied(gpu: GPU) -> DeviceEmbodied | None:
    """LLMCarbon's embodied carbon of ``gpu``: die area (cm²) x kg/cm² of its node + memory (GB)
    x kg/GB of its memory type. ``None`` when the die area is not published (some SoCs)."""
    if not gpu.die_area_mm2:
        return None
    logic = gpu.die_area_mm2 / 100.0 * logic_kg_per_cm2(gpu.process_node_nm)
    mem = gpu.memory_size_gb * memory_kg_per_gb(gpu.memory_type)
    return DeviceEmbodied(gpu.id, logic, mem, _embodied_tables()["packaging_kg"])


def embodied_g(gpu: GPU, num_gpus: ArrayLike, latency_s: ArrayLike, lifetime_years: float | None = None) -> NDArray[np.float64]:
    """Embodied carbon charged to requests (g CO2eq): device carbon x GPUs x latency / lifetime.
    NaN where the device's embodied carbon is unknown."""
    years = default_lifetime_years() if lifetime_years is None else float(lifetime_years)
    if years <= 0:
        raise InvalidInputError(f"must be positive, got {years}", field="lifetime_years")
    dev = device_embodied(gpu)
    share = np.asarray(num_gpus, dtype=np.float64) * np.asarray(latency_s, dtype=np.float64) / (years * SECONDS_PER_YEAR)
    if dev is None:
        return np.full_like(share, np.nan)
    return dev.total_kg * 1000.0 * share
