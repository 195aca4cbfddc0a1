"""Fit the constants of :mod:`llmco2.physics.step_physics` on measurements (training side; SciPy).

Every observation is a predicted quantity next to its measurement: J per output token, a latency
(median inter-token latency, mean time per output token) or an average power, of a serving steady
state (:mod:`llmco2.serving.steady`) or of an isolated run. The fit minimises a robust loss
(pseudo-Huber, :data:`ROBUST_SCALE`) of log(predicted / measured) over all of them at once, each group of rows
(e.g. "v2 J per token", "v3 power") weighing the same whatever its size, so that GPU-independent
constants (achieved fractions of the peaks, kernel gap, power activities) are pinned by the
measurements of every GPU and engine together. Engine overheads are fitted for the engines named
in ``fit_engines``; every other engine keeps its catalog priors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from llmco2.physics.step_bounds import BOUNDS, ENGINE_BOUNDS, FIXED
from llmco2.physics.step_physics import EngineOverhead, StepParams

log = logging.getLogger(__name__)
Array = NDArray[np.float64]

#: The bounds live in :mod:`llmco2.physics.step_bounds` (SciPy-free: loading a checkpoint checks against them).
#: Scale of the pseudo-Huber loss on log errors: quadratic below about 10%, linear beyond.
ROBUST_SCALE = 0.1
LOG_SCALE = {"kernel_gap_s", "collective_s", "step_s", "sequence_s"}


@dataclass(frozen=True)
class Observation:
    """A group of measured values and the function that predicts them from the constants."""

    name: str
    measured: Array
    predict: Callable[[StepParams], Array]
    weight: float = 1.0


def _engine_fields(oh: EngineOverhead, online: bool, power: bool = False, collective: bool = False) -> tuple[str, ...]:
    """Fitted overheads of an engine: the per-kernel launch cost only where the host launches
    every kernel (no CUDA graphs; with graphs it never binds), the online front end's cost only
    where serving rows ran the engine (``online``), its own latency per all-reduce there or where
    its isolated runs were tensor-parallel (``collective``), the GPU work per sequence only where
    serving rows of the engine measured power (``power``: only a measured power tells GPU work from
    host time; isolated runs' energies and serving rows' J per token did not pin it)."""
    return ("step_s", "sequence_s", *(() if oh.cuda_graphs else ("launch_s",)),
            *(("serving_sequence_s", "collective_s", "serving_worker_s") if online else
              ("collective_s",) if collective else ()),
            *(("sequence_bytes",) if power else ()))


def _pack(p: StepParams, names: Sequence[str], engines: Sequence[str], online: Sequence[str], power: Sequence[str],
          bounds: Mapping[str, tuple[float, float]] = BOUNDS, collective: Sequence[str] = ()) -> tuple[Array, Array, Array]:
    x, lo, hi = [], [], []
    for n in names:
        v, (a, b) = getattr(p, n), bounds[n]
        v = min(max(v, a * 1.0001), b * 0.9999)
        x.append(np.log(v) if n in LOG_SCALE else v)
        lo.append(np.log(a) if n in LOG_SCALE else a)
        hi.append(np.log(b) if n in LOG_SCALE else b)
    for e in engines:
        oh = p.engine(e)
        for f in _engine_fields(oh, e in online, e in power, e in collective):
            a, b = ENGINE_BOUNDS[f]
            x.append(np.log(min(max(getattr(oh, f), a * 1.0001), b * 0.9999)))
            lo.append(np.log(a))
            hi.append(np.log(b))
    return np.array(x), np.array(lo), np.array(hi)


def _unpack(x: Array, base: StepParams, names: Sequence[str], engines: Sequence[str], online: Sequence[str],
            power: Sequence[str], collective: Sequence[str] = ()) -> StepParams:
    kw = {n: float(np.exp(x[i]) if n in LOG_SCALE else x[i]) for i, n in enumerate(names)}
    eng = dict(base.engines)
    j = len(names)
    for e in engines:
        oh = base.engine(e)
        fields = _engine_fields(oh, e in online, e in power, e in collective)
        values = {f: float(np.exp(x[j + i])) for i, f in enumerate(fields)}
        eng[e] = replace(oh, **values)
        j += len(fields)
    return StepParams(**{**{k: getattr(base, k) for k in FIXED}, **{k: getattr(base, k) for k in BOUNDS}, **kw},
                      engines=eng, source=base.source)


def fit_step_params(observations: Sequence[Observation], fit_engines: Sequence[str], base: StepParams | None = None,
                    names: Sequence[str] = tuple(BOUNDS), source: str = "",
                    online_engines: Sequence[str] | None = None,
                    bounds: Mapping[str, tuple[float, float]] | None = None,
                    power_engines: Sequence[str] = (),
                    collective_engines: Sequence[str] = ()) -> tuple[StepParams, dict[str, float]]:
    """Fitted constants and, per observation group, the median absolute percentage error after the fit.
    ``online_engines``: engines whose online front-end cost is fitted too (those that serving rows
    ran; default all of ``fit_engines``); ``bounds``: replaces entries of :data:`BOUNDS`;
    ``power_engines``: engines whose GPU work per sequence is fitted too (those that serving rows
    with a measured power ran; default none); ``collective_engines``: engines whose own latency per
    all-reduce is fitted too (those whose isolated runs were tensor-parallel; an online engine's
    always is)."""
    online = list(fit_engines if online_engines is None else online_engines)
    power = [e for e in power_engines if e in online]
    base = base or StepParams()
    obs = [o for o in observations if len(o.measured)]
    if not obs:
        raise ValueError("no observations to fit the step physics on")
    collective = [e for e in collective_engines if e in fit_engines]
    x0, lo, hi = _pack(base, names, fit_engines, online, power, {**BOUNDS, **(bounds or {})}, collective)

    def residuals(x: Array) -> Array:
        p = _unpack(x, base, names, fit_engines, online, power, collective)
        parts = []
        for o in obs:
            pred = np.maximum(o.predict(p), 1e-12)
            r = np.log(pred / o.measured)
            r = np.where(np.isfinite(r), r, 5.0)
            robust = np.sign(r) * ROBUST_SCALE * np.sqrt(2.0 * (np.sqrt(1.0 + (r / ROBUST_SCALE) ** 2) - 1.0))
            parts.append(robust * np.sqrt(o.weight / len(o.measured)))
        return np.concatenate(parts)

    res = least_squares(residuals, x0, bounds=(lo, hi), max_nfev=400)
    fitted = _unpack(res.x, base, names, fit_engines, online, power, collective)
    fitted = replace(fitted, source=source or fitted.source)
    report = {o.name: float(np.median(np.abs(o.predict(fitted) / o.measured - 1.0)) * 100) for o in obs}
    log.info("step physics fit: %s", ", ".join(f"{k} {v:.1f}%" for k, v in report.items()))
    return fitted, report
