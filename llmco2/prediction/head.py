"""Everything of a trained predictor that is not the network, without torch or pandas.

The network (:class:`llmco2.training.gnn.LLMCO2Net`) maps the graphs of ``n`` requests to ``z``
``[n, 2]``: the standardised log-ratio of prefill and decode energy to the physics prior.
:meth:`OutputHead.finish` turns ``z`` into joules, seconds and intervals:

1. the physics prior and latency per phase (:class:`llmco2.physics.priors.PhysicsPrior`; for
   data-centre GPUs the step physics of :class:`llmco2.physics.step_prior.StepPrior` where the
   checkpoint carries it),
2. energy = prior x exp(clamped, de-standardised ``z``) (:class:`llmco2.prediction.targets.EnergyTarget`),
3. one consistent (energy, latency) pair: the latency is held within [energy / (GPUs x power
   limit), energy / (GPUs x idle power)], so the average power lies between idle and the power
   limit of the GPUs (the energy, which is what the network learned, is not changed),
4. a prediction interval per phase (:class:`IntervalCalibration`), wider for requests outside the
   training domain (unseen GPU, engine or size; the reasons are in ``notes``).

Any inference path (PyTorch, NumPy, ONNX) that computes ``z`` gets identical answers by calling
:meth:`OutputHead.finish`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis, on_hardware
from llmco2.analytic.model import ModelTotals, model_totals
from llmco2.analytic.table import RequestTable, distinct_rows, value_codes
from llmco2.physics.hardware_rows import peak16_ops_per_s
from llmco2.physics.priors import Item, PhaseInputs, PhysicsPrior, gpu_engine_codes
from llmco2.physics.priors import device_group as gpu_group
from llmco2.physics.step_prior import StepPrior
from llmco2.prediction.domain_notes import domain_note_lists, seen_sibling
from llmco2.prediction.intervals import IntervalCalibration
from llmco2.prediction.targets import MIN_PRIOR_J, EnergyTarget
from llmco2.specs import GPU, UNKNOWN_ENGINE, engine_level_index, engine_levels


@dataclass
class PhasePrediction:
    """Per-request predictions, ``[n, 2]`` arrays over (prefill, decode); decode is 0 where only
    one token is generated.

    Attributes:
        energy_j: predicted GPU energy (J).
        latency_s: predicted time (s), consistent with the energy (average power within
            [GPUs x idle, GPUs x power limit]).
        energy_low_j, energy_high_j: prediction interval (J) at the head's nominal levels.
        prior_j: the physics prior (J) the network corrects.
        notes: per request, why it lies outside the training domain (empty when it does not).
        levels: nominal (low, high) quantile levels of the interval.
        memory_bytes: ``[n, 2]`` weights and KV cache per GPU (bytes), from the analytic model;
            ``None`` where the predictor does not say.
        fits_in_memory: whether they fit each GPU's memory (``None``: not known).
    """

    energy_j: NDArray[np.float64]
    latency_s: NDArray[np.float64]
    energy_low_j: NDArray[np.float64]
    energy_high_j: NDArray[np.float64]
    prior_j: NDArray[np.float64]
    notes: list[list[str]] = field(default_factory=list)
    levels: tuple[float, float] = (0.1, 0.9)
    memory_bytes: NDArray[np.float64] | None = None
    fits_in_memory: NDArray[np.bool_] | None = None

    @property
    def extrapolated(self) -> NDArray[np.bool_]:
        return np.array([bool(n) for n in self.notes], dtype=bool)

    @property
    def total_j(self) -> NDArray[np.float64]:
        return self.energy_j.sum(axis=1)


def device_group(item: Item) -> str:
    """``"edge"`` for modules and SoCs, ``"datacentre"`` otherwise (interval calibration groups)."""
    return gpu_group(item[2])


@dataclass
class OutputHead:
    """Target standardisation, physics prior, interval calibration and training domain.

    Attributes:
        target: standardisation and clamp of the log-ratio (per phase).
        physics: fitted latency and power parameters.
        intervals: calibration of the prediction intervals.
        domain: what the training data covered.
        use_prior: ``False``: the network predicts log-energy itself (prior of 1 J).
    """

    target: EnergyTarget
    physics: PhysicsPrior = field(default_factory=PhysicsPrior)
    intervals: IntervalCalibration = field(default_factory=IntervalCalibration)
    domain: dict[str, Any] = field(default_factory=dict)
    use_prior: bool = True
    step: StepPrior | None = None  # the step physics, for the rows of its device group

    def step_engines(self) -> tuple[str, frozenset[str]] | None:
        """``(device group, engines)`` the step physics of this head predicts with fitted constants."""
        if self.step is None:
            return None
        return self.step.group, frozenset(self.step.params.engines)

    def siblings(self, items: Sequence[Item] | RequestTable) -> tuple[list[tuple[GPU, GPU | None]], NDArray[np.int64]]:
        """Per distinct (GPU, engine) of ``items``: the GPU and its seen sibling (:func:`seen_sibling`;
        ``None`` for a seen GPU, one without a sibling or outside the step physics' device group),
        and each row's index into that list."""
        gpus, gpu_code, engines, engine_code = gpu_engine_codes(items)
        gpu_code, engine_code = (np.asarray(c, dtype=np.int64).reshape(-1) for c in (gpu_code, engine_code))
        first, code = distinct_rows(gpu_code, engine_code)
        group = self.step.group if self.step is not None else None
        pairs = []
        for g, e in zip(gpu_code[first].tolist(), engine_code[first].tolist(), strict=True):
            pairs.append((gpus[g], seen_sibling(self.domain, gpus[g], engines[e]) if gpu_group(gpus[g]) == group else None))
        return pairs, code

    def correction_unused(self, items: Sequence[Item] | RequestTable) -> NDArray[np.bool_]:
        """Per request, whether :meth:`finish` sets the network's correction aside and predicts with the
        step physics alone: a GPU of the step physics' device group that the training data did not show
        and whose die it did not show either (no :func:`seen_sibling`). The network's outputs for those
        requests are never read, so they need not be computed."""
        if self.step is None or not self.domain.get("devices"):
            return np.zeros(len(items), dtype=bool)
        seen, group = set(self.domain["devices"]), self.step.group
        pairs, code = self.siblings(items)
        return np.array([g.id not in seen and s is None and gpu_group(g) == group for g, s in pairs], dtype=bool)[code]

    def network_inputs(self, analysis: LayerAnalysis, totals: ModelTotals,
                       items: Sequence[Item] | RequestTable | None = None) -> tuple[LayerAnalysis, ModelTotals]:
        """The analysis and totals the network sees (build its graphs from these): unseen engines
        as :meth:`network_analysis` presents them, and, given the requests' ``items``, a GPU the
        training data did not show but whose die it did (:func:`seen_sibling`; for the step
        physics' device group) presented as that sibling: peaks, bandwidths, memory and power limit
        are the sibling's, so the network gives the correction it learnt there, which
        :meth:`finish` applies to the step physics of the request's own GPU."""
        analysis = self.network_analysis(analysis)
        if items is None or self.step is None or not self.domain.get("devices"):
            return analysis, totals
        pairs, code = self.siblings(items)
        if all(s is None for _, s in pairs):
            return analysis, totals

        def ratio(value: Callable[[GPU], float]) -> NDArray[np.float64]:
            return np.array([1.0 if s is None or value(g) <= 0 else value(s) / value(g) for g, s in pairs])[code]

        b = analysis.batch
        batch = replace(b, peak_ops_per_s=b.peak_ops_per_s * ratio(peak16_ops_per_s),
                        mem_bw_bytes_per_s=b.mem_bw_bytes_per_s * ratio(attrgetter("memory_bandwidth_bytes_per_s")),
                        net_bw_bytes_per_s=b.net_bw_bytes_per_s * ratio(attrgetter("interconnect_bytes_per_s")),
                        mem_capacity_bytes=b.mem_capacity_bytes * ratio(attrgetter("memory_bytes")),
                        tdp_w=b.tdp_w * ratio(attrgetter("tdp_w")))
        seen = on_hardware(analysis, batch)
        return seen, model_totals(seen)

    def network_analysis(self, analysis: LayerAnalysis) -> LayerAnalysis:
        """``analysis`` as the network must see it: a request whose engine the training data never
        showed is presented as engine ``unknown`` (the level trained, by engine dropout, on the
        average behaviour), since the network's weights for a never-seen level are untrained. The
        physics prior still uses the engine's own catalog overheads. Build the network's graphs
        from this analysis (``build_graph_arrays(head.network_analysis(analysis), totals)``)."""
        seen = self.domain.get("engines")
        if not seen:
            return analysis
        levels = list(engine_levels())
        known = np.array([engine_level_index(e) for e in seen], dtype=np.float64)
        index = analysis.batch.engine
        unseen = ~np.isin(index, known)
        if not unseen.any():
            return analysis
        batch = replace(analysis.batch, engine=np.where(unseen, float(levels.index(UNKNOWN_ENGINE)), index))
        return replace(analysis, batch=batch)

    def prior(self, items: Sequence[Item] | RequestTable, analysis: LayerAnalysis,
              totals: ModelTotals) -> tuple[NDArray[np.float64], NDArray[np.float64], PhaseInputs]:
        """``([n, 2] prior energy (J), [n, 2] latency (s), inputs)``; the prior is floored at
        :data:`MIN_PRIOR_J` and is 1 J everywhere when ``use_prior`` is off."""
        x = PhaseInputs.build(items, analysis, totals)
        if self.step is not None and self.step.covers(x):  # the per-device prior would be replaced everywhere
            prior, latency = self.step.cost(analysis, x)
        else:
            prior, latency = self.physics.energy_j(x)
            if self.step is not None:
                prior, latency = self.step.apply(analysis, x, prior, latency)
        prior = np.maximum(prior, MIN_PRIOR_J) if self.use_prior else np.ones_like(prior)
        return prior, latency, x

    def finish(self, z: NDArray[np.floating], items: Sequence[Item] | RequestTable, analysis: LayerAnalysis,
               totals: ModelTotals) -> PhasePrediction:
        """Predictions of ``items`` ((arch, request, gpu) triples or a :class:`RequestTable`) from
        the network's outputs ``z`` ``[n, >= 2]`` (first two columns: prefill and decode)."""
        z = np.asarray(z, dtype=np.float64)[:, :2]
        prior, latency, x = self.prior(items, analysis, totals)
        groups = x.groups  # the device group of each request (:func:`device_group`)
        log_ratio = self.target.decode_log_ratio(self.target.clamp(z))
        if self.domain.get("devices"):
            seen = set(self.domain["devices"])
            devices, device_code = value_codes(x.devices)
            unseen = np.array([d not in seen for d in devices], dtype=bool)[device_code]
            if self.target.group_bounds:
                log_ratio = self.target.bound_unseen(log_ratio, groups, unseen)
            # the step physics carries to a GPU through its catalog numbers; the network's
            # correction, learnt on the training GPUs, largely stands for those GPUs' own
            # departures from it and is not applied to a GPU it has not seen, unless the
            # network saw its die (the network then ran on the sibling: network_inputs)
            log_ratio = np.where(self.correction_unused(items)[:, None], 0.0, log_ratio)
        energy = np.exp(log_ratio) * prior
        limit_w = (x.num_gpus * x.tdp_w)[:, None]
        idle_w = (x.num_gpus * x.idle_w)[:, None]
        # energy is the learned quantity; the physics latency yields to it: the average power
        # energy / latency is held within [GPUs x idle, GPUs x power limit]
        latency = np.clip(latency, energy / limit_w, energy / idle_w)
        empty = x.steps <= 0
        energy = np.where(empty, 0.0, energy)
        latency = np.where(empty, 0.0, latency)
        notes = domain_note_lists(self.domain, items, analysis.batch.params, self.step_engines())
        q_lo, q_hi = self.intervals.log_bounds(groups, np.fromiter(map(bool, notes), dtype=bool, count=len(notes)))
        low = np.minimum(energy * np.exp(q_lo), energy)
        high = np.maximum(energy * np.exp(q_hi), energy)
        memory = np.stack([np.asarray(totals.weight_bytes_per_gpu, dtype=np.float64).reshape(-1),
                           np.asarray(totals.kv_cache_bytes_per_gpu, dtype=np.float64).reshape(-1)], axis=1)
        return PhasePrediction(energy, latency, low, high, np.where(empty, 0.0, prior), notes, self.intervals.levels,
                               memory, np.asarray(totals.fits_in_memory, dtype=bool).reshape(-1))

    def state_dict(self) -> dict[str, Any]:
        out = {"target": self.target.state_dict(), "physics": self.physics.state_dict(),
               "intervals": self.intervals.state_dict(), "domain": self.domain, "use_prior": self.use_prior}
        if self.step is not None:
            out["step"] = self.step.state_dict()
        return out

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> OutputHead:
        return cls(EnergyTarget.from_state_dict(state["target"]), PhysicsPrior.from_state_dict(state.get("physics")),
                   IntervalCalibration.from_state_dict(state.get("intervals")), dict(state.get("domain", {})),
                   bool(state.get("use_prior", True)), StepPrior.from_state_dict(state.get("step")))
