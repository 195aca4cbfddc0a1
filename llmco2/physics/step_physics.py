"""Physical cost of one engine iteration (a prefill, a decode step or a mixed step), NumPy only.

The same formulas hold on every GPU; the hardware enters only through catalog numbers (peak rate of
the compute dtype, memory and interconnect bandwidth, power limit, idle power), the engine through
its host overheads. Per GPU, for each kernel ``k`` of the layer DAG (times the layers) and of the
embedding / final norm / LM head:

* ``t_k = max(C_k / eta_compute, M_k / eta_memory) + kernel_gap`` with ``C_k`` = operations / peak
  rate and ``M_k`` = bytes / memory bandwidth (s): a kernel runs at a fixed achieved fraction of
  whichever peak binds it, plus a fixed gap (launch tail, synchronisation) per kernel; the expert
  matrices of a mixture-of-experts layer (grouped GEMMs over the experts its tokens touch) reach
  ``eta_expert`` of that rate;
* every tensor-parallel all-reduce costs ``collective latency + engine latency + (bytes / link +
  link latency) / eta_network``, with ``bytes`` what a ring sends, twice the paper's network bytes,
  and ``link`` one direction of the quoted link (:mod:`llmco2.specs.links`; an expert all-to-all's
  bytes cross once): the engine's own share is the path its all-reduce takes (a one-shot
  kernel over peer memory, or a library fallback that pays host and protocol latency per call),
  fitted per engine on serving rows and 0 where none ran it; ``link`` and ``link latency`` are those
  of the path the GPUs' actual link gives at the request's tensor-parallel degree
  (:mod:`llmco2.specs.links`: NVLink, PCIe peer-to-peer, or PCIe through host memory), the latency
  being what that path adds to NVLink's (0 on NVLink, whose latency the fitted constant holds);
* ``t_gpu = sum_k t_k`` and, with CUDA graphs, ``t = t_gpu + step + seqs x per_sequence``; an
  engine that launches kernels from the host (no graphs) waits for the slower of the two:
  ``t = max(t_gpu, kernels x launch) + step + seqs x per_sequence`` (the engine's overheads, s),
  except where the layers synchronise the host (bitsandbytes LLM.int8's outlier detection,
  :func:`llmco2.analytic.quantised.host_syncs`): the host cannot queue kernels ahead of the GPU
  there, so the two times add, ``t_gpu + kernels x launch``; an online server (requests arriving over HTTP, tokens streamed back) adds its front end's cost
  per sequence and step where the engine runs it in the step loop (``serving_sequence``: output
  processing, incremental detokenisation and streaming), zero in an offline batch run, and a cost
  per step for each GPU worker beyond the first (``serving_worker``: the driver hands each step to
  every worker process), also zero offline;
* an engine's per-sequence cost may be GPU work rather than host work (sampling over the
  vocabulary's logits, per-sequence attention metadata: kernels the layer DAG does not hold):
  ``sequence_bytes`` per sequence and step, run as memory-bound kernels (``t_gpu += seqs x
  sequence_bytes / (eta_memory x bandwidth)``), so that it keeps the GPU busy and draws the energy
  of the bytes it moves. Host and GPU shares are fitted together on serving rows that carry power:
  host time lengthens the step at the static draw, GPU work at the draw of moving data, and only
  the measured power tells them apart;
* power per GPU: ``min(limit, static x (1 + base + a_b x u_b) + A x u_c + (e_b + e_dram) x bytes / t)``,
  energy per unit of work plus a static draw, with the power limit only as a cap:

  - ``static``: the GPU's own idle draw (catalog ``idle_power_w`` with its source, else the median
    of its device class; :func:`llmco2.specs.gpu_power.static_power_w`), never a share of the limit;
  - ``A = e_op(node) x peak16``: the power of the GPU's arithmetic at its dense fp16 peak, with
    ``e_op(node) = op_pj_7nm x (node / 7 nm) ^ op_node_exp`` the energy of one fp16 tensor operation
    on the GPU's process node (pJ; fitted across GPUs, bounded by published figures). ``u_c = sum C_k / t``
    is the share of the step the arithmetic units would be busy at the peak of the step's own
    precision, so ``A x u_c`` charges each operation ``e_op x peak16 / peak(precision)``: an FP8 or
    INT8 operation on a GPU that runs them twice as fast costs half the energy of an FP16 one, and
    a GPU's arithmetic at its peak draws the same power in every precision; an FP16 operation
    accumulated in FP16 on a GeForce card (twice the rate of the FP32 accumulation its catalog peak
    quotes, ``LayerBatch.peak_boost``) keeps the FP16 operation's energy: ``peak16`` is that rate too;
  - ``u_b = sum t_k / t`` (kernel time without gaps, at most 1): the share of the step that kernels
    run at whatever rate they reach; a running kernel keeps the SMs clocked and issuing even where
    it reaches a small part of the peaks (grouped expert GEMMs, dequantising kernels): the clock
    tree, schedulers and leakage at the raised voltage of the same silicon whose draw at rest is
    the static power, so that activity is ``a_b`` times the static draw (``base`` times it for a
    GPU running steps at all), which host gaps between steps do not draw. A GPU with more
    arithmetic units at the same node therefore spends no more per token: its operations cost the
    same, its static draw is its own;
  - data movement costs energy per byte: ``e_dram`` (the DRAM technology's access energy,
    :mod:`llmco2.specs.memory`) plus ``e_b`` on chip (caches, network on chip; fitted), for the
    bytes ``u_m x bandwidth`` a step moves per second;

  energy = power x t x GPUs (J).

Parameters (:class:`StepParams`) are fitted jointly on isolated and serving measurements
(:mod:`llmco2.physics.step_fit`); an unseen GPU is predicted by the same formulas from its catalog
entry, never from a median of fitted per-GPU constants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.table import value_codes
from llmco2.physics.step_work import EXPERT_SLOTS, LINEAR_SLOT_INDEX, StepShapes
from llmco2.specs import engine_catalog, engine_id

Array = NDArray[np.float64]


@dataclass(frozen=True)
class EngineOverhead:
    """Host costs of one engine (s): per step, per sequence of a step and per launched kernel."""

    step_s: float
    sequence_s: float
    launch_s: float
    cuda_graphs: bool
    serving_sequence_s: float = 0.0  # online serving only: front-end cost per sequence and step
    collective_s: float = 0.0  # the engine's own latency per tensor-parallel all-reduce, beyond the link's
    serving_worker_s: float = 0.0  # online serving only: host cost per step for each GPU worker beyond the first
    sequence_bytes: float = 0.0  # GPU work per sequence and step that the layer DAG does not hold, as bytes moved

    def to_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "sequence_s": self.sequence_s, "launch_s": self.launch_s, "cuda_graphs": self.cuda_graphs,
                "serving_sequence_s": self.serving_sequence_s, "collective_s": self.collective_s,
                "serving_worker_s": self.serving_worker_s, "sequence_bytes": self.sequence_bytes}


def catalog_overhead(engine: str) -> EngineOverhead:
    """The catalog priors of ``engine`` (``llmco2/specs/data/engines.toml``)."""
    e = engine_catalog().get(engine_id(engine))
    return EngineOverhead(e.step_overhead_ms * 1e-3, e.sequence_overhead_us * 1e-6, e.launch_overhead_us * 1e-6, e.cuda_graphs,
                          e.serving_sequence_overhead_us * 1e-6)


@dataclass(frozen=True)
class StepParams:
    """The shared physical constants of :mod:`llmco2.physics.step_physics` and per-engine overheads.
    Engines absent from ``engines`` take their catalog priors."""

    eta_compute: float = 0.6
    eta_memory: float = 0.8
    kernel_gap_s: float = 3e-6
    collective_s: float = 10e-6
    eta_network: float = 0.7
    power_base: float = 0.2
    power_compute: float = 1.0  # share of the arithmetic power at the peak per unit of u_c (1: op_pj_7nm is the energy per operation)
    power_memory: float = 0.0
    memory_pj_per_byte: float = 30.0  # e_b: on-chip energy per byte moved to or from memory (pJ), beside the DRAM's own
    op_pj_7nm: float = 1.0  # energy of one dense fp16 tensor operation on a 7 nm GPU (pJ)
    op_node_exp: float = 1.0  # exponent of the process node (nm) in the energy per operation
    eta_expert: float = 1.0  # achieved fraction of a dense GEMM's rate that grouped expert GEMMs reach
    power_busy: float = 0.0  # share of the dynamic range drawn while kernels run, whatever their rate
    engines: dict[str, EngineOverhead] = field(default_factory=dict)
    source: str = "defaults"

    def engine(self, name: str) -> EngineOverhead:
        eid = engine_id(name)
        return self.engines.get(eid) or catalog_overhead(eid)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in GLOBAL_PARAMS}
        return {**out, "engines": {k: v.to_dict() for k, v in sorted(self.engines.items())}, "source": self.source}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> StepParams:
        engines = {k: EngineOverhead(float(v["step_s"]), float(v["sequence_s"]), float(v["launch_s"]), bool(v["cuda_graphs"]),
                                     float(v.get("serving_sequence_s", 0.0)), float(v.get("collective_s", 0.0)),
                                     float(v.get("serving_worker_s", 0.0)), float(v.get("sequence_bytes", 0.0)))
                   for k, v in raw.get("engines", {}).items()}
        return cls(**{k: float(raw[k] if k in raw or k not in OPTIONAL_PARAMS else OPTIONAL_PARAMS[k]) for k in GLOBAL_PARAMS},
                   engines=engines, source=str(raw.get("source", "")))

    def with_values(self, **kw: float) -> StepParams:
        return replace(self, **kw)


def roofline_tdp_params(engines: Sequence[str]) -> StepParams:
    """The roofline latency x TDP baseline (llm-analysis and LLM-Viewer with efficiencies of 1) as step
    constants: every kernel at the catalog peak that binds it, no overheads for ``engines``, and a
    static draw raised far above any limit, so that every step draws the GPU's power limit (the cap)."""
    zero = EngineOverhead(0.0, 0.0, 0.0, True)
    return StepParams(eta_compute=1.0, eta_memory=1.0, kernel_gap_s=0.0, collective_s=0.0, eta_network=1.0, power_base=1e6,
                      power_compute=0.0, power_memory=0.0, memory_pj_per_byte=0.0, engines={e: zero for e in engines},
                      source="roofline x TDP")


