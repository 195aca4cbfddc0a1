"""Choose hardware: every server configuration that holds a model, simulated at one load and
ranked by carbon per output token (``llmco2 compare``).

A configuration is a GPU type, a GPU count and its split into tensor-parallel groups (``tp`` GPUs
each) and data-parallel replicas (``dp = count / tp``); for a mixture-of-experts model also the
same split with expert parallelism across the replicas (``ep = count``,
:mod:`llmco2.api.compare_options`). ``tp``, ``dp`` and an ``expert_parallel`` degree keep only the
configurations of those degrees. The load is shared evenly by the replicas (an open-loop rate
split ``rate / dp``, a closed loop ``ceil(concurrency / dp)`` clients each), so one replica is
simulated with the serving physics (:func:`llmco2.serving.api.serve`) and the server is ``dp`` of
it; an expert-parallel server is simulated whole, at the whole load (:func:`serve_option`). Each
row holds g CO2eq per output token on the assumptions' scope (by default the whole server: GPUs, the host's share, power-supply losses), GPU J per output token
(with the physics' 10-90% interval) and the server's J per output token, GPU and wall power, TTFT and TPOT at the SLO percentile, whether the SLOs are met,
whether the server keeps up (its queue does not grow), and whether the prediction extrapolates
(a GPU, model family or engine the step-physics fit has not seen).

Example:
    >>> from llmco2.api.compare import compare
    >>> table = compare("llama3.1-8b", gpus=["h100", "a100-80gb"], concurrency=16, serving_requests=60, max_gpus=2)
    >>> list(table.columns[:4]), bool(table["rank"].is_monotonic_increasing)
    (['rank', 'gpu', 'num_gpus', 'tensor_parallel'], True)
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmco2.api.compare_options import EP_MODES, GPU_COUNTS, ServerOption, gpu_ids, refuse_empty_restriction, server_options
from llmco2.api.options import Assumptions, RequestOptions, with_fields
from llmco2.errors import InvalidInputError
from llmco2.specs.limits import MAX_SIMULATED_REQUESTS, finite_number, whole_number

if TYPE_CHECKING:
    import pandas as pd

    from llmco2.serving.api import ServingResult
    from llmco2.specs import ModelArch

__all__ = ["DEFAULT_REQUESTS", "EP_MODES", "GPU_COUNTS", "Load", "ServerOption", "Slo", "compare", "gpu_ids", "option_row",
           "rank", "serve_option", "server_options", "verdict"]

log = logging.getLogger(__name__)

#: Requests simulated per replica (per expert-parallel server) by default.
DEFAULT_REQUESTS = 600
#: A server keeps up when the median TTFT of its last quarter of arrivals is at most this many
#: times that of its second quarter, plus :data:`QUEUE_SLACK_S` (an open-loop queue that grows
#: makes the late requests wait ever longer).
QUEUE_GROWTH = 2.0
QUEUE_SLACK_S = 1.0


@dataclass(frozen=True)
class Load:
    """The offered load: an open-loop ``rate`` (requests/s) or a closed loop of ``concurrency``
    clients, with lengths from ``background`` (``conv``/``code`` Azure traces, or ``fixed``
    ``prompt_tokens``/``generated_tokens``), ``serving_requests`` simulated per replica."""

    rate: float | None = None
    concurrency: int | None = None
    background: str = "conv"
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    serving_requests: int = DEFAULT_REQUESTS
    seed: int = 0

    def check(self) -> None:
        """Exactly one load, and every number a number in its range (one line naming the parameter
        otherwise: text, ``None`` where a number is needed, NaN and fractions of a count are refused)."""
        from llmco2.serving.workload import MAX_TOKENS

        if (self.rate is None) == (self.concurrency is None):
            raise InvalidInputError("give exactly one load: a rate (requests/s) or a concurrency", field="rate")
        if self.rate is not None:
            finite_number(self.rate, "rate", above=True, what="a positive number of requests per second")
        if self.concurrency is not None:
            whole_number(self.concurrency, "concurrency", 1)
        whole_number(self.serving_requests, "serving_requests", 1, MAX_SIMULATED_REQUESTS)
        whole_number(self.seed, "seed", 0)
        for name in ("prompt_tokens", "generated_tokens"):
            if getattr(self, name) is not None:
                whole_number(getattr(self, name), name, 1, MAX_TOKENS)
        if self.background == "fixed" and (self.prompt_tokens is None or self.generated_tokens is None):
            raise InvalidInputError("fixed lengths need `prompt_tokens` and `generated_tokens`", field="background")

    def per_replica(self, dp: int) -> Any:
        """The workload one of ``dp`` replicas serves (:class:`llmco2.serving.workload.Workload`)."""
        from llmco2.serving.workload import make_workload

        share = dict(rate=self.rate / dp) if self.rate is not None else dict(concurrency=math.ceil(self.concurrency / dp))
        return make_workload(self.background, n=self.serving_requests, prompt_tokens=self.prompt_tokens,
                             output_tokens=self.generated_tokens, seed=self.seed, **share)


@dataclass(frozen=True)
class Slo:
    """Latency targets (s) at a percentile of requests (``None``: no target)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float = 90.0


