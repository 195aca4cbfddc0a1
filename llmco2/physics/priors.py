"""The physics prior of a phase: launch-overhead-aware latency and a power model (NumPy only).

Per phase (prefill, decode) of a request, with ``steps`` = 1 for prefill and ``generated - 1``
for decode and ``kernels`` = kernels of the layer DAG x layers + embedding, final norm and LM head
(every GPU of a tensor-parallel group launches all of them):

* ``t_busy = t_roofline / efficiency[device, phase]`` — the roofline time (s) at a fitted fraction
  of the catalog peaks (fitted per device with latency rows; a device without rows takes the
  median of its group, data-centre GPUs or edge modules/SoCs, so an unseen GPU is predicted from
  its catalog numbers alone),
* ``t_launch = steps x kernels x launch_overhead(engine)`` — the host time to launch the kernels,
* ``t_collective = steps x collectives x collective_latency`` — the fixed cost of each
  tensor-parallel all-reduce (``collectives`` = all-reduce kernels of the DAG x layers, zero on one
  GPU): a decode step's all-reduce moves a few kilobytes, so its time is the latency floor of the
  collective and the wait for the slowest rank, not bytes / bandwidth (the roofline's network term),
* ``latency = max(t_busy, t_launch) + t_collective + steps x step_overhead(engine)`` (s),
* ``utilisation = activity[0] x t_compute / (GPUs x latency) + activity[1] x t_memory / (GPUs x latency)``
  (power model ``units``, the default): the mean share of the time each GPU's arithmetic units and
  memory system are busy (``t_compute`` = operations / peak rate and ``t_memory`` = bytes / bandwidth,
  summed over the GPUs), each weighted by a fitted fraction of the dynamic power range at full use,
  so that prefill (compute-bound) and decode (memory- or launch-bound) draw different power for the
  same physical reason on every GPU. (Power model ``phase``, kept for older checkpoints:
  ``activity[phase] x t_busy / latency``.)
* ``power = num_gpus x (idle + (power limit - idle) x utilisation)`` (W), ``energy = latency x power`` (J).

The hardware enters only through catalog numbers (peaks, bandwidths, TDP, idle power), the engine
through its overheads: fitted per engine on training rows with a latency and stored with the
checkpoint (:mod:`llmco2.physics.prior_fit`); engines without rows keep the catalog priors of
``llmco2/specs/data/engines.toml``, and ``unknown`` takes the median of the fitted engines.

Idle power: :func:`llmco2.specs.gpu_power.static_power_w` (the catalog's sourced ``idle_power_w``, else
the median of the GPU's device class; never a share of the power limit).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.experts import rank_batch
from llmco2.analytic.layer import KERNEL_NAMES, LayerAnalysis
from llmco2.analytic.model import ModelTotals, sequences_at_once
from llmco2.analytic.quantised import kernel_launches
from llmco2.analytic.table import RequestTable, distinct_rows, object_codes, value_codes
from llmco2.errors import InvalidInputError
from llmco2.physics.hardware_rows import HardwareRows
from llmco2.physics.link_rows import collectives_per_layer
from llmco2.physics.step_bounds import BOUNDS, ENGINE_BOUNDS, FIXED_RANGES
from llmco2.physics.step_physics import GLOBAL_PARAMS, StepParams
from llmco2.specs import GPU, ModelArch, Request, engine_catalog, engine_id, engine_ids, get_engine
from llmco2.specs.engines import GPU_MEMORY_UTILIZATION
from llmco2.specs.gpu_power import static_power_w

Item = tuple[ModelArch, Request, GPU]

#: Prior for the latency of one tensor-parallel all-reduce of a decode step (microseconds), refitted
#: on training rows with more than one GPU. Source: sgl-project/sglang pull request 2904 (2025), unit
#: test on H100 without CUDA graphs: vLLM's custom all-reduce of 4-32 KB (one token's hidden state)
#: takes 8.5-11.8 us at TP 2, 4 and 8; NCCL's is slower for such sizes.
COLLECTIVE_LATENCY_US = 10.0
ALL_REDUCE_KERNELS = tuple(k for k in KERNEL_NAMES if k.startswith("all_reduce"))
#: Embedding, final norm and LM head: kernels launched per step besides the layers'.
HEAD_KERNELS = 3
MIN_TIME_S = 1e-9
PHASE_NAMES = ("prefill", "decode")


EDGE_FORM_FACTORS = ("module", "SoC")
DEFAULT_EFFICIENCY = (0.5, 0.5)

# -- the constants a checkpoint may hold ----------------------------------------------------------
#: Ranges of the physics prior's constants in a checkpoint, in their stored units: the fit
#: (:mod:`llmco2.physics.prior_fit`) gives efficiencies in (0, 1] (a sigmoid) and activities from its
#: grid (the utilisation is clipped to 1 anyway); its overheads are fitted in log space near the
#: catalog priors (a few us per launch, a few ms per step), far inside these bounds.
PRIOR_RANGES: dict[str, tuple[float, float]] = {"efficiency": (0.0, 1.0), "activity": (0.0, 10.0),
                                                "launch_us": (0.0, 1e4), "step_ms": (0.0, 1e4),
                                                "sequence_us": (0.0, 1e5), "collective_us": (0.0, 1e5)}
#: How far beyond the step fit's bounds a checkpoint's step constants may lie (a factor, both ways).
STEP_SLACK = 10.0
#: The step constants' ranges (:mod:`llmco2.physics.step_bounds`): the fitted ones, then those the fit holds.
STEP_FIT_BOUNDS: dict[str, tuple[float, float]] = {**BOUNDS, **FIXED_RANGES}
STEP_ENGINE_BOUNDS: dict[str, tuple[float, float]] = dict(ENGINE_BOUNDS)


def checkpoint_number(value: Any, where: str, low: float, high: float, above: bool = False) -> float:
    """A number of a checkpoint's metadata as a float from ``low`` (excluded when ``above``) to
    ``high``; anything else (a list, text, NaN, out of range) is an :class:`InvalidInputError` of the
    checkpoint naming ``where``, the entry's path (``head.physics.step_ms.vllm``)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    x = float(value) if number else math.nan
    if not (math.isfinite(x) and (x > low if above else x >= low) and x <= high):
        raise InvalidInputError(f"{where} = {value!r:.24} is not in {'(' if above else '['}{low:g}, {high:g}]", field="checkpoint")
    return x


