"""The server around the GPUs: host energy, power-supply losses and non-GPU embodied carbon of a request.

Two scopes (:data:`SCOPES`):

- ``gpu``: the GPUs' own energy, what NVML-style counters hold (llmco2's figures before platforms existed);
  nothing is added and nothing is rescaled.
- ``server``: the GPUs plus the host's share for the request's GPUs and time, at the wall (after the power
  supplies), and the platform's non-GPU embodied carbon amortised like the GPUs' (``carbon.accounting``).

Formulas (one function each; units in the names):

- utilisation proxy u = (GPU mean power - GPU static power) / (GPU power limit - GPU static power), clamped to [0, 1]
- host energy (J) = (idle W x k/n + (loaded - idle) W x load share x u x k/n) x seconds, for k GPUs used of n slots
- wall energy (J) = (GPU energy + host energy) / PSU efficiency; PSU loss = wall - (GPU + host)
- non-GPU embodied (g) = kg x 1000 x k/n x seconds / (lifetime years x seconds per year)

k/n above 1 means several platforms (k = 16 on 8-slot servers is two servers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from llmco2.carbon.accounting import SECONDS_PER_YEAR, default_lifetime_years
from llmco2.errors import InvalidInputError
from llmco2.specs.gpu_power import static_power_w
from llmco2.specs.gpus import GPU, get_gpu
from llmco2.specs.platforms import Platform, resolve_platform

logger = logging.getLogger(__name__)

GPU_SCOPE = "gpu"
SERVER_SCOPE = "server"
SCOPES = (GPU_SCOPE, SERVER_SCOPE)


def check_scope(scope: str) -> str:
    """``scope`` lower-cased if it is one of :data:`SCOPES`; `InvalidInputError` naming them otherwise."""
    key = str(scope).strip().lower()
    if key not in SCOPES:
        raise InvalidInputError(f"unknown scope {scope!r}; valid scopes: {', '.join(SCOPES)}", field="scope")
    return key


def slot_share(gpus_used: float, gpu_slots: int) -> float:
    """Share of a platform a request holds (dimensionless): GPUs used / GPU slots (above 1: several platforms)."""
    if gpus_used <= 0:
        raise InvalidInputError(f"must be positive, got {gpus_used}", field="num_gpus")
    return float(gpus_used) / float(gpu_slots)


def utilisation_proxy(gpu_energy_j: float, duration_s: float, gpu: GPU | str, gpus_used: float) -> float:
    """GPU load in [0, 1] from the GPUs' mean power: (mean W per GPU - static W) / (power limit W - static W).

    Mean power per GPU = energy (J) / seconds / GPUs. Static power is :func:`llmco2.specs.gpu_power.static_power_w`
    (the sourced idle figure or its fallback); the power limit is the catalog's ``tdp_w``.
    """
    dev = get_gpu(gpu)
    if duration_s <= 0:
        return 0.0
    mean_w = gpu_energy_j / duration_s / gpus_used
    idle_w, _ = static_power_w(dev)
    span_w = dev.tdp_w - idle_w
    if span_w <= 0:
        return 1.0
    return min(1.0, max(0.0, (mean_w - idle_w) / span_w))


def host_energy_j(platform: Platform, gpus_used: float, duration_s: float, utilisation: float) -> float:
    """Host energy (J, DC) attributed to a request: (idle W + dynamic W x load share x u) x k/n x seconds."""
    share = slot_share(gpus_used, platform.gpu_slots)
    power_w = platform.host_idle_power_w + platform.host_dynamic_power_w * platform.host_load_share * utilisation
    return power_w * share * duration_s


def wall_energy_j(dc_energy_j: Any, psu_efficiency: float) -> Any:
    """Energy drawn at the wall (J) for DC energy delivered (J) through supplies of efficiency (0, 1]."""
    if not 0 < psu_efficiency <= 1:
        raise InvalidInputError(f"must be in (0, 1], got {psu_efficiency}", field="psu_efficiency")
    return dc_energy_j / psu_efficiency


def embodied_non_gpu_g(platform: Platform, gpus_used: float, duration_s: float,
                       lifetime_years: float | None = None) -> float:
    """Non-GPU embodied carbon charged to a request (g CO2e): kg x 1000 x k/n x seconds / lifetime (s).

    Lifetime: ``lifetime_years`` if given, else the platform's, else llmco2's default
    (:func:`llmco2.carbon.accounting.default_lifetime_years`), the one the GPUs' embodied carbon uses.
    NaN when the platform's figure is unknown.
    """
    if platform.embodied_kgco2e_non_gpu is None:
        return float("nan")
    years = lifetime_years if lifetime_years is not None else platform.lifetime_years
    years = default_lifetime_years() if years is None else float(years)
    if years <= 0:
        raise InvalidInputError(f"must be positive, got {years}", field="lifetime_years")
    share = slot_share(gpus_used, platform.gpu_slots)
    return platform.embodied_kgco2e_non_gpu * 1000.0 * share * duration_s / (years * SECONDS_PER_YEAR)


@dataclass(frozen=True)
class ServerShare:
    """A request's energy and non-GPU embodied carbon on a named scope.

    ``server_energy_j`` = ``gpu_energy_j`` + ``host_energy_j`` + ``psu_loss_j`` (wall energy); with scope ``gpu`` it
    equals ``gpu_energy_j`` exactly and the other parts are 0. ``sources`` maps each platform figure used to its source.
    """

    scope: str
    platform: str
    gpu_energy_j: float
    host_energy_j: float
    psu_loss_j: float
    server_energy_j: float
    embodied_non_gpu_g: float
    host_share: float
    utilisation: float
    sources: dict[str, str]
    estimated: tuple[str, ...] = ()

    @property
    def host_and_psu_fraction(self) -> float:
        """Share of the scope's energy that is not the GPUs' (0 with scope ``gpu``)."""
        return 0.0 if self.server_energy_j <= 0 else (self.host_energy_j + self.psu_loss_j) / self.server_energy_j


def server_share(gpu_energy_j: float, duration_s: float, gpu: GPU | str, gpus_used: float,
                 platform: str | Platform | None = None, scope: str = SERVER_SCOPE,
                 lifetime_years: float | None = None) -> ServerShare:
    """Energy and non-GPU embodied carbon of a request of ``gpu_energy_j`` J over ``duration_s`` s on ``gpus_used``
    GPUs of type ``gpu``, on ``platform`` (default: the GPU's usual platform) and ``scope`` (``gpu`` or ``server``)."""
    key = check_scope(scope)
    if gpu_energy_j < 0 or duration_s < 0:
        raise InvalidInputError(f"energy and duration must be >= 0, got {gpu_energy_j} J over {duration_s} s",
                                field="gpu_energy_j")
    plat = resolve_platform(platform, gpu)
    share = slot_share(gpus_used, plat.gpu_slots)
    if key == GPU_SCOPE:
        return ServerShare(key, plat.id, gpu_energy_j, 0.0, 0.0, gpu_energy_j, 0.0, share, 0.0, {})
    util = utilisation_proxy(gpu_energy_j, duration_s, gpu, gpus_used)
    host_j = host_energy_j(plat, gpus_used, duration_s, util)
    dc_j = gpu_energy_j + host_j
    wall_j = wall_energy_j(dc_j, plat.psu_efficiency)
    embodied = embodied_non_gpu_g(plat, gpus_used, duration_s, lifetime_years)
    used = ("host_idle_power_w", "host_loaded_power_w", "host_load_share", "psu_efficiency",
            "embodied_kgco2e_non_gpu", "lifetime_years")
    sources = {f: plat.sources[f] for f in used if f in plat.sources}
    return ServerShare(key, plat.id, gpu_energy_j, host_j, wall_j - dc_j, wall_j, embodied, share, util, sources,
                       tuple(plat.estimated_fields()))


@dataclass(frozen=True)
class ServerArrays:
    """:func:`server_share` for many requests on one GPU type and platform, as arrays (one entry per request).

    ``server_j`` = ``gpu_j`` + ``host_j`` + ``psu_loss_j`` (J, wall); ``embodied_non_gpu_g`` in g CO2eq (NaN when the
    platform's figure is unknown); ``host_share`` = GPUs used / GPU slots; ``utilisation`` in [0, 1].
    """

    gpu_j: NDArray[np.float64]
    host_j: NDArray[np.float64]
    psu_loss_j: NDArray[np.float64]
    server_j: NDArray[np.float64]
    embodied_non_gpu_g: NDArray[np.float64]
    host_share: NDArray[np.float64]
    utilisation: NDArray[np.float64]


def server_arrays(gpu_energy_j: ArrayLike, duration_s: ArrayLike, gpu: GPU | str, gpus_used: ArrayLike,
                  platform: Platform, lifetime_years: float | None = None) -> ServerArrays:
    """The server-scope figures of many requests of ``gpu`` on ``platform``: the formulas of :func:`server_share`
    (module docstring) applied element-wise. Energy in J, durations in s, GPUs used per request."""
    energy = np.asarray(gpu_energy_j, dtype=np.float64)
    seconds = np.broadcast_to(np.asarray(duration_s, dtype=np.float64), energy.shape)
    used = np.broadcast_to(np.asarray(gpus_used, dtype=np.float64), energy.shape)
    if (used <= 0).any():
        raise InvalidInputError(f"must be positive, got {float(used.min())}", field="num_gpus")
    dev = get_gpu(gpu)
    idle_w, _ = static_power_w(dev)
    span_w = dev.tdp_w - idle_w
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_w = np.where(seconds > 0, energy / np.where(seconds > 0, seconds, 1.0) / used, idle_w)
    util = np.ones_like(energy) if span_w <= 0 else np.clip((mean_w - idle_w) / span_w, 0.0, 1.0)
    util = np.where(seconds > 0, util, 0.0)
    share = used / float(platform.gpu_slots)
    host_w = platform.host_idle_power_w + platform.host_dynamic_power_w * platform.host_load_share * util
    host = host_w * share * seconds
    wall = wall_energy_j(energy + host, platform.psu_efficiency)
    if platform.embodied_kgco2e_non_gpu is None:
        embodied = np.full_like(energy, np.nan)
    else:
        years = lifetime_years if lifetime_years is not None else platform.lifetime_years
        years = default_lifetime_years() if years is None else float(years)
        embodied = platform.embodied_kgco2e_non_gpu * 1000.0 * share * seconds / (years * SECONDS_PER_YEAR)
    return ServerArrays(energy, host, wall - (energy + host), wall, embodied, share, util)


def platform_record(platform: Platform) -> dict[str, Any]:
    """A platform's figures as JSON-ready values: id, name, GPU slots, host idle and loaded power (W), load share,
    PSU efficiency, non-GPU embodied carbon (kg CO2eq), the source of each and the fields that are not sourced as
    they stand (``estimated``)."""
    used = ("gpu_slots", "host_idle_power_w", "host_loaded_power_w", "host_load_share", "psu_efficiency",
            "embodied_kgco2e_non_gpu", "lifetime_years")
    return {"platform": platform.id, "platform_name": platform.name, "gpu_slots": platform.gpu_slots,
            "host_idle_w": platform.host_idle_power_w, "host_loaded_w": platform.host_loaded_power_w,
            "host_load_share": platform.host_load_share, "psu_efficiency": platform.psu_efficiency,
            "embodied_kgco2e_non_gpu": platform.embodied_kgco2e_non_gpu,
            "sources": {f: platform.sources[f] for f in used if f in platform.sources},
            "estimated": {f: platform.kind(f) for f in platform.estimated_fields()}}


__all__ = ["GPU_SCOPE", "SCOPES", "SERVER_SCOPE", "ServerArrays", "ServerShare", "check_scope", "embodied_non_gpu_g",
           "host_energy_j", "platform_record", "server_arrays", "server_share", "slot_share", "utilisation_proxy",
           "wall_energy_j"]