def check_targets(max_gpus: Any, slo_ttft_s: Any, slo_tpot_s: Any, slo_percentile: Any) -> None:
    """``max_gpus`` a whole number from 1 to 64, the latency targets ``None`` or positive seconds,
    the percentile a number between 0 and 100 (one line naming the parameter otherwise)."""
    whole_number(max_gpus, "max_gpus", 1, 64)
    for name, target in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if target is not None:
            finite_number(target, name, above=True, what="a positive number of seconds, or None for no target")
    if not (isinstance(slo_percentile, numbers.Real) and not isinstance(slo_percentile, (bool, np.bool_))
            and 0 < slo_percentile < 100):
        raise InvalidInputError(f"must be a number between 0 and 100, got {slo_percentile!r}", field="slo_percentile")


def _quarter_growth(frame: pd.DataFrame) -> bool:
    """Whether the server keeps up: late arrivals wait no longer than early ones (see :data:`QUEUE_GROWTH`)."""
    ttft = frame.sort_values("arrival_s")["ttft_s"].to_numpy()
    q = len(ttft) // 4
    if q < 2:
        return True
    return float(np.median(ttft[-q:])) <= QUEUE_GROWTH * float(np.median(ttft[q:2 * q])) + QUEUE_SLACK_S


def serve_option(arch: ModelArch, option: ServerOption, load: Load, options: RequestOptions,
                 assumptions: Assumptions) -> ServingResult:
    """Simulate what one option's row is computed from: one replica (``option.tp`` GPUs) at its
    share of the load, or, with expert parallelism, the whole ``option.ep``-GPU server at the whole
    load (:func:`llmco2.serving.api.serve` with ``tp`` and ``ep``)."""
    from llmco2.serving.api import serve

    ep = option.ep if option.ep > 1 else None
    return serve(arch, option.gpu, load.per_replica(option.copies), num_gpus=option.simulated_gpus, tp=option.tp, ep=ep,
                 engine=options.engine, dtype=options.dtype, region=assumptions.region,
                 carbon_intensity=assumptions.carbon_intensity, pue=assumptions.pue_value(),
                 lifetime_years=assumptions.lifetime_years, scope=assumptions.scope, platform=assumptions.platform)


def option_row(option: ServerOption, result: ServingResult, load: Load, slo: Slo) -> dict[str, Any]:
    """One row of the comparison from the simulated replica (or expert-parallel server): power is
    the whole configuration's (W), the rest per output token or per request."""
    from llmco2.serving.physics_params import fit_has_seen

    s, frame = result.summary, result.requests
    j, g = s["j_per_output_token"], s["g_per_output_token"]
    interval = s.get("j_per_output_token_interval") or [float("nan"), float("nan")]
    pct = slo.percentile / 100.0
    ttft = float(np.quantile(frame["ttft_s"], pct))
    tpot_values = frame["tpot_s"].dropna()
    tpot = float(np.quantile(tpot_values, pct)) if len(tpot_values) else float("nan")
    stable = load.concurrency is not None or _quarter_growth(frame)
    meets = stable and (slo.ttft_s is None or ttft <= slo.ttft_s) and (slo.tpot_s is None or tpot <= slo.tpot_s)
    model = result.assumptions["server"]["model"]
    return {
        "gpu": option.gpu.id, "num_gpus": option.num_gpus, "tensor_parallel": option.tp, "replicas": option.dp,
        "expert_parallel": option.ep,
        "g_per_output_token": g, "g_per_output_token_low": g * interval[0] / j, "g_per_output_token_high": g * interval[1] / j,
        "j_per_output_token": j, "j_per_output_token_low": interval[0], "j_per_output_token_high": interval[1],
        "power_w": s["average_power_w"] * option.copies, "server_j_per_output_token": s.get("server_j_per_output_token"),
        "server_power_w": s["server_average_power_w"] * option.copies if s.get("server_average_power_w") is not None else None,
        "scope": s.get("scope", "gpu"), "platform": s.get("platform"),
        "gpu_utilisation": s["gpu_utilisation"], "mean_batch": s["mean_batch"],
        f"ttft_p{slo.percentile:g}_s": ttft, f"tpot_p{slo.percentile:g}_s": tpot,
        "stable": bool(stable), "meets_slo": bool(meets),
        "extrapolated": not fit_has_seen(option.gpu.id, model, result.assumptions["server"]["engine"]), "label": option.label,
    }


def rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in order of carbon per output token, those that meet the SLOs (and keep up) first;
    ``rank`` from 1, and ``tied_with_best``: the interval overlaps the best option's."""
    out = frame.sort_values(["meets_slo", "g_per_output_token"], ascending=[False, True]).reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    best_high = out["g_per_output_token_high"].iloc[0]
    out["tied_with_best"] = (out["g_per_output_token_low"] <= best_high) & (out["rank"] > 1) & out["meets_slo"]
    return out


