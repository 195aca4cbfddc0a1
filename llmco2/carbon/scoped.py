"""Carbon on a named scope for many requests: the server-scope figures of a table of requests
(:class:`ServerParts`), and the ``scope`` entry of the assumptions that names the scope.

The scope is chosen once per run (:func:`scope_entry`, kept in the assumptions as ``assumptions["scope"]``):

- ``gpu``: carbon on the GPUs' energy, exactly llmco2's figures before platforms existed; the server energy is
  still reported beside it.
- ``server``: carbon on the server's wall energy (GPUs + the host's share of the request's GPU slots + power-supply
  losses) and embodied carbon plus the platform's non-GPU share, amortised over the GPUs' lifetime.

Each request's host share uses its GPU type's usual platform (:func:`llmco2.specs.platforms.platform_for_gpu`) or
the one platform the user named. Per phase, the host is charged for the phase's predicted time. Units: J, s, g CO2eq.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.carbon.server_scope import SERVER_SCOPE, check_scope, platform_record, server_arrays
from llmco2.specs.gpus import GPU
from llmco2.specs.platforms import Platform, get_platform, resolve_platform

#: What each scope's carbon is computed on, in words (the ``carbon_on`` of the scope entry).
CARBON_ON = {"gpu": "GPU energy (what NVML-style counters hold) and the GPUs' embodied carbon",
             "server": "server wall energy (GPUs + host share of the GPU slots + power-supply losses) and the "
                       "embodied carbon of the GPUs and of the platform's non-GPU parts"}


def scope_entry(scope: str, platform: str | Platform | None = None) -> dict[str, Any]:
    """The ``scope`` entry of the assumptions: ``{"scope", "platform" (id, or None: each GPU's usual platform),
    "carbon_on"}``; an unknown scope or platform raises `InvalidInputError` naming it (``field="scope"`` /
    ``"platform"``)."""
    key = check_scope(scope)
    plat = get_platform(platform).id if platform is not None else None
    return {"scope": key, "platform": plat, "carbon_on": CARBON_ON[key]}


@dataclass
class ServerParts:
    """Server-scope figures of ``n`` requests (arrays of length ``n``).

    ``prefill_j``/``decode_j``: server wall energy per phase (J); ``host_j``: host DC energy (J); ``psu_loss_j``:
    power-supply losses (J); ``embodied_non_gpu_g``: the platform's non-GPU embodied carbon charged (g CO2eq, NaN when
    unknown); ``host_share``: GPUs used / GPU slots; ``utilisation``: the GPUs' load proxy of the whole request;
    ``platform``: index into ``platforms``.
    """

    prefill_j: NDArray[np.float64]
    decode_j: NDArray[np.float64]
    host_j: NDArray[np.float64]
    psu_loss_j: NDArray[np.float64]
    embodied_non_gpu_g: NDArray[np.float64]
    host_share: NDArray[np.float64]
    utilisation: NDArray[np.float64]
    platform: NDArray[np.int64]
    platforms: list[Platform]

    @property
    def total_j(self) -> NDArray[np.float64]:
        """Server wall energy of the whole request (J)."""
        return self.prefill_j + self.decode_j

    def row(self, i: int) -> dict[str, Any]:
        """Request ``i``'s host share as JSON-ready values: the platform's figures and sources, the share of its GPU
        slots, the load proxy, host energy and PSU losses (J) and non-GPU embodied carbon (g CO2eq)."""
        emb = float(self.embodied_non_gpu_g[i])
        return {**platform_record(self.platforms[int(self.platform[i])]),
                "gpu_slot_share": float(self.host_share[i]), "utilisation": float(self.utilisation[i]),
                "host_energy_j": float(self.host_j[i]), "psu_loss_j": float(self.psu_loss_j[i]),
                "embodied_non_gpu_g": None if np.isnan(emb) else emb}


def server_parts(gpus: list[GPU], gpu_code: NDArray[np.int64], num_gpus: NDArray[Any], energy_j: NDArray[np.float64],
                 latency_s: NDArray[np.float64], platform: str | None, lifetime_years: float) -> ServerParts:
    """Server-scope figures of requests of GPU types ``gpus[gpu_code]`` on ``num_gpus`` GPUs, with per-phase GPU
    energy ``energy_j`` ([n, 2] J, prefill and decode) and latency ``latency_s`` ([n, 2] s). Each phase's host share
    is charged for the phase's time at the phase's load; non-GPU embodied carbon over the whole request's time."""
    n = len(gpu_code)
    out = {k: np.zeros(n) for k in ("prefill", "decode", "host", "psu", "emb", "share", "util")}
    plat_code = np.zeros(n, dtype=np.int64)
    platforms: list[Platform] = []
    used = np.asarray(num_gpus, dtype=np.float64)
    for code, gpu in enumerate(gpus):
        mine = np.flatnonzero(gpu_code == code)
        if not len(mine):
            continue
        plat = resolve_platform(platform, gpu)
        if plat not in platforms:
            platforms.append(plat)
        plat_code[mine] = platforms.index(plat)
        pre = server_arrays(energy_j[mine, 0], latency_s[mine, 0], gpu, used[mine], plat, lifetime_years)
        dec = server_arrays(energy_j[mine, 1], latency_s[mine, 1], gpu, used[mine], plat, lifetime_years)
        whole = server_arrays(energy_j[mine].sum(axis=1), latency_s[mine].sum(axis=1), gpu, used[mine], plat,
                              lifetime_years)
        out["prefill"][mine], out["decode"][mine] = pre.server_j, dec.server_j
        out["host"][mine], out["psu"][mine] = pre.host_j + dec.host_j, pre.psu_loss_j + dec.psu_loss_j
        out["emb"][mine], out["share"][mine], out["util"][mine] = whole.embodied_non_gpu_g, whole.host_share, whole.utilisation
    return ServerParts(out["prefill"], out["decode"], out["host"], out["psu"], out["emb"], out["share"], out["util"],
                       plat_code, platforms)


def scoped_carbon_inputs(scope: dict[str, Any] | None, gpu_total_j: NDArray[np.float64], gpu_embodied_g: NDArray[np.float64],
                         parts: ServerParts | None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(energy J, embodied g)`` that carbon is computed on: the GPUs' with scope ``gpu`` (or no scope), the
    server's with scope ``server`` (a platform without a non-GPU embodied figure adds 0)."""
    if scope is None or parts is None or scope["scope"] != SERVER_SCOPE:
        return gpu_total_j, gpu_embodied_g
    return parts.total_j, gpu_embodied_g + np.nan_to_num(parts.embodied_non_gpu_g)


__all__ = ["CARBON_ON", "ServerParts", "scope_entry", "scoped_carbon_inputs", "server_parts"]