GLOBAL_PARAMS = ("eta_compute", "eta_memory", "kernel_gap_s", "collective_s", "eta_network", "power_base",
                 "power_compute", "power_memory", "memory_pj_per_byte", "eta_expert", "power_busy", "op_pj_7nm", "op_node_exp")
#: Constants that files written before they existed lack, and the value that reads them as the
#: model without them.
OPTIONAL_PARAMS = {"memory_pj_per_byte": 0.0, "eta_expert": 1.0, "power_busy": 0.0, "op_pj_7nm": 1.0, "op_node_exp": 1.0}


def arithmetic_power_w(p: StepParams, node_nm: Any, peak16_ops_per_s: Any) -> Any:
    """Power (W) of a GPU's arithmetic at its dense fp16 peak: ``op_pj_7nm x (node / 7) ^ op_node_exp x peak``."""
    return p.op_pj_7nm * 1e-12 * (node_nm / 7.0) ** p.op_node_exp * peak16_ops_per_s


def overhead_arrays(engines: Sequence[str], params: StepParams, online: bool = False,
                    num_gpus: Array | None = None) -> tuple[Array, Array, Array, NDArray[np.bool_], Array, Array]:
    """Per-row step, per-sequence and per-kernel host overheads (s), whether the engine uses CUDA
    graphs, its own latency per all-reduce (s) and its GPU work per sequence (bytes); ``online``: an online server's steps (its front
    end's per-sequence cost included, and, given ``num_gpus``, its per-step cost for each GPU worker
    beyond the first)."""
    distinct, code = value_codes(engines)  # each engine looked up once, spread to its rows
    rows = [params.engine(e) for e in distinct]

    def column(value: Callable[[EngineOverhead], Any], dtype: type = np.float64) -> Any:
        return np.array([value(r) for r in rows], dtype=dtype)[code]

    step = column(lambda r: r.step_s)
    if online and num_gpus is not None:
        step = step + column(lambda r: r.serving_worker_s) * np.maximum(np.asarray(num_gpus, dtype=np.float64) - 1.0, 0.0)
    return (step, column(lambda r: r.sequence_s + (r.serving_sequence_s if online else 0.0)), column(lambda r: r.launch_s),
            column(lambda r: r.cuda_graphs, bool), column(lambda r: r.collective_s), column(lambda r: r.sequence_bytes))


