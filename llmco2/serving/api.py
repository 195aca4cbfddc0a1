"""Serving-level footprint: simulate a continuously batched server and charge each request its
share of energy, GPU time and carbon.

:func:`serve` is the entry point: a model, a GPU type and count (TP), an engine, a workload
(:mod:`llmco2.serving.workload`) and engine limits in; a :class:`ServingResult` out, with one row
per request (TTFT, TPOT, end-to-end latency, energy, carbon) and aggregates (J per output token,
GPU utilisation, average power).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from llmco2.carbon.accounting import embodied_g, operational_g
from llmco2.carbon.server_scope import check_scope
from llmco2.errors import InvalidInputError
from llmco2.prediction.phases import PhasePredictor
from llmco2.serving.calibration import Calibration, calibrate
from llmco2.serving.costs import GridCostModel, IterationCost, idle_power_w, memory_budget
from llmco2.serving.schedule import Schedule, SchedulerConfig
from llmco2.serving.simulator import simulate
from llmco2.serving.workload import Workload
from llmco2.specs import GPU, ModelArch, Request, get_engine, get_gpu, get_model, validate_request
from llmco2.specs.limits import MAX_SIMULATED_ITERATIONS, fewest_iterations, finite_number, whole_number

log = logging.getLogger(__name__)


@dataclass
class ServingResult:
    """Per-request frame, aggregates, the raw schedule and the assumptions behind them."""

    requests: pd.DataFrame
    summary: dict[str, Any]
    schedule: Schedule
    assumptions: dict[str, Any]


def renamed(old: str, old_value: Any, new: str, new_value: Any) -> Any:
    """The value of a parameter given by its new name or its earlier one (with a
    :class:`DeprecationWarning`); giving both is refused."""
    if old_value is None:
        return new_value
    warnings.warn(f"{old}= is renamed {new}=; the old name will be removed in the next release", DeprecationWarning,
                  stacklevel=3)
    if new_value is not None and new_value != old_value:
        raise InvalidInputError(f"give {new} once ({old} is its old name)", field=new)
    return old_value


def summarise(schedule: Schedule) -> dict[str, Any]:
    """Aggregates of a schedule: energy (J), J per output token, utilisation, average power (W), latencies (s)."""
    tokens = int(schedule.output_tokens.sum())
    span = schedule.makespan_s
    energy = float(schedule.energy_j.sum())
    ttft = schedule.first_token_s - schedule.arrival_s
    e2e = schedule.finish_s - schedule.arrival_s
    steps = np.maximum(schedule.output_tokens - 1, 1)
    tpot = np.where(schedule.output_tokens > 1, (schedule.finish_s - schedule.first_token_s) / steps, np.nan)
    iters = np.asarray(schedule.log_iterations, dtype=float)
    batch = np.asarray(schedule.log_batch, dtype=float)
    return {
        "requests": len(schedule.output_tokens), "output_tokens": tokens, "energy_j": energy,
        "idle_energy_j": schedule.idle_j, "j_per_output_token": energy / tokens, "makespan_s": span,
        "gpu_utilisation": schedule.busy_s / span if span > 0 else 1.0,
        "average_power_w": energy / span if span > 0 else float("nan"),
        "iterations": schedule.iterations,
        "mean_batch": float((iters * batch).sum() / iters.sum()) if iters.sum() else 0.0,
        "preemptions": int(schedule.preemptions.sum()),
        "ttft_s": {"mean": float(np.mean(ttft)), "p50": float(np.median(ttft)), "p90": float(np.quantile(ttft, 0.9))},
        "tpot_s": {"mean": float(np.nanmean(tpot)) if np.isfinite(tpot).any() else None,
                   "p50": float(np.nanmedian(tpot)) if np.isfinite(tpot).any() else None},
        "e2e_s": {"mean": float(np.mean(e2e)), "p50": float(np.median(e2e)), "p90": float(np.quantile(e2e, 0.9))},
    }


def steady_state(schedule: Schedule, lo: float = 0.1, hi: float = 0.8) -> dict[str, float]:
    """Aggregates over the window between the ``lo`` and ``hi`` quantiles of completion times
    (ramp-up and drain left out), as a steady-state benchmark measures them: J per output token,
    mean batch (per iteration), average power (W) and mean iteration time (s, the inter-token latency)."""
    start, end = np.quantile(schedule.finish_s, [lo, hi])
    s = np.asarray(schedule.log_start_s)
    inside = (s >= start) & (s < end)
    if not inside.any():
        inside = np.ones(len(s), dtype=bool)
    tokens = np.asarray(schedule.log_tokens, dtype=float)[inside].sum()
    energy = np.asarray(schedule.log_energy_j)[inside].sum()
    iters = np.asarray(schedule.log_iterations, dtype=float)[inside]
    batch = np.asarray(schedule.log_batch, dtype=float)[inside]
    seconds = (np.asarray(schedule.log_end_s) - s)[inside].sum()
    return {"j_per_output_token": float(energy / tokens), "mean_batch": float((iters * batch).sum() / iters.sum()),
            "average_power_w": float(energy / seconds) if seconds > 0 else float("nan"),
            "s_per_iteration": float(seconds / iters.sum())}


def steady_state_j_per_token(schedule: Schedule, lo: float = 0.1, hi: float = 0.8) -> float:
    """J per output token over the steady window (see :func:`steady_state`)."""
    return steady_state(schedule, lo, hi)["j_per_output_token"]


def request_frame(schedule: Schedule, gpu: GPU, num_gpus: int, assumptions: dict[str, Any]) -> pd.DataFrame:
    """One row per request: lengths, times (s), energy (J), attributed GPU time (s) and carbon (g CO2eq).

    With a scope in the assumptions (``assumptions["scope"]``) the server-scope columns are added
    (:func:`server_columns`) and carbon is on that scope."""
    s = schedule
    steps = np.maximum(s.output_tokens - 1, 1)
    emb = embodied_g(gpu, np.full(len(s.energy_j), num_gpus), s.gpu_s, assumptions["lifetime_years"])
    scope = assumptions.get("scope")
    server = server_columns(schedule, gpu, num_gpus, assumptions) if scope is not None else {}
    carbon_j = s.energy_j
    if scope is not None and scope["scope"] == "server":
        carbon_j, emb = server["server_j"], emb + np.nan_to_num(server["embodied_non_gpu_g"])
    op = operational_g(carbon_j, assumptions["pue"]["value"], assumptions["grid"]["g_co2eq_per_kwh"])
    return pd.DataFrame({
        "prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens, "arrival_s": s.arrival_s,
        "ttft_s": s.first_token_s - s.arrival_s,
        "tpot_s": np.where(s.output_tokens > 1, (s.finish_s - s.first_token_s) / steps, np.nan),
        "e2e_s": s.finish_s - s.arrival_s, "prefill_j": s.prefill_j, "decode_j": s.energy_j - s.prefill_j, "energy_j": s.energy_j, "gpu_s": s.gpu_s, "preemptions": s.preemptions,
        "operational_g": op, "embodied_g": emb, "total_g": op + np.nan_to_num(emb), **server,
    })


def server_columns(schedule: Schedule, gpu: GPU, num_gpus: int, assumptions: dict[str, Any]) -> dict[str, Any]:
    """Server-scope columns of a schedule's requests, on the scope entry's platform (default: the GPU's usual one).

    A request's host share is charged for the same server time its GPU energy is: ``gpu_s``, its share of every
    iteration it took part in plus the idle spells charged to it (:mod:`llmco2.serving.simulator`), at the load of
    its own GPU energy over that time. ``server_j`` (J, wall) = (energy + host) / PSU efficiency; it is split over
    prefill and decode in proportion to the GPU energy. Also ``host_j`` and ``psu_loss_j`` (J), ``host_share``
    (GPUs / slots), ``utilisation`` and ``embodied_non_gpu_g`` (g CO2eq)."""
    from llmco2.carbon.server_scope import server_arrays
    from llmco2.specs.platforms import resolve_platform

    s = schedule
    plat = resolve_platform(assumptions["scope"]["platform"], gpu)
    a = server_arrays(s.energy_j, s.gpu_s, gpu, np.full(len(s.energy_j), num_gpus), plat, assumptions["lifetime_years"])
    ratio = np.divide(a.server_j, s.energy_j, out=np.ones_like(a.server_j), where=s.energy_j > 0)
    return {"server_prefill_j": s.prefill_j * ratio, "server_decode_j": (s.energy_j - s.prefill_j) * ratio,
            "server_j": a.server_j, "host_j": a.host_j, "psu_loss_j": a.psu_loss_j, "host_share": a.host_share,
            "utilisation": a.utilisation, "embodied_non_gpu_g": a.embodied_non_gpu_g, "platform": plat.id}


def check_limits(max_batch: Any, max_batched_tokens: Any, chunked_prefill: Any, energy_scale: Any) -> None:
    """The engine limits and energy scale of :func:`serve`, before anything is simulated: whole numbers
    from 1, a boolean (``"no"``, ``0`` or ``None`` is refused, not read as true or false) and a finite
    positive number; one line naming the parameter otherwise."""
    whole_number(max_batch, "max_batch", 1)
    whole_number(max_batched_tokens, "max_batched_tokens", 1)
    if not isinstance(chunked_prefill, (bool, np.bool_)):
        raise InvalidInputError(f"must be True or False, got {chunked_prefill!r}", field="chunked_prefill")
    finite_number(energy_scale, "energy_scale", above=True)


def check_models(predictor: Any, cost: Any, calibration: Any) -> None:
    """``predictor`` is a :class:`~llmco2.prediction.phases.PhasePredictor`, ``cost`` an
    :class:`IterationCost`, ``calibration`` a :class:`Calibration` (each or ``None``)."""
    if predictor is not None and not isinstance(predictor, PhasePredictor):
        raise InvalidInputError(f"must be a loaded checkpoint (llmco2.prediction.loading.load_predictor) or None, got "
                                f"{type(predictor).__name__}", field="predictor")
    if cost is not None and not isinstance(cost, IterationCost):
        raise InvalidInputError(f"must be an IterationCost (with prefill, mixed and decode methods) or None, got "
                                f"{type(cost).__name__}", field="cost")
    if calibration is not None and not isinstance(calibration, Calibration):
        raise InvalidInputError(f"must be a Calibration (llmco2.serving.calibration) or None, got "
                                f"{type(calibration).__name__}", field="calibration")


def check_iterations(workload: Workload, max_batch: int, max_batched_tokens: int) -> None:
    """Refuse, before simulating, a workload whose scheduler limits are so small that it needs more than
    :data:`MAX_SIMULATED_ITERATIONS` iterations (``max_batched_tokens=1`` on thousands of requests would
    run for hours), naming ``max_batched_tokens`` or ``max_batch``, whichever binds."""
    output = int(workload.output_tokens.sum())
    total = int(workload.prompt_tokens.sum()) + output
    need = fewest_iterations(total, output, max_batched_tokens, max_batch)
    if need > MAX_SIMULATED_ITERATIONS:
        by_tokens = -(-total // max_batched_tokens) >= -(-output // max_batch)
        field, value = ("max_batched_tokens", max_batched_tokens) if by_tokens else ("max_batch", max_batch)
        raise InvalidInputError(f"{value:,} leaves {len(workload.prompt_tokens):,} requests ({total:,} tokens) at least {need:,} "
                                f"scheduler iterations, more than the {MAX_SIMULATED_ITERATIONS:,} one simulation may take; "
                                f"raise `{field}` or simulate fewer requests (`serving_requests`)", field=field)


def server_setup(model: str | ModelArch, gpu: str | GPU, num_gpus: int = 1, tp: int | None = None,
                 engine: str = "vllm", dtype: str = "bf16", ep: int | None = None) -> tuple[ModelArch, GPU, Request]:
    """Resolve and validate the server: (arch, gpu, a template request holding GPUs, their tensor- and
    expert-parallel layout, dtype, engine)."""
    arch, dev = get_model(model), get_gpu(gpu)
    req = Request(batch_size=1, prompt_tokens=1, generated_tokens=1, num_gpus=num_gpus, tensor_parallel=tp,
                  expert_parallel=ep, weight_dtype=dtype, engine=get_engine(engine).id)
    validate_request(req, arch, dev, check_context=False)
    return arch, dev, req


def serve(model: str | ModelArch, gpu: str | GPU, workload: Workload, num_gpus: int = 1, tp: int | None = None,
          engine: str = "vllm", dtype: str = "bf16", max_batch: int = 256, max_batched_tokens: int = 8192,
          chunked_prefill: bool = True, predictor: Any = None, cost: IterationCost | None = None,
          energy_scale: float = 1.0, region: str | None = None, carbon_intensity: float | None = None,
          pue: float | str | None = None, lifetime_years: float | None = None,
          calibration: Calibration | None = None, scope: str = "gpu", platform: str | None = None,
          region_id: str | None = None, pue_value: float | str | None = None, ep: int | None = None) -> ServingResult:
    """Simulate ``workload`` on ``num_gpus`` x ``gpu`` serving ``model`` with ``engine`` (``tp``, ``ep``:
    tensor- and expert-parallel degrees, :class:`~llmco2.specs.Request`).

    ``cost`` defaults to a :class:`GridCostModel` of the step physics with the shipped constants
    (:mod:`llmco2.serving.physics_params`), or of ``predictor`` when one is given (a learned
    checkpoint's per-request predictions on the grid); ``energy_scale`` multiplies every
    iteration's energy. ``calibration`` (see :mod:`llmco2.serving.calibration`; only with a
    ``predictor``) scales the busy energy by its factor at the simulated steady-state mean batch,
    the GPU count and the mean output length. The summary's ``j_per_output_token_interval`` is the
    physics' 10-90% interval (wider for a GPU or model family its fit has not seen).

    ``scope`` (``gpu``, the default, as before scopes existed, or ``server``) is what carbon is computed on;
    the server-scope figures on ``platform`` (default: the GPU's usual platform) are reported on both scopes: the
    frame's ``server_j``, ``host_j``, ... columns (:func:`server_columns`) and the summary's ``server_energy_j``,
    ``server_j_per_output_token`` and ``server_average_power_w`` (wall power over the makespan, W).

    ``region`` and ``pue`` are the names :func:`llmco2.predict` uses; ``region_id`` and ``pue_value``,
    their earlier spellings, still work with a :class:`DeprecationWarning`.
    """
    from llmco2.carbon.assumptions import resolve_assumptions

    region_id = renamed("region_id", region_id, "region", region)
    pue_value = renamed("pue_value", pue_value, "pue", pue)
    if not isinstance(workload, Workload):
        raise InvalidInputError(f"must be a Workload (llmco2.make_workload), got {type(workload).__name__}", field="workload")
    check_limits(max_batch, max_batched_tokens, chunked_prefill, energy_scale)
    check_models(predictor, cost, calibration)
    check_iterations(workload, max_batch, max_batched_tokens)
    check_scope(scope)  # None too, as llmco2.predict refuses it (the default is "gpu")

    arch, dev, req = server_setup(model, gpu, num_gpus, tp, engine, dtype, ep)
    assume = resolve_assumptions([dev], region_id, carbon_intensity, pue_value, lifetime_years, engine=req.engine,
                                 scope=scope, platform=platform)  # before the simulation: a bad region costs nothing
    memory = memory_budget(arch, dev, req)
    idle_w, idle_source = idle_power_w(dev, num_gpus)
    physics = cost is None and predictor is None
    if physics:
        from llmco2.serving.physics_params import shipped_params

        cost = GridCostModel.from_physics(arch, dev, req, shipped_params(), idle_w=idle_w, energy_scale=energy_scale)
    elif cost is None:
        cost = GridCostModel.from_predictor(arch, dev, req, predictor, idle_w=idle_w, energy_scale=energy_scale)
    if physics:
        calibration = None
    if calibration is not None and calibration.latency_coef and isinstance(cost, GridCostModel):
        cost = dataclasses.replace(cost, num_gpus=num_gpus, decode_time_coef=calibration.latency_coef,
                                   batch_range=calibration.batch_range)
    config = SchedulerConfig(max_batch=max_batch, max_batched_tokens=max_batched_tokens, chunked_prefill=chunked_prefill,
                             kv_capacity_tokens=int(memory["kv_capacity_tokens"]), idle_w=idle_w)
    schedule = simulate(workload, cost, config)
    applied = None
    if calibration is not None:
        factor = calibration.factor(steady_state(schedule)["mean_batch"], num_gpus, float(workload.output_tokens.mean()))
        calibrate(schedule, factor)
        applied = {"factor": factor, "source": calibration.source, "rows": calibration.rows,
                   "decode_latency": bool(calibration.latency_coef)}
    frame = request_frame(schedule, dev, num_gpus, assume)
    summary = summarise(schedule)
    server_j = float(frame["server_j"].sum())
    summary.update(scope=assume["scope"]["scope"], platform=str(frame["platform"].iloc[0]), server_energy_j=server_j,
                   server_j_per_output_token=server_j / summary["output_tokens"],
                   server_average_power_w=server_j / summary["makespan_s"] if summary["makespan_s"] > 0 else float("nan"))
    interval, interval_kind = None, "none (a learned checkpoint's simulation)"
    if physics:
        from llmco2.serving.physics_params import j_per_token_interval

        interval, interval_kind = j_per_token_interval(summary["j_per_output_token"], dev.id, arch.id)
    summary["j_per_output_token_interval"] = interval
    summary["operational_g"] = float(frame["operational_g"].sum())
    summary["embodied_g"] = float(frame["embodied_g"].sum()) if frame["embodied_g"].notna().all() else None
    summary["g_per_output_token"] = float(frame["total_g"].sum()) / summary["output_tokens"]
    assume.update(server={"model": arch.id, "gpu": dev.id, "num_gpus": num_gpus, "tensor_parallel": req.tensor_parallel,
                          "engine": req.engine, "dtype": req.weight_dtype, "max_batch": config.max_batch,
                          "max_batched_tokens": config.max_batched_tokens, "chunked_prefill": config.chunked_prefill,
                          "kv_capacity_tokens": int(memory["kv_capacity_tokens"]),
                          "weight_gb_per_gpu": memory["weight_bytes_per_gpu"] / 1e9,
                          "idle_w": idle_w, "idle_source": idle_source, "energy_scale": energy_scale,
                          "calibration": applied, "cost_model": "step physics" if physics else "learned checkpoint",
                          "interval": interval_kind},
                  workload=workload.description)
    if req.expert_parallel > 1:  # type: ignore[operator]
        assume["server"]["expert_parallel"] = req.expert_parallel
    return ServingResult(frame, summary, schedule, assume)