def verdict(table: pd.DataFrame) -> str:
    """One sentence: the best option, and whether the next ones can be told apart from it."""
    if not len(table) or not bool(table["meets_slo"].iloc[0]):
        return "no option meets the latency targets and keeps up with the load"
    best = table.iloc[0]
    tied = table.loc[table["tied_with_best"], "label"].tolist()
    what = f"best: {best['label']} at {best['g_per_output_token']:.4g} g CO2eq per output token"
    if not tied:
        return what + "; its interval overlaps no other option's, so it is best"
    more = f" and {len(tied) - 3} more" if len(tied) > 3 else ""
    return what + f"; cannot be told apart from {', '.join(tied[:3])}{more} (overlapping 10-90% intervals)"


def compare(model: str | ModelArch, gpus: str | Sequence[str] = "datacentre", *, rate: float | None = None,
            concurrency: int | None = None, background: str = "conv", prompt_tokens: int | None = None,
            generated_tokens: int | None = None, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
            slo_percentile: float = 90.0, max_gpus: int = 8, serving_requests: int = DEFAULT_REQUESTS, seed: int = 0,
            expert_parallel: str | int = "auto", tp: int | None = None, dp: int | None = None,
            options: RequestOptions | None = None, assumptions: Assumptions | None = None,
            progress: Callable[[int], None] | None = None, **fields: Any) -> pd.DataFrame:
    """Rank every server configuration of ``gpus`` that holds ``model`` at one load.

    Args:
        model: catalog id or HF ``config.json`` path.
        gpus: ``datacentre``, ``all`` or GPU ids.
        rate, concurrency: the load (exactly one): requests/s, or clients in a closed loop.
        background, prompt_tokens, generated_tokens: request lengths (``conv``/``code`` Azure
            traces, or ``fixed`` with both lengths).
        slo_ttft_s, slo_tpot_s, slo_percentile: latency targets (s) at a percentile of requests.
        max_gpus: most GPUs per configuration (1, 2, 4, 8 are tried).
        serving_requests, seed: requests simulated per replica (per expert-parallel server), and the
            seed of lengths and arrivals.
        expert_parallel: ``auto`` (default): for a mixture-of-experts model, each split also with
            expert parallelism across its replicas (``ep`` = the GPU count) where the layout is
            valid; nothing more for a dense model. ``off``: no expert parallelism; ``only``: the
            expert-parallel layouts alone (a dense model is refused). A number N keeps the rows whose
            ``expert_parallel`` is N (1: as ``off``; N > 1 is refused for a dense model).
        tp, dp: keep only the configurations of this tensor-parallel degree / this many data-parallel
            replicas (``replicas``; with expert parallelism, the attention groups); ``None``: any.
            With ``expert_parallel`` N they combine (``tp=2, dp=2``: the 4-GPU tp 2 x dp 2 options);
            a GPU type they leave nothing of gets a ``left_out`` line saying why, and degrees that
            leave no configuration of any GPU type are refused.
        options, assumptions, fields: engine and precision; region, intensity, PUE, lifetime (as
            for :func:`llmco2.predict`). The default precision is bf16.
        progress: called with 1 after each configuration.

    Returns:
        One row per configuration, best first (the columns of ``llmco2 compare --json``;
        ``expert_parallel`` is 1 on rows without expert parallelism);
        ``table.attrs`` holds ``verdict``, ``left_out`` and ``assumptions``.
    """
    import pandas as pd

    from llmco2.specs import get_model

    if progress is not None and not callable(progress):
        raise InvalidInputError(f"must be a function called with 1 after each configuration, or None, got "
                                f"{type(progress).__name__}", field="progress")
    opts, assume = with_fields(options or RequestOptions(dtype="bf16"), assumptions, fields)
    load = Load(rate=rate, concurrency=concurrency, background=background, prompt_tokens=prompt_tokens,
                generated_tokens=generated_tokens, serving_requests=serving_requests, seed=seed)
    load.check()
    check_targets(max_gpus, slo_ttft_s, slo_tpot_s, slo_percentile)
    arch = get_model(model, approximate=opts.approximate)
    probe = load.per_replica(1)
    longest = int((probe.prompt_tokens + probe.output_tokens).max())
    ids = gpu_ids(gpus)
    found, left = server_options(arch, ids, max_gpus, opts, longest, expert_parallel, tp=tp, dp=dp)
    if not found:
        refuse_empty_restriction(arch, ids, max_gpus, opts, longest, expert_parallel, tp, dp, left)
        raise InvalidInputError(f"{arch.id} fits no configuration of up to {max_gpus} GPUs of {gpus} ({'; '.join(left)})",
                                field="gpus")
    rows, last = [], None
    for option in found:
        last = serve_option(arch, option, load, opts, assume)
        rows.append(option_row(option, last, load, Slo(slo_ttft_s, slo_tpot_s, slo_percentile)))
        if progress is not None:
            progress(1)
    table = rank(pd.DataFrame(rows))
    table.attrs.update(verdict=verdict(table), left_out=left, model=arch.id,
                       assumptions={k: v for k, v in last.assumptions.items() if k not in ("server",)} if last else {})
    return table