@dataclass(frozen=True)
class StepCost:
    """Latency (s), energy of all GPUs (J) and power of all GPUs (W) of each iteration."""

    time_s: Array
    energy_j: Array
    power_w: Array
    gpu_time_s: Array


def step_cost(x: StepShapes, p: StepParams, overheads: tuple[Array, Array, Array, NDArray[np.bool_], Array, Array] | None = None,
              online: bool = False) -> StepCost:
    """:class:`StepCost` of the iterations ``x`` under the constants ``p`` (see the module docstring);
    ``online``: steps of an online server (ignored where ``overheads`` are given)."""
    oh = overheads if overheads is not None else overhead_arrays(x.engines, p, online, x.num_gpus)
    kernel_s = kernel_seconds(x.compute_s, x.memory_s, x.moe, p, x.linear_rate).sum(axis=1)
    sums = WorkSums(kernel_s, x.compute_s.sum(axis=1), x.memory_s.sum(axis=1), x.network_s.sum(axis=1), x.kernels,
                    x.collectives, x.sequences, 0.0 if x.host_synced is None else x.host_synced)
    t, power = time_and_power(sums, x, p, oh)
    return StepCost(t, power * t, power, sums.with_sequence_work(oh[5], x.mem_bw_bytes_per_s, p).gpu_time_s(p, oh[4]))


