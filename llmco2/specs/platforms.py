"""Platform catalog: the server (or board) around the GPUs, loaded from ``specs/data/platforms.toml``.

A platform holds ``gpu_slots`` GPUs and a host (CPUs, DRAM, NICs, NVSwitches, fans, storage) whose DC power runs
from ``host_idle_power_w`` (GPUs idle) to ``host_loaded_power_w`` (every GPU at full load), behind power supplies of
efficiency ``psu_efficiency``; ``embodied_kgco2e_non_gpu`` is the manufacturing carbon of everything but the GPUs.
Every number carries a source (``sources``) and a kind (``kinds``: sourced, applied, derived, estimate,
not-modelled; see the data file's header). Each GPU of the GPU catalog maps to its usual platform
(:func:`platform_for_gpu`).

>>> get_platform("dgx-h100").gpu_slots
8
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import GPU, get_gpu
from llmco2.specs.lookup import Catalog, normalise_key
from llmco2.specs.toml_cache import load_toml

logger = logging.getLogger(__name__)

#: Kinds of figure; every number's ``kinds`` entry is one of them (absent = ``sourced``).
KINDS = ("sourced", "applied", "derived", "estimate", "not-modelled")
#: Numeric fields that must carry a source whenever they are set.
SOURCED_FIELDS = ("gpu_slots", "host_idle_power_w", "host_loaded_power_w", "host_load_share", "psu_efficiency",
                  "embodied_kgco2e_non_gpu", "lifetime_years")


@dataclass(frozen=True)
class Platform:
    """One server or board type. Field names carry units (W, fraction, kg CO2e, years).

    - ``gpu_slots``: GPUs (or superchips) one platform holds.
    - ``host_idle_power_w``: host DC power with the GPUs idle, excluding the GPUs (W).
    - ``host_loaded_power_w``: host DC power with every GPU at full load, excluding the GPUs (W).
    - ``host_load_share``: share of the host's dynamic power (loaded - idle) that follows GPU load (0-1).
    - ``psu_efficiency``: DC out over AC in of the power supplies (0-1]; wall power = DC power / efficiency.
    - ``embodied_kgco2e_non_gpu``: manufacturing carbon of the platform minus its GPUs (kg CO2e); ``None`` = unknown.
    - ``lifetime_years``: the lifetime the embodied figure's source amortises it over; ``None`` = llmco2's default.
    """

    id: str
    name: str
    gpu_slots: int
    host_idle_power_w: float
    host_loaded_power_w: float
    host_load_share: float
    psu_efficiency: float
    sources: dict[str, str]
    kinds: dict[str, str]
    aliases: tuple[str, ...] = ()
    embodied_kgco2e_non_gpu: float | None = None
    lifetime_years: float | None = None

    @property
    def host_dynamic_power_w(self) -> float:
        """Host power that comes with GPU load at full load of every slot (W): loaded - idle."""
        return self.host_loaded_power_w - self.host_idle_power_w

    def kind(self, field: str) -> str:
        """The kind of figure ``field`` holds (``sourced`` unless the data file says otherwise)."""
        return self.kinds.get(field, "sourced")

    def estimated_fields(self) -> list[str]:
        """Numeric fields whose figure is not taken from a source as it stands (kind other than ``sourced``)."""
        return [f for f in SOURCED_FIELDS if getattr(self, f) is not None and self.kind(f) != "sourced"]


_FIELDS = {f.name for f in fields(Platform)}


def platform_from_dict(raw: dict[str, Any], origin: str = "platforms.toml") -> Platform:
    """Build a `Platform` from one ``[[platform]]`` table, checking keys, ranges, sources and kinds."""
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ValueError(f"{origin}: platform {raw.get('id')!r} has unknown keys {sorted(unknown)}")
    data = dict(raw)
    data["aliases"] = tuple(str(a).lower() for a in data.get("aliases", ()))
    data.setdefault("kinds", {})
    for key in ("host_idle_power_w", "host_loaded_power_w", "host_load_share", "psu_efficiency",
                "embodied_kgco2e_non_gpu", "lifetime_years"):
        if data.get(key) is not None:
            data[key] = float(data[key])
    data["gpu_slots"] = int(data["gpu_slots"])
    plat = Platform(**data)
    missing = [k for k in SOURCED_FIELDS if getattr(plat, k) is not None and not plat.sources.get(k)]
    if missing:
        raise ValueError(f"{origin}: platform {plat.id!r} has numbers without a source: {missing}")
    bad_kinds = {k: v for k, v in plat.kinds.items() if v not in KINDS or k not in SOURCED_FIELDS}
    if bad_kinds:
        raise ValueError(f"{origin}: platform {plat.id!r} has unknown kinds {bad_kinds}; kinds are {', '.join(KINDS)}")
    _check_ranges(plat, origin)
    return plat


def _check_ranges(plat: Platform, origin: str) -> None:
    """Slots positive, idle <= loaded, shares and efficiencies in range, embodied and lifetime non-negative."""
    problems = []
    if plat.gpu_slots < 1:
        problems.append(f"gpu_slots {plat.gpu_slots} < 1")
    if not 0 <= plat.host_idle_power_w <= plat.host_loaded_power_w:
        problems.append(f"host_idle_power_w {plat.host_idle_power_w} is not between 0 and host_loaded_power_w "
                        f"{plat.host_loaded_power_w}")
    if not 0 <= plat.host_load_share <= 1:
        problems.append(f"host_load_share {plat.host_load_share} is not in [0, 1]")
    if not 0 < plat.psu_efficiency <= 1:
        problems.append(f"psu_efficiency {plat.psu_efficiency} is not in (0, 1]")
    if plat.embodied_kgco2e_non_gpu is not None and plat.embodied_kgco2e_non_gpu < 0:
        problems.append(f"embodied_kgco2e_non_gpu {plat.embodied_kgco2e_non_gpu} < 0")
    if plat.lifetime_years is not None and plat.lifetime_years <= 0:
        problems.append(f"lifetime_years {plat.lifetime_years} <= 0")
    if problems:
        raise ValueError(f"{origin}: platform {plat.id!r}: " + "; ".join(problems))


@dataclass(frozen=True)
class PlatformData:
    """The loaded data file: the platform catalog and the GPU id -> usual platform id table."""

    catalog: Catalog[Platform]
    gpu_platform: dict[str, str]


def load_platform_file(path: str | Path) -> PlatformData:
    """Load every ``[[platform]]`` table and the ``[gpu_platform]`` table of a TOML file."""
    doc = load_toml(path)
    catalog = Catalog("platform", [platform_from_dict(p, origin=str(path)) for p in doc.get("platform", [])])
    mapping = {str(g): str(p) for g, p in doc.get("gpu_platform", {}).items()}
    dangling = sorted(g for g, p in mapping.items() if p not in catalog.ids)
    if dangling:
        raise ValueError(f"{path}: [gpu_platform] maps {dangling} to platforms that are not in the file")
    return PlatformData(catalog, mapping)


@functools.cache
def platform_data() -> PlatformData:
    """The shipped platform catalog and GPU mapping (cached)."""
    path = resources.files("llmco2.specs") / "data" / "platforms.toml"
    with resources.as_file(path) as real:
        return load_platform_file(real)


def platform_catalog() -> Catalog[Platform]:
    """The shipped platform catalog."""
    return platform_data().catalog


def platform_ids() -> list[str]:
    """Ids of the shipped platforms, in file order."""
    return platform_catalog().ids


def get_platform(name: str | Platform) -> Platform:
    """A platform by id or alias; an unknown name raises `InvalidInputError` naming every valid id on one line."""
    if isinstance(name, Platform):
        return name
    catalog = platform_catalog()
    if name in catalog:
        return catalog.get(name, field="platform")
    raise InvalidInputError(f"unknown platform {name!r}; valid platforms: {', '.join(catalog.ids)}", field="platform")


def platform_for_gpu(gpu: str | GPU) -> Platform:
    """The usual platform of ``gpu`` (an id, alias or `GPU`), from the data file's ``[gpu_platform]`` table.

    A GPU missing from the table (a user-defined device) falls back by its form factor: an 8-slot HGX/OAM
    baseboard for SXM and OAM modules, the per-superchip node for superchips, the edge board for SoCs and modules,
    the workstation for GeForce cards, else the two-socket PCIe server with as many slots as its ``gpus_per_node``
    (4 or 8). The fallback is logged.
    """
    dev = get_gpu(gpu)
    data = platform_data()
    pid = data.gpu_platform.get(dev.id)
    if pid is None:
        pid = _fallback_platform_id(dev)
        logger.info("GPU %s has no usual platform in platforms.toml; using %s by its form factor", dev.id, pid)
    return data.catalog.get(pid, field="platform")


def _fallback_platform_id(dev: GPU) -> str:
    form = normalise_key(dev.form_factor)
    if form.startswith("sxm"):
        return "hgx-h100-8"
    if form.startswith("oam"):
        return "oam-8"
    if form == "superchip":
        return "gh200-node"
    if form in ("module", "soc"):
        return "jetson-agx-orin-devkit"
    if "geforce" in dev.name.lower():
        return "workstation"
    return "pcie-2s-8gpu" if dev.gpus_per_node >= 8 else "pcie-2s-4gpu"


def resolve_platform(platform: str | Platform | None, gpu: str | GPU) -> Platform:
    """``platform`` when given (id, alias or `Platform`), else the usual platform of ``gpu``."""
    return get_platform(platform) if platform is not None else platform_for_gpu(gpu)


__all__ = ["KINDS", "Platform", "PlatformData", "SOURCED_FIELDS", "get_platform", "load_platform_file",
           "platform_catalog", "platform_data", "platform_for_gpu", "platform_from_dict", "platform_ids",
           "resolve_platform"]
