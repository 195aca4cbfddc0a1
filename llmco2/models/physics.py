"""The physics prior of a phase: launch-overhead-aware latency and a power model (NumPy only).

Per phase (prefill, decode) of a request, with ``steps`` = 1 for prefill and ``generated - 1``
for decode and ``kernels`` = kernels of the layer DAG x layers + embedding, final norm and LM head
(every GPU of a tensor-parallel group launches all of them):

* ``t_busy = t_roofline / efficiency[device, phase]`` — the roofline time (s) at a fitted fraction
  of the catalog peaks (fitted per device with latency rows; a device without rows takes the
  median of its group, data-centre GPUs or edge modules/SoCs, so an unseen GPU is predicted from
  its catalog numbers alone),
* ``t_launch = steps x kernels x launch_overhead(engine)`` — the host time to launch the kernels,
* ``latency = max(t_busy, t_launch) + steps x step_overhead(engine)`` (s),
* ``utilisation = activity[phase] x t_busy / latency`` (the share of the time the GPU works at the
  roofline, times a fitted activity at full load),
* ``power = num_gpus x (idle + (power limit - idle) x utilisation)`` (W), ``energy = latency x power`` (J).

The hardware enters only through catalog numbers (peaks, bandwidths, TDP, idle power), the engine
through its overheads: fitted per engine on training rows with a latency and stored with the
checkpoint (:mod:`llmco2.models.physics_fit`); engines without rows keep the catalog priors of
``llmco2/specs/data/engines.toml``, and ``unknown`` takes the median of the fitted engines.

Idle power: the catalog's ``idle_power_w`` where a source publishes one, else
:data:`IDLE_FRACTION_OF_TDP` x TDP.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import KERNEL_NAMES, LayerAnalysis
from llmco2.analytic.model import ModelTotals
from llmco2.specs import GPU, ModelArch, Request, engine_catalog, engine_id, engine_ids

Item = tuple[ModelArch, Request, GPU]

#: Idle power as a fraction of TDP for a GPU whose catalog entry publishes no idle figure. Source:
#: this project's own reading on an NVIDIA H100 80GB HBM3 at its 700 W limit, 120 W idle before
#: the crosscheck run (``../shared/data/h100_hf/README.md``): 120 / 700 = 0.17. Vendors publish no
#: idle figure for the data-centre GPUs of the catalog; the only published value (RK3588 module,
#: 4.5 of 12 W) is used directly for that device.
IDLE_FRACTION_OF_TDP = 0.17
#: Embedding, final norm and LM head: kernels launched per step besides the layers'.
HEAD_KERNELS = 3
MIN_TIME_S = 1e-9
PHASE_NAMES = ("prefill", "decode")


EDGE_FORM_FACTORS = ("module", "SoC")
DEFAULT_EFFICIENCY = (0.5, 0.5)


def device_group(gpu: GPU) -> str:
    """``"edge"`` for modules and SoCs, ``"datacentre"`` otherwise."""
    return "edge" if gpu.form_factor in EDGE_FORM_FACTORS else "datacentre"


#: `engine_id` memoised (requests of a batch share a handful of engine names).
cached_engine_id = functools.lru_cache(maxsize=256)(engine_id)

def idle_power_w(gpu: GPU) -> float:
    """Idle power of one GPU (W): catalog ``idle_power_w``, else ``IDLE_FRACTION_OF_TDP x TDP``."""
    return float(gpu.idle_power_w) if gpu.idle_power_w is not None else IDLE_FRACTION_OF_TDP * float(gpu.tdp_w)


@dataclass(frozen=True)
class PhaseInputs:
    """Per-request quantities the prior needs, as ``[n]`` or ``[n, 2]`` arrays."""

    roofline_s: NDArray[np.float64]  # [n, 2] roofline time of prefill and decode
    steps: NDArray[np.float64]  # [n, 2] 1 and generated - 1
    kernels: NDArray[np.float64]  # [n] kernel launches per step
    num_gpus: NDArray[np.float64]  # [n]
    tdp_w: NDArray[np.float64]  # [n] power limit of one GPU
    idle_w: NDArray[np.float64]  # [n] idle power of one GPU
    engines: list[str] = field(default_factory=list)  # [n] engine ids
    devices: list[str] = field(default_factory=list)  # [n] GPU ids
    groups: list[str] = field(default_factory=list)  # [n] "edge" or "datacentre"

    def take(self, idx: NDArray[np.int64]) -> PhaseInputs:
        """The requests at ``idx``."""
        pick = [list(np.asarray(v, dtype=object)[idx]) for v in (self.engines, self.devices, self.groups)]
        return PhaseInputs(self.roofline_s[idx], self.steps[idx], self.kernels[idx], self.num_gpus[idx], self.tdp_w[idx],
                           self.idle_w[idx], *pick)

    @classmethod
    def build(cls, items: Sequence[Item], analysis: LayerAnalysis, totals: ModelTotals) -> PhaseInputs:
        b = analysis.batch
        roof = np.stack([np.maximum(totals.totals[p]["time_s"], 0.0) for p in PHASE_NAMES], axis=1)
        gen = b.generated
        steps = np.stack([np.ones_like(gen), np.maximum(gen - 1.0, 0.0)], axis=1)
        per_layer = np.sum([analysis.present[k].astype(np.float64) for k in KERNEL_NAMES], axis=0)
        kernels = per_layer * b.layers + HEAD_KERNELS
        idle = np.array([idle_power_w(g) for _, _, g in items], dtype=np.float64)
        return cls(roof, steps, kernels, b.num_gpus.astype(np.float64), b.tdp_w.astype(np.float64), idle,
                   [cached_engine_id(r.engine) for _, r, _ in items], [g.id for _, _, g in items], [device_group(g) for _, _, g in items])


def _catalog_priors() -> tuple[dict[str, float], dict[str, float]]:
    launch = {e.id: e.launch_overhead_us for e in engine_catalog()}
    step = {e.id: e.step_overhead_ms for e in engine_catalog()}
    return launch, step


@dataclass
class PhysicsPrior:
    """Fitted parameters of the prior (see the module docstring).

    Attributes:
        mode: ``"physical"`` (this model) or ``"tdp"`` (the earlier prior: roofline time x TDP x
            GPUs, latency = roofline time / efficiency); kept selectable for comparisons.
        efficiency: device id or group (``edge``, ``datacentre``) -> fraction of the roofline
            reached in prefill and decode.
        activity: ``[2]`` utilisation at full roofline load (fraction of the dynamic power range).
        launch_us: engine id -> launch overhead per kernel (microseconds).
        step_ms: engine id -> framework overhead per step (milliseconds).
        fitted_engines: engines whose overheads were fitted on rows (the others keep priors).
        fit_report: rows and median latency error of the fit, per engine.
    """

    mode: str = "physical"
    efficiency: dict[str, list[float]] = field(default_factory=dict)
    activity: NDArray[np.float64] = field(default_factory=lambda: np.array([1.0, 1.0]))
    launch_us: dict[str, float] = field(default_factory=lambda: _catalog_priors()[0])
    step_ms: dict[str, float] = field(default_factory=lambda: _catalog_priors()[1])
    fitted_engines: list[str] = field(default_factory=list)
    fit_report: dict[str, Any] = field(default_factory=dict)

    def efficiencies(self, devices: Sequence[str], groups: Sequence[str]) -> NDArray[np.float64]:
        """``[n, 2]`` roofline efficiency of each request's device (its group's when not fitted)."""
        keys = np.char.add(np.char.add(np.asarray(devices, dtype=str), "|"), np.asarray(groups, dtype=str))
        uniq, inverse = np.unique(keys, return_inverse=True)
        table = np.array([self.efficiency.get(d) or self.efficiency.get(g) or list(DEFAULT_EFFICIENCY)
                          for d, g in (k.split("|") for k in uniq)], dtype=np.float64).reshape(-1, 2)
        return table[inverse.reshape(-1)]

    def overheads(self, engines: Sequence[str]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``[n]`` launch overhead per kernel and per-step overhead (s) of each request's engine."""
        uniq, inverse = np.unique(np.asarray(engines, dtype=str), return_inverse=True)
        launch = np.array([self.launch_us.get(e, self.launch_us.get("unknown", 8.0)) for e in uniq]) * 1e-6
        step = np.array([self.step_ms.get(e, self.step_ms.get("unknown", 1.5)) for e in uniq]) * 1e-3
        return launch[inverse.reshape(-1)], step[inverse.reshape(-1)]

    def latency_s(self, x: PhaseInputs) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``([n, 2] latency (s), [n, 2] busy time (s))``; an empty phase (0 steps) takes 0 s."""
        busy = x.roofline_s / self.efficiencies(x.devices, x.groups)
        if self.mode == "tdp":
            lat = busy
        else:
            launch, step = self.overheads(x.engines)
            lat = np.maximum(busy, x.steps * (x.kernels * launch)[:, None]) + x.steps * step[:, None]
        lat = np.where(x.steps > 0, np.maximum(lat, MIN_TIME_S), 0.0)
        return lat, busy

    def utilisation(self, x: PhaseInputs, lat: NDArray[np.float64], busy: NDArray[np.float64]) -> NDArray[np.float64]:
        """``[n, 2]`` fraction of the dynamic power range (0-1)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(lat > 0, busy / np.where(lat > 0, lat, 1.0), 0.0)
        return np.clip(self.activity * np.minimum(frac, 1.0), 0.0, 1.0)

    def energy_j(self, x: PhaseInputs) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``([n, 2] prior energy (J), [n, 2] latency (s))``."""
        lat, busy = self.latency_s(x)
        if self.mode == "tdp":
            return x.roofline_s * x.tdp_w[:, None] * x.num_gpus[:, None], lat
        u = self.utilisation(x, lat, busy)
        power = x.num_gpus[:, None] * (x.idle_w[:, None] + (x.tdp_w - x.idle_w)[:, None] * u)
        return lat * power, lat

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "efficiency": {k: list(v) for k, v in self.efficiency.items()}, "activity": self.activity.tolist(),
                "launch_us": dict(self.launch_us), "step_ms": dict(self.step_ms),
                "fitted_engines": list(self.fitted_engines), "fit_report": self.fit_report}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> PhysicsPrior:
        if not state:
            return cls()
        launch, step = _catalog_priors()
        return cls(state.get("mode", "physical"), {k: [float(a) for a in v] for k, v in state["efficiency"].items()},
                   np.asarray(state["activity"], dtype=float), {**launch, **state.get("launch_us", {})},
                   {**step, **state.get("step_ms", {})}, list(state.get("fitted_engines", [])),
                   dict(state.get("fit_report", {})))


def known_engines() -> list[str]:
    """Engine ids of the catalog (the categorical levels, ``unknown`` included)."""
    return list(engine_ids())