def kernel_seconds(compute_s: Array, memory_s: Array, moe: Array, p: StepParams, linear_rate: Array | None = None) -> Array:
    """Time of each kernel slot (s, ``[n, slots]``): the binding peak at its achieved fraction
    (``eta_compute`` / ``eta_memory``; expert matrices of MoE rows also at ``eta_expert``; the linear
    layers' compute at ``linear_rate`` of it, ``[n]``: weight-only low-bit GEMMs, whose energy per
    operation stays that of the 16-bit arithmetic they run)."""
    if linear_rate is not None and np.any(np.asarray(linear_rate) < 1.0):
        compute_s = compute_s.copy()
        compute_s[:, LINEAR_SLOT_INDEX] /= np.asarray(linear_rate, dtype=np.float64).reshape(-1, 1)
    kernel = np.maximum(compute_s / p.eta_compute, memory_s / p.eta_memory)
    if p.eta_expert != 1.0 and np.any(moe):
        kernel[:, EXPERT_SLOTS] *= np.where(moe > 0, 1.0 / p.eta_expert, 1.0)[:, None]
    return kernel


@dataclass(frozen=True)
class WorkSums:
    """Per step (arrays over steps, or floats for one): kernel time (s), compute, memory and network
    work at the peaks (s), kernels launched, all-reduces and sequences."""

    kernel_s: Any
    compute_s: Any
    memory_s: Any
    network_s: Any
    kernels: Any
    collectives: Any
    sequences: Any
    host_synced: Any = 0.0  # 1.0 where the step's layers synchronise the host (host and GPU time add)

    def with_sequence_work(self, sequence_bytes: Any, mem_bw_bytes_per_s: Any, p: StepParams) -> WorkSums:
        """These sums with the engine's GPU work per sequence (``sequence_bytes`` per sequence and
        step: sampling over the vocabulary's logits, per-sequence attention metadata, whatever the
        layer DAG does not hold) as memory-bound kernel time at ``eta_memory`` of the bandwidth (bytes/s)."""
        memory_s = sequence_bytes * self.sequences / mem_bw_bytes_per_s
        return replace(self, kernel_s=self.kernel_s + memory_s / p.eta_memory, memory_s=self.memory_s + memory_s)

    def gpu_time_s(self, p: StepParams, engine_collective_s: Any) -> Any:
        """GPU-side time of the step (s): kernels, their gaps, all-reduce latencies and network transfers."""
        return (self.kernel_s + p.kernel_gap_s * self.kernels + self.collectives * (p.collective_s + engine_collective_s)
                + self.network_s / p.eta_network)


@dataclass(frozen=True)
class Elementwise:
    """The element-wise maximum and minimum :func:`time_and_power` uses: NumPy's for arrays of steps,
    Python's for one step held as floats (the same values, without NumPy's per-call cost)."""

    maximum: Callable[[Any, Any], Any]
    minimum: Callable[[Any, Any], Any]


ARRAYS = Elementwise(np.maximum, np.minimum)
FLOATS = Elementwise(max, min)


def time_and_power(w: WorkSums, hw: Any, p: StepParams, overheads: tuple, ops: Elementwise = ARRAYS) -> tuple[Any, Any]:
    """Latency (s) and power of all GPUs (W) of steps with work ``w`` on hardware ``hw`` (anything with
    ``num_gpus``, ``tdp_w``, ``idle_w``, ``mem_bw_bytes_per_s``, ``node_nm``, ``peak16_ops_per_s`` and
    ``dram_pj_per_byte``: arrays over steps, or floats with
    ``ops=FLOATS``), under host ``overheads`` (:func:`overhead_arrays`, or its six values for one step)."""
    step, per_seq, launch, graphs, coll, seq_bytes = overheads
    w = w.with_sequence_work(seq_bytes, hw.mem_bw_bytes_per_s, p)
    t_gpu = w.gpu_time_s(p, coll)
    t_host = w.kernels * launch * (1.0 - graphs)  # CUDA graphs: no host launches to wait for
    # the host queues kernels ahead of the GPU, so the larger of the two sets the step; where the layers
    # synchronise the host (LLM.int8's outlier handling) it waits for the GPU each time: they add
    t = ops.maximum(t_gpu, t_host) + w.host_synced * ops.minimum(t_gpu, t_host) + step + per_seq * w.sequences
    u_c = w.compute_s / t
    u_m = w.memory_s / t
    busy = ops.minimum(w.kernel_s / t, 1.0)
    active = ops.maximum(1.0 + p.power_base + p.power_busy * busy, 0.0)  # the static draw of a GPU running steps
    arithmetic_w = arithmetic_power_w(p, hw.node_nm, hw.peak16_ops_per_s) * (p.power_compute * u_c + p.power_memory * u_m)
    moving_w = (p.memory_pj_per_byte + hw.dram_pj_per_byte) * 1e-12 * u_m * hw.mem_bw_bytes_per_s
    power = hw.num_gpus * ops.minimum(hw.idle_w * active + arithmetic_w + moving_w, hw.tdp_w)
    return t, power
