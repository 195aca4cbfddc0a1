"""The step physics as the network's prior for data-centre GPUs (NumPy only).

A request is one prefill step and ``generated - 1`` decode steps. Each phase's latency and energy
follow from :func:`llmco2.physics.step_physics.step_cost` on the phase's per-step work (the decode
phase's work averaged over its steps), with the constants fitted jointly on isolated batch runs and
serving measurements (:mod:`llmco2.physics.step_fit`). The hardware enters only through the GPU's
catalog numbers, so an unseen data-centre GPU gets its prior from the same formulas as a measured
one, never from a median of fitted per-GPU constants.

Edge modules and SoCs (Jetson, RK3588: LPDDR memory, NPUs, eager frameworks) are far from the
data-centre constants; their rows keep the per-device prior of :class:`llmco2.physics.priors.PhysicsPrior`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis, analyze_layers
from llmco2.errors import InvalidInputError
from llmco2.file_checks import parse_json
from llmco2.physics.hardware_rows import HardwareRows
from llmco2.physics.priors import PHASE_NAMES, PhaseInputs, check_step_params
from llmco2.physics.step_physics import StepParams, overhead_arrays, step_cost
from llmco2.physics.step_work import shapes_of

Array = NDArray[np.float64]
#: Device group whose rows take the step physics as their prior.
STEP_GROUP = "datacentre"


def step_phase_cost(params: StepParams, analysis: LayerAnalysis, x: PhaseInputs) -> tuple[Array, Array]:
    """``([n, 2] energy of all GPUs (J), [n, 2] latency (s))`` of the prefill and decode phases
    of the requests of ``analysis`` (their :class:`PhaseInputs` ``x``); an empty decode phase (one
    generated token) is 0. A batch whose KV cache does not fit beside the weights under an engine
    that pages it runs as ``batch / at_once`` waves of the sequences that fit
    (:attr:`PhaseInputs.at_once`), as the isolated runs the constants were fitted on are costed
    (:func:`llmco2.physics.step_isolated.resident_sequences`)."""
    assert x.hardware is not None, "PhaseInputs.build gives every request its hardware rows"
    energy, latency = _phase_costs(params, analysis, x.steps, x.engines, x.hardware)
    fit = np.asarray(analysis.batch.batch, dtype=np.float64) if x.at_once is None else x.at_once
    waves = np.asarray(analysis.batch.batch, dtype=np.float64) / np.maximum(fit, 1.0)
    waved = np.flatnonzero(waves > 1.0)
    if len(waved):
        sub = analyze_layers(replace(analysis.batch.take(waved), batch=fit[waved]))
        e, t = _phase_costs(params, sub, x.steps[waved], [x.engines[i] for i in waved.tolist()], x.hardware.take(waved))
        energy[waved], latency[waved] = e * waves[waved, None], t * waves[waved, None]
    return energy, latency


def _phase_costs(params: StepParams, analysis: LayerAnalysis, steps: Array, engines: list[str],
                 hardware: HardwareRows) -> tuple[Array, Array]:
    """:func:`step_phase_cost` of ``analysis`` as it is, every batch at once."""
    n = len(steps)
    energy, latency = np.zeros((n, 2)), np.zeros((n, 2))
    overheads = overhead_arrays(engines, params)  # the same for both phases
    for j, phase in enumerate(PHASE_NAMES):
        shapes = shapes_of(analysis, phase, np.maximum(steps[:, j], 1.0), engines, hardware)
        c = step_cost(shapes, params, overheads)
        latency[:, j] = c.time_s * steps[:, j]
        energy[:, j] = c.energy_j * steps[:, j]
    return energy, latency


def read_step_params(path: str | Path) -> StepParams:
    """The constants of a step-physics JSON file (``llmco2/serving/data/step_physics.json``)."""
    try:
        raw = parse_json(Path(path).read_text())
        return StepParams.from_dict(raw)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"cannot read step constants from {path}: {exc}", field="step_file") from exc


@dataclass(frozen=True)
class StepPrior:
    """Fitted step constants and the device group they stand for."""

    params: StepParams
    group: str = STEP_GROUP

    def rows(self, x: PhaseInputs) -> NDArray[np.bool_]:
        """The requests whose prior this is (GPUs of :attr:`group`)."""
        groups = x.groups
        distinct = set(groups)
        if len(distinct) == 1:  # one device group, as in most files: no per-row comparison
            return np.full(len(groups), self.group in distinct, dtype=bool)
        return np.fromiter((g == self.group for g in groups), dtype=bool, count=len(groups))

    def covers(self, x: PhaseInputs) -> bool:
        """Whether every request of ``x`` (one or more) takes this prior."""
        return bool(len(x.groups)) and bool(self.rows(x).all())

    def cost(self, analysis: LayerAnalysis, x: PhaseInputs) -> tuple[Array, Array]:
        """``([n, 2] energy of all GPUs (J), [n, 2] latency (s))`` of every request by the step physics."""
        return step_phase_cost(self.params, analysis, x)

    def apply(self, analysis: LayerAnalysis, x: PhaseInputs, energy: Array, latency: Array) -> tuple[Array, Array]:
        """``energy`` and ``latency`` ``[n, 2]`` with the rows of :meth:`rows` replaced by the step physics."""
        mine = self.rows(x)
        if not mine.any():
            return energy, latency
        e, t = step_phase_cost(self.params, analysis, x)
        if mine.all():
            return e, t
        return np.where(mine[:, None], e, energy), np.where(mine[:, None], t, latency)

    def state_dict(self) -> dict[str, Any]:
        return {"params": self.params.to_dict(), "group": self.group}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any] | None) -> StepPrior | None:
        if not state:
            return None
        return cls(check_step_params(StepParams.from_dict(state["params"])), str(state.get("group", STEP_GROUP)))
