"""Everything of a trained predictor that is not the network, without torch or pandas.

The network (:class:`llmco2.models.gnn.LLMCO2Net`) maps the graphs of ``n`` requests to ``z``
``[n, 2]``: the standardised log-ratio of prefill and decode energy to the physics prior.
:meth:`OutputHead.finish` turns ``z`` into joules, seconds and intervals:

1. the physics prior and latency per phase (:class:`llmco2.models.physics.PhysicsPrior`),
2. energy = prior x exp(clamped, de-standardised ``z``) (:class:`llmco2.models.targets.EnergyTarget`),
3. one consistent (energy, latency) pair: the latency is held within [energy / (GPUs x power
   limit), energy / (GPUs x idle power)], so the average power lies between idle and the power
   limit of the GPUs (the energy, which is what the network learned, is not changed),
4. a prediction interval per phase (:class:`IntervalCalibration`), wider for requests outside the
   training domain (unseen GPU, engine or size; the reasons are in ``notes``).

Any inference path (PyTorch, NumPy, ONNX) that computes ``z`` gets identical answers by calling
:meth:`OutputHead.finish`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis
from llmco2.analytic.model import ModelTotals
from llmco2.analytic.table import distinct_rows
from llmco2.models.intervals import IntervalCalibration
from llmco2.models.physics import Item, PhaseInputs, PhysicsPrior, cached_engine_id
from llmco2.models.physics import device_group as gpu_group
from llmco2.models.targets import MIN_PRIOR_J, EnergyTarget
from llmco2.specs import UNKNOWN_ENGINE, engine_ids


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
    """

    energy_j: NDArray[np.float64]
    latency_s: NDArray[np.float64]
    energy_low_j: NDArray[np.float64]
    energy_high_j: NDArray[np.float64]
    prior_j: NDArray[np.float64]
    notes: list[list[str]] = field(default_factory=list)
    levels: tuple[float, float] = (0.1, 0.9)

    @property
    def extrapolated(self) -> NDArray[np.bool_]:
        return np.array([bool(n) for n in self.notes], dtype=bool)

    @property
    def total_j(self) -> NDArray[np.float64]:
        return self.energy_j.sum(axis=1)


def domain_notes(domain: dict[str, Any], item: Item, params: int | None = None) -> list[str]:
    """Why a request lies outside a training domain (empty when it does not); ``params``: the
    architecture's parameter count when the caller has it."""
    arch, req, gpu = item
    notes: list[str] = []
    if domain.get("devices") and gpu.id not in domain["devices"]:
        notes.append(f"unseen GPU {gpu.id} (trained on {', '.join(domain['devices'])}): extrapolated through its "
                     "peak throughput, bandwidth, TDP and idle power")
    engine = cached_engine_id(req.engine)
    if domain.get("engines") and engine not in domain["engines"]:
        notes.append(f"unseen engine {engine} (trained on {', '.join(domain['engines'])}): extrapolated through its "
                     "launch and step overheads")
    checks = (("params", arch.param_count() if params is None else params, "parameters"), ("prompt_tokens", req.prompt_tokens, "prompt tokens"),
              ("generated_tokens", req.generated_tokens, "generated tokens"), ("batch_size", req.batch_size, "batch size"),
              ("num_gpus", req.num_gpus, "GPUs"))
    for key, value, label in checks:
        lo_hi = domain.get(key)
        if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
            notes.append(f"{label} {value:,} outside the trained range {lo_hi[0]:,}-{lo_hi[1]:,}")
    return notes


#: The request counts that :func:`domain_notes` checks against the trained ranges (domain key, attribute).
_RANGE_CHECKS = (("prompt_tokens", "prompt_tokens"), ("generated_tokens", "generated_tokens"), ("batch_size", "batch_size"),
                 ("num_gpus", "num_gpus"))


