"""Fit the physics prior (:class:`llmco2.physics.priors.PhysicsPrior`) on training rows.

1. Latency: the roofline efficiency per phase of each device with at least
   :data:`MIN_DEVICE_ROWS` latency rows (each group, data-centre or edge, gets the median of its
   devices, for GPUs without rows) and, per engine with at least
   :data:`MIN_ENGINE_ROWS` latency rows, the launch overhead per kernel and the step overhead,
   minimising the mean absolute log error of latency (Powell) over rows with a measured latency
   (any source, latency-only ones included). Every (device, engine, phase) group weighs the same,
   so that tens of thousands of edge rows do not drown a few hundred data-centre ones, and a weak
   penalty (:data:`PRIOR_WEIGHT`) keeps overheads near the catalog priors where rows say little.
   Engines without rows keep the catalog priors; ``unknown`` takes the median of the fitted engines.
   The latency of one tensor-parallel all-reduce is fitted too (one value for every GPU and engine)
   where at least :data:`MIN_ENGINE_ROWS` latency rows run on more than one GPU, else it keeps its
   sourced prior (:data:`llmco2.physics.priors.COLLECTIVE_LATENCY_US`).
2. Power: the activity per phase (the utilisation at full roofline load), on a grid, minimising the
   same weighted error of the energy prior against measured energy.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.optimize import minimize

from llmco2.data.dataset import EnergyData, energy_data
from llmco2.physics.priors import PhaseInputs, PhysicsPrior, row_values
from llmco2.specs import UNKNOWN_ENGINE

log = logging.getLogger(__name__)
MIN_ENGINE_ROWS = 10
MIN_DEVICE_ROWS = 10
MAX_ROWS_PER_GROUP = 1500
PRIOR_WEIGHT = 0.02
RESTARTS = 3
ACTIVITY_GRID = np.linspace(0.05, 1.0, 39)


def _group_weights(data: EnergyData, rows: NDArray[np.int64], engines: list[str]) -> NDArray[np.float64]:
    devices = np.array([g.id for _, _, g in data.items])[data.config[rows]]
    eng = np.asarray(engines, dtype=object)[data.config[rows]]
    key = pd.Series([f"{d}|{e}|{p}" for d, e, p in zip(devices, eng, data.phase[rows], strict=True)])
    counts = key.map(key.value_counts()).to_numpy(dtype=float)
    w = 1.0 / counts
    return w / w.sum()


def _subsample(data: EnergyData, rows: NDArray[np.int64], engines: list[str], seed: int) -> NDArray[np.int64]:
    rng = np.random.default_rng(seed)
    devices = np.array([g.id for _, _, g in data.items])[data.config[rows]]
    eng = np.asarray(engines, dtype=object)[data.config[rows]]
    keys = np.array([f"{d}|{e}|{p}" for d, e, p in zip(devices, eng, data.phase[rows], strict=True)])
    keep = []
    for k in np.unique(keys):
        mine = rows[keys == k]
        keep.append(mine if len(mine) <= MAX_ROWS_PER_GROUP else rng.choice(mine, MAX_ROWS_PER_GROUP, replace=False))
    return np.sort(np.concatenate(keep)) if keep else rows


def latency_table_rows(table: pd.DataFrame) -> EnergyData:
    """Rows of a canonical table with a positive latency (any phase, energy not required)."""
    has = pd.to_numeric(table["latency_s"], errors="coerce").gt(0).fillna(False).to_numpy(dtype=bool)
    return energy_data(table[has].reset_index(drop=True), require_energy=False)


def fit_physics(latency_data: EnergyData, energy_rows: EnergyData | None = None, mode: str = "physical",
                seed: int = 0, prior_weight: float = PRIOR_WEIGHT) -> PhysicsPrior:
    """Fitted prior from the rows of ``latency_data`` that carry ``latency_s`` and (for the power
    model) the rows of ``energy_rows``; ``prior_weight`` scales the pull of the overheads towards
    their catalog priors (0: the rows alone)."""
    prior = PhysicsPrior(mode=mode)
    lat_meas = pd.to_numeric(latency_data.table.get("latency_s", pd.Series(np.nan, index=latency_data.table.index)),
                             errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    x = PhaseInputs.build(latency_data.items, *latency_data.analysis())
    ok = np.isfinite(lat_meas) & (lat_meas > 0)
    ok &= row_values(x.roofline_s, latency_data.config, latency_data.phase) > 0
    rows = _subsample(latency_data, np.flatnonzero(ok), x.engines, seed)
    report: dict[str, object] = {"latency_rows": int(len(rows))}
    if len(rows) >= 3:
        prior = _fit_latency(prior, latency_data, x, rows, lat_meas, report, prior_weight)
    if energy_rows is not None and mode == "physical" and len(energy_rows.energy_j):
        prior = _fit_activity(prior, energy_rows, seed, report)
    prior.fit_report = report
    return prior


def _fit_latency(prior: PhysicsPrior, data: EnergyData, x_all: PhaseInputs, rows: NDArray[np.int64],
                 lat_meas: NDArray[np.float64], report: dict[str, object], prior_weight: float = PRIOR_WEIGHT) -> PhysicsPrior:
    used, local = np.unique(data.config[rows], return_inverse=True)
    x, cfg = x_all.take(used), local.reshape(-1)
    row_engines = np.asarray(x.engines, dtype=object)[cfg]
    counts = pd.Series(row_engines).value_counts()
    fitted = sorted(e for e, c in counts.items() if c >= MIN_ENGINE_ROWS) if prior.mode == "physical" else []
    row_devices = np.asarray(x.devices, dtype=object)[cfg]
    dev_counts = pd.Series(row_devices).value_counts()
    devices = sorted(d for d, c in dev_counts.items() if c >= MIN_DEVICE_ROWS)
    group_of = dict(zip(x.devices, x.groups, strict=True))
    w = _group_weights(data, rows, x_all.engines)
    y = np.log(lat_meas[rows])
    start_launch = np.log([prior.launch_us[e] for e in fitted])
    start_step = np.log([prior.step_ms[e] for e in fitted])
    start_seq = np.log([max(prior.sequence_us.get(e, 0.0), 0.1) for e in fitted])
    multi_rows = int(np.sum(x.collectives[cfg] > 0))
    start_coll = np.log([prior.collective_us]) if prior.mode == "physical" and multi_rows >= MIN_ENGINE_ROWS else np.zeros(0)
    nd, k = 2 * len(devices), len(fitted)
    start_over = np.concatenate([start_launch, start_step, start_seq, start_coll])
    theta0 = np.concatenate([np.zeros(nd), start_over])  # efficiency = sigmoid(theta): 0.5

    def unpack(theta: NDArray[np.float64]) -> PhysicsPrior:
        eff = (1.0 / (1.0 + np.exp(-theta[:nd]))).reshape(-1, 2)
        efficiency = {d: [float(e[0]), float(e[1])] for d, e in zip(devices, eff, strict=True)}
        for group in ("edge", "datacentre"):
            mine = [efficiency[d] for d in devices if group_of[d] == group]
            if mine:
                efficiency[group] = [float(v) for v in np.exp(np.median(np.log(mine), axis=0))]
        launch = {**prior.launch_us, **{e: float(np.exp(v)) for e, v in zip(fitted, theta[nd:nd + k], strict=True)}}
        step = {**prior.step_ms, **{e: float(np.exp(v)) for e, v in zip(fitted, theta[nd + k:nd + 2 * k], strict=True)}}
        seq = {**prior.sequence_us, **{e: float(np.exp(v)) for e, v in zip(fitted, theta[nd + 2 * k:nd + 3 * k], strict=True)}}
        coll = float(np.exp(theta[nd + 3 * k])) if len(start_coll) else prior.collective_us
        return replace(prior, efficiency=efficiency, launch_us=launch, step_ms=step, sequence_us=seq, collective_us=coll)

    def loss(theta: NDArray[np.float64]) -> float:
        lat, _ = unpack(theta).latency_s(x)
        pred = row_values(lat, cfg, data.phase[rows])
        err = float(np.sum(w * np.abs(np.log(np.maximum(pred, 1e-12)) - y)))
        penalty = prior_weight * float(np.sum((theta[nd:] - start_over) ** 2))
        return err + penalty

    options = {"maxiter": 4000, "xtol": 1e-3, "ftol": 1e-6}
    result = minimize(loss, theta0, method="Powell", options=options)
    for _ in range(RESTARTS):  # Powell stalls in the kinks of max(); restart from where it stopped
        again = minimize(loss, result.x, method="Powell", options=options)
        if again.fun >= result.fun - 1e-6:
            break
        result = again
    fit = unpack(result.x)
    if fitted:
        fit.launch_us[UNKNOWN_ENGINE] = float(np.median([fit.launch_us[e] for e in fitted]))
        fit.step_ms[UNKNOWN_ENGINE] = float(np.median([fit.step_ms[e] for e in fitted]))
        fit.sequence_us[UNKNOWN_ENGINE] = float(np.median([fit.sequence_us[e] for e in fitted]))
    fit.fitted_engines = fitted
    lat, _ = fit.latency_s(x)
    ape = np.abs(row_values(lat, cfg, data.phase[rows]) - lat_meas[rows]) / lat_meas[rows]
    report["latency_median_ape_per_engine"] = {str(e): {"rows": int((row_engines == e).sum()),
                                                        "median_ape": float(np.median(ape[row_engines == e]))}
                                               for e in sorted(set(row_engines))}
    report["latency_weighted_log_error"] = float(result.fun)
    report["collective_rows"] = multi_rows
    log.info("physics prior: efficiency %s, launch %s us, step %s ms, per sequence %s us, all-reduce %.1f us "
             "(%d rows on > 1 GPU)", {d: np.round(v, 3).tolist() for d, v in fit.efficiency.items()},
             {e: round(fit.launch_us[e], 2) for e in fitted}, {e: round(fit.step_ms[e], 3) for e in fitted},
             {e: round(fit.sequence_us[e], 2) for e in fitted},
             fit.collective_us, multi_rows)
    return fit


def _fit_activity(prior: PhysicsPrior, data: EnergyData, seed: int, report: dict[str, object]) -> PhysicsPrior:
    x_all = PhaseInputs.build(data.items, *data.analysis())
    rows = _subsample(data, np.flatnonzero(data.energy_j > 0), x_all.engines, seed)
    w = _group_weights(data, rows, x_all.engines)
    used, local = np.unique(data.config[rows], return_inverse=True)
    x, cfg = x_all.take(used), local.reshape(-1)
    y = np.log(data.energy_j[rows])
    best, best_loss = prior.activity, np.inf
    lat, busy = prior.latency_s(x)
    for a0 in ACTIVITY_GRID:
        for a1 in ACTIVITY_GRID:
            cand = replace(prior, activity=np.array([a0, a1]))
            u = cand.utilisation(x, lat, busy)
            e = lat * x.num_gpus[:, None] * (x.idle_w[:, None] + (x.tdp_w - x.idle_w)[:, None] * u)
            pred = row_values(np.maximum(e, 1e-12), cfg, data.phase[rows])
            err = float(np.sum(w * np.abs(np.log(np.maximum(pred, 1e-12)) - y)))
            if err < best_loss:
                best, best_loss = np.array([a0, a1]), err
    report["activity_weighted_log_error"] = float(best_loss)
    report["energy_rows"] = int(len(rows))
    return replace(prior, activity=best)