def checkpoint_numbers(values: Any, where: str, name: str) -> dict[str, float]:
    """A checkpoint's table of one constant per engine (``launch_us``, ...) checked against :data:`PRIOR_RANGES`."""
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"{where}.{name} is not a table of engines", field="checkpoint")
    low, high = PRIOR_RANGES[name]
    return {str(k): checkpoint_number(v, f"{where}.{name}.{k}", low, high) for k, v in values.items()}


def step_range(name: str, bounds: tuple[float, float], engine: bool = False) -> tuple[float, float]:
    """The range a checkpoint's step constant may take: the fit's bounds widened by
    :data:`STEP_SLACK` both ways; from 0 where the fit's lower bound is 0, and for an engine's
    overheads (0: a cost the engine does not have)."""
    lo, hi = bounds
    return (0.0 if engine or lo == 0 else lo / STEP_SLACK), hi * STEP_SLACK


def check_step_params(params: StepParams, where: str = "head.step.params") -> StepParams:
    """``params`` if every constant lies in :func:`step_range` of the fit's bounds (a checkpoint's
    constants far outside them predict energies of 1e300 J or infinite carbon); else an
    :class:`InvalidInputError` of the checkpoint naming the constant (``where``: its path)."""
    for name in GLOBAL_PARAMS:
        lo, hi = step_range(name, STEP_FIT_BOUNDS[name])
        checkpoint_number(getattr(params, name), f"{where}.{name}", lo, hi, above=lo > 0)
    for engine, overhead in params.engines.items():
        for name, bounds in STEP_ENGINE_BOUNDS.items():
            lo, hi = step_range(name, bounds, engine=True)
            checkpoint_number(getattr(overhead, name), f"{where}.engines.{engine}.{name}", lo, hi)
    return params


def device_group(gpu: GPU) -> str:
    """``"edge"`` for modules and SoCs, ``"datacentre"`` otherwise."""
    return "edge" if gpu.form_factor in EDGE_FORM_FACTORS else "datacentre"


#: `engine_id` memoised (requests of a batch share a handful of engine names).
cached_engine_id = functools.lru_cache(maxsize=256)(engine_id)

def idle_power_w(gpu: GPU) -> float:
    """Static (idle) power of one GPU (W): :func:`llmco2.specs.gpu_power.static_power_w`."""
    return float(static_power_w(gpu)[0])