def _object_codes(objects: Sequence[Any]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(first index of each distinct object, per-row code)``, objects compared by identity."""
    ids = np.fromiter(map(id, objects), dtype=np.int64, count=len(objects))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def domain_note_lists(domain: dict[str, Any], items: Sequence[Item]) -> list[list[str]]:
    """:func:`domain_notes` of every item, each row its own list. The notes depend only on the
    GPU, the engine, the parameter count and the counts that lie outside their trained range, so
    they are built once per distinct combination of those, not once per row."""
    n = len(items)
    if not n:
        return []
    archs, reqs, gpus = zip(*items, strict=True)
    arch_first, arch_code = _object_codes(archs)
    _, gpu_code = _object_codes(gpus)
    _, engine_code = _object_codes(list(map(cached_engine_id, map(attrgetter("engine"), reqs))))
    params = np.array([archs[i].param_count() for i in arch_first.tolist()], dtype=np.int64)[arch_code]
    counts = np.array(list(map(attrgetter(*(attr for _, attr in _RANGE_CHECKS)), reqs)), dtype=np.int64).reshape(n, -1)
    columns = [gpu_code, engine_code]
    checks = [("params", params), *((key, counts[:, j]) for j, (key, _) in enumerate(_RANGE_CHECKS))]
    for key, values in checks:
        lo_hi = domain.get(key)
        if lo_hi:
            outside = (values < lo_hi[0]) | (values > lo_hi[1])
            columns += [outside.astype(np.int64), np.where(outside, values, 0).astype(np.int64)]
    first, group = distinct_rows(*columns)
    per_group = [domain_notes(domain, items[i], int(params[i])) for i in first.tolist()]
    return [list(per_group[g]) for g in group.tolist()]


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

    def network_analysis(self, analysis: LayerAnalysis) -> LayerAnalysis:
        """``analysis`` as the network must see it: a request whose engine the training data never
        showed is presented as engine ``unknown`` (the level trained, by engine dropout, on the
        average behaviour), since the network's weights for a never-seen level are untrained. The
        physics prior still uses the engine's own catalog overheads. Build the network's graphs
        from this analysis (``build_graph_arrays(head.network_analysis(analysis), totals)``)."""
        seen = self.domain.get("engines")
        if not seen:
            return analysis
        levels = list(engine_ids())
        known = np.array([levels.index(e) for e in seen if e in levels], dtype=np.float64)
        index = analysis.batch.engine
        unseen = ~np.isin(index, known)
        if not unseen.any():
            return analysis
        batch = replace(analysis.batch, engine=np.where(unseen, float(levels.index(UNKNOWN_ENGINE)), index))
        return replace(analysis, batch=batch)

    def prior(self, items: Sequence[Item], analysis: LayerAnalysis,
              totals: ModelTotals) -> tuple[NDArray[np.float64], NDArray[np.float64], PhaseInputs]:
        """``([n, 2] prior energy (J), [n, 2] latency (s), inputs)``; the prior is floored at
        :data:`MIN_PRIOR_J` and is 1 J everywhere when ``use_prior`` is off."""
        x = PhaseInputs.build(items, analysis, totals)
        prior, latency = self.physics.energy_j(x)
        prior = np.maximum(prior, MIN_PRIOR_J) if self.use_prior else np.ones_like(prior)
        return prior, latency, x

    def finish(self, z: NDArray[np.floating], items: Sequence[Item], analysis: LayerAnalysis,
               totals: ModelTotals) -> PhasePrediction:
        """Predictions of ``items`` from the network's outputs ``z`` ``[n, >= 2]`` (first two
        columns: prefill and decode)."""
        z = np.asarray(z, dtype=np.float64)[:, :2]
        prior, latency, x = self.prior(items, analysis, totals)
        energy = self.target.energy_j(z, prior)
        limit_w = (x.num_gpus * x.tdp_w)[:, None]
        idle_w = (x.num_gpus * x.idle_w)[:, None]
        # energy is the learned quantity; the physics latency yields to it: the average power
        # energy / latency is held within [GPUs x idle, GPUs x power limit]
        latency = np.clip(latency, energy / limit_w, energy / idle_w)
        empty = x.steps <= 0
        energy = np.where(empty, 0.0, energy)
        latency = np.where(empty, 0.0, latency)
        notes = domain_note_lists(self.domain, items)
        groups = [device_group(it) for it in items]
        q_lo, q_hi = self.intervals.log_bounds(groups, [bool(n) for n in notes])
        low = np.minimum(energy * np.exp(q_lo), energy)
        high = np.maximum(energy * np.exp(q_hi), energy)
        return PhasePrediction(energy, latency, low, high, np.where(empty, 0.0, prior), notes, self.intervals.levels)

    def state_dict(self) -> dict[str, Any]:
        return {"target": self.target.state_dict(), "physics": self.physics.state_dict(),
                "intervals": self.intervals.state_dict(), "domain": self.domain, "use_prior": self.use_prior}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> OutputHead:
        return cls(EnergyTarget.from_state_dict(state["target"]), PhysicsPrior.from_state_dict(state.get("physics")),
                   IntervalCalibration.from_state_dict(state.get("intervals")), dict(state.get("domain", {})),
                   bool(state.get("use_prior", True)))