@dataclass(frozen=True)
class PhaseInputs:
    """Per-request quantities the prior needs, as ``[n]`` or ``[n, 2]`` arrays."""

    roofline_s: NDArray[np.float64]  # [n, 2] roofline time of prefill and decode
    compute_s: NDArray[np.float64]  # [n, 2] operations / peak rate, summed over the GPUs
    memory_s: NDArray[np.float64]  # [n, 2] memory bytes / bandwidth, summed over the GPUs
    steps: NDArray[np.float64]  # [n, 2] 1 and generated - 1
    kernels: NDArray[np.float64]  # [n] kernel launches per step
    sequences: NDArray[np.float64]  # [n] sequences per step (the batch size)
    collectives: NDArray[np.float64]  # [n] tensor-parallel all-reduces per step (0 on one GPU)
    num_gpus: NDArray[np.float64]  # [n]
    tdp_w: NDArray[np.float64]  # [n] power limit of one GPU
    idle_w: NDArray[np.float64]  # [n] idle power of one GPU
    engines: list[str] = field(default_factory=list)  # [n] engine ids
    devices: list[str] = field(default_factory=list)  # [n] GPU ids
    groups: list[str] = field(default_factory=list)  # [n] "edge" or "datacentre"
    hardware: HardwareRows | None = None  # what each request's GPU draws power for besides its work
    # [n] sequences that run at once: the batch, or under an engine that pages its KV cache the
    # sequences whose caches fit beside the weights (llmco2.analytic.model.sequences_at_once)
    at_once: NDArray[np.float64] | None = None

    def take(self, idx: NDArray[np.int64]) -> PhaseInputs:
        """The requests at ``idx``."""
        pick = [list(np.asarray(v, dtype=object)[idx]) for v in (self.engines, self.devices, self.groups)]
        return PhaseInputs(self.roofline_s[idx], self.compute_s[idx], self.memory_s[idx], self.steps[idx], self.kernels[idx],
                           self.sequences[idx], self.collectives[idx], self.num_gpus[idx], self.tdp_w[idx],
                           self.idle_w[idx], *pick, self.hardware.take(idx) if self.hardware is not None else None,
                           self.at_once[idx] if self.at_once is not None else None)

    @classmethod
    def build(cls, items: Sequence[Item] | RequestTable, analysis: LayerAnalysis, totals: ModelTotals) -> PhaseInputs:
        """The inputs of ``items`` ((arch, request, gpu) triples or a :class:`RequestTable`).
        Idle power, device group and engine id are looked up once per distinct GPU and engine."""
        b = analysis.batch
        roof = np.stack([np.maximum(totals.totals[p]["time_s"], 0.0) for p in PHASE_NAMES], axis=1)
        comp = np.stack([totals.totals[p]["ops"] for p in PHASE_NAMES], axis=1) / b.peak_ops_per_s[:, None]
        mem = np.stack([totals.totals[p]["mem_bytes"] for p in PHASE_NAMES], axis=1) / b.mem_bw_bytes_per_s[:, None]
        gen = b.generated
        steps = np.stack([np.ones_like(gen), np.maximum(gen - 1.0, 0.0)], axis=1)
        per_layer = kernel_launches(analysis, "decode")  # present slots, plus bitsandbytes' extra kernels
        kernels = per_layer * b.layers + HEAD_KERNELS
        collectives = collectives_per_layer(analysis) * b.layers  # all-reduces (and expert-parallel all-to-alls)
        gpus, gpu_code, engines, engine_code = gpu_engine_codes(items)
        hardware = HardwareRows.of(list(gpus)).take(np.asarray(gpu_code).reshape(-1))
        return cls(roof, comp.astype(np.float64), mem.astype(np.float64), steps, kernels, rank_batch(b).astype(np.float64),
                   collectives, b.num_gpus.astype(np.float64), b.tdp_w.astype(np.float64), hardware.idle_w, _spread(engines, engine_code), _spread([g.id for g in gpus], gpu_code),
                   _spread([device_group(g) for g in gpus], gpu_code), hardware, _at_once(b, totals, engines, engine_code))


def _at_once(b: Any, totals: ModelTotals, engines: Sequence[str], engine_code: NDArray[np.int64]) -> NDArray[np.float64]:
    """:attr:`PhaseInputs.at_once` of the layer batch ``b`` with ``totals``; engine ids by code."""
    batch = np.asarray(b.batch, dtype=np.float64)
    paged = np.array([get_engine(e).continuous_batching for e in engines], dtype=bool)
    if not paged.any():
        return batch
    fit = sequences_at_once(totals.weight_bytes_per_gpu, totals.kv_cache_bytes_per_gpu, b.mem_capacity_bytes, batch,
                            GPU_MEMORY_UTILIZATION)
    return np.where(paged[np.asarray(engine_code).reshape(-1)], fit, batch)


def row_values(per_config: NDArray[np.float64], config: NDArray[np.int64], phase: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per measured row, the ``[n_configs, 2]`` quantity of its configuration for its phase: prefill
    (0), decode (1), or their sum for a whole-request row (any other phase code)."""
    v = per_config[config]
    return np.where(phase == 0, v[:, 0], np.where(phase == 1, v[:, 1], v[:, 0] + v[:, 1]))


def _spread(values: Sequence[str], codes: NDArray[np.int64]) -> list[str]:
    """``[values[c] for c in codes]`` (one NumPy take)."""
    table = np.empty(len(values), dtype=object)
    table[:] = list(values)
    return table[codes].tolist()


def gpu_engine_codes(items: Sequence[Item] | RequestTable) -> tuple[list[GPU], NDArray[np.int64], list[str], NDArray[np.int64]]:
    """``(distinct GPUs, per-row GPU code, distinct engine ids, per-row engine code)`` of
    ((arch, request, gpu) triples or a :class:`RequestTable`); GPUs compared by identity."""
    if isinstance(items, RequestTable):
        engines, kind_engine = value_codes([cached_engine_id(k.engine) for k in items.kinds])
        return list(items.gpus), items.gpu, engines, kind_engine[items.kind] if len(items) else items.kind
    if not len(items):
        return [], np.zeros(0, dtype=np.int64), [], np.zeros(0, dtype=np.int64)
    _, reqs, row_gpus = zip(*items, strict=True)
    gpus, gpu_code = object_codes(row_gpus)
    engines, engine_code = value_codes(list(map(cached_engine_id, map(attrgetter("engine"), reqs))))
    return gpus, gpu_code, engines, engine_code


def _catalog_priors() -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    launch = {e.id: e.launch_overhead_us for e in engine_catalog()}
    step = {e.id: e.step_overhead_ms for e in engine_catalog()}
    seq = {e.id: e.sequence_overhead_us for e in engine_catalog()}
    return launch, step, seq


@dataclass
class PhysicsPrior:
    """Fitted parameters of the prior (see the module docstring).

    Attributes:
        mode: ``"physical"`` (this model) or ``"tdp"`` (the earlier prior: roofline time x TDP x
            GPUs, latency = roofline time / efficiency); kept selectable for comparisons.
        efficiency: device id or group (``edge``, ``datacentre``) -> fraction of the roofline
            reached in prefill and decode.
        activity: ``[2]`` fraction of the dynamic power range at full use of the arithmetic units and
            of the memory bandwidth (power model ``units``), or per phase (``phase``).
        power_model: ``"units"`` or ``"phase"`` (see the module docstring).
        launch_us: engine id -> launch overhead per kernel (microseconds).
        step_ms: engine id -> framework overhead per step (milliseconds).
        collective_us: latency of one tensor-parallel all-reduce (microseconds).
        fitted_engines: engines whose overheads were fitted on rows (the others keep priors).
        fit_report: rows and median latency error of the fit, per engine.
    """

    mode: str = "physical"
    efficiency: dict[str, list[float]] = field(default_factory=dict)
    activity: NDArray[np.float64] = field(default_factory=lambda: np.array([1.0, 1.0]))
    power_model: str = "units"
    launch_us: dict[str, float] = field(default_factory=lambda: _catalog_priors()[0])
    step_ms: dict[str, float] = field(default_factory=lambda: _catalog_priors()[1])
    sequence_us: dict[str, float] = field(default_factory=lambda: _catalog_priors()[2])
    collective_us: float = COLLECTIVE_LATENCY_US
    fitted_engines: list[str] = field(default_factory=list)
    fit_report: dict[str, Any] = field(default_factory=dict)

    def efficiencies(self, devices: Sequence[str], groups: Sequence[str]) -> NDArray[np.float64]:
        """``[n, 2]`` roofline efficiency of each request's device (its group's when not fitted)."""
        device_values, device_code = value_codes(devices)
        group_values, group_code = value_codes(groups)
        first, inverse = distinct_rows(device_code, group_code)
        table = np.array([self.efficiency.get(device_values[d]) or self.efficiency.get(group_values[g]) or list(DEFAULT_EFFICIENCY)
                          for d, g in zip(device_code[first].tolist(), group_code[first].tolist(), strict=True)],
                         dtype=np.float64).reshape(-1, 2)
        return table[inverse]

    def overheads(self, engines: Sequence[str]) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """``[n]`` launch overhead per kernel, overhead per step and per sequence of a step (s) of
        each request's engine."""
        uniq, inv = value_codes(engines)
        launch = np.array([self.launch_us.get(e, self.launch_us.get("unknown", 8.0)) for e in uniq], dtype=np.float64) * 1e-6
        step = np.array([self.step_ms.get(e, self.step_ms.get("unknown", 1.5)) for e in uniq], dtype=np.float64) * 1e-3
        seq = np.array([self.sequence_us.get(e, self.sequence_us.get("unknown", 0.0)) for e in uniq], dtype=np.float64) * 1e-6
        return launch[inv], step[inv], seq[inv]

    def latency_s(self, x: PhaseInputs) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``([n, 2] latency (s), [n, 2] busy time (s))``; an empty phase (0 steps) takes 0 s."""
        busy = x.roofline_s / self.efficiencies(x.devices, x.groups)
        if self.mode == "tdp":
            lat = busy
        else:
            launch, step, seq = self.overheads(x.engines)
            per_step = step + x.sequences * seq + x.collectives * (self.collective_us * 1e-6)
            lat = np.maximum(busy, x.steps * (x.kernels * launch)[:, None]) + x.steps * per_step[:, None]
        lat = np.where(x.steps > 0, np.maximum(lat, MIN_TIME_S), 0.0)
        return lat, busy

    def utilisation(self, x: PhaseInputs, lat: NDArray[np.float64], busy: NDArray[np.float64]) -> NDArray[np.float64]:
        """``[n, 2]`` fraction of the dynamic power range (0-1)."""
        safe = np.where(lat > 0, lat, 1.0)
        if self.power_model == "phase":
            frac = np.where(lat > 0, busy / safe, 0.0)
            return np.clip(self.activity * np.minimum(frac, 1.0), 0.0, 1.0)
        gpu_s = safe * x.num_gpus[:, None]
        comp = np.where(lat > 0, np.minimum(x.compute_s / gpu_s, 1.0), 0.0)
        mem = np.where(lat > 0, np.minimum(x.memory_s / gpu_s, 1.0), 0.0)
        return np.clip(self.activity[0] * comp + self.activity[1] * mem, 0.0, 1.0)

    def energy_j(self, x: PhaseInputs) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``([n, 2] prior energy (J), [n, 2] latency (s))``."""
        lat, busy = self.latency_s(x)
        if self.mode == "tdp":
            return x.roofline_s * x.tdp_w[:, None] * x.num_gpus[:, None], lat
        u = self.utilisation(x, lat, busy)
        power = x.num_gpus[:, None] * (x.idle_w[:, None] + (x.tdp_w - x.idle_w)[:, None] * u)
        return lat * power, lat

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "power_model": self.power_model, "efficiency": {k: list(v) for k, v in self.efficiency.items()},
                "activity": self.activity.tolist(),
                "launch_us": dict(self.launch_us), "step_ms": dict(self.step_ms),
                "sequence_us": dict(self.sequence_us), "collective_us": self.collective_us,
                "fitted_engines": list(self.fitted_engines), "fit_report": self.fit_report}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> PhysicsPrior:
        """The prior a checkpoint stored. Entries a checkpoint predates keep their earlier behaviour:
        power model ``phase``, no per-sequence or all-reduce cost."""
        if not state:
            return cls()
        where = "head.physics"
        launch, step, _ = _catalog_priors()
        low, high = PRIOR_RANGES["efficiency"]
        efficiency = {str(k): [checkpoint_number(a, f"{where}.efficiency.{k}", low, high, above=True) for a in v]
                      for k, v in state["efficiency"].items()}
        if any(len(v) != len(PHASE_NAMES) for v in efficiency.values()):
            raise InvalidInputError(f"{where}.efficiency holds an entry without one value per phase", field="checkpoint")
        activity = state["activity"]
        if not isinstance(activity, list) or len(activity) != len(PHASE_NAMES):
            raise InvalidInputError(f"{where}.activity is not one number per phase", field="checkpoint")
        return cls(mode=state.get("mode", "physical"), efficiency=efficiency,
                   activity=np.array([checkpoint_number(a, f"{where}.activity", *PRIOR_RANGES["activity"]) for a in activity]),
                   power_model=state.get("power_model", "phase"),
                   launch_us={**launch, **checkpoint_numbers(state.get("launch_us", {}), where, "launch_us")},
                   step_ms={**step, **checkpoint_numbers(state.get("step_ms", {}), where, "step_ms")},
                   sequence_us=checkpoint_numbers(state.get("sequence_us", {}), where, "sequence_us"),
                   collective_us=checkpoint_number(state.get("collective_us", 0.0), f"{where}.collective_us",
                                                   *PRIOR_RANGES["collective_us"]),
                   fitted_engines=list(state.get("fitted_engines", [])), fit_report=dict(state.get("fit_report", {})))


def known_engines() -> list[str]:
    """Engine ids of the catalog (the categorical levels, ``unknown`` included)."""
    return list(engine_ids())
