"""One request inside a continuously batched server (``llmco2 predict ... --serving``).

The server (model, GPU type and count, engine, dtype) runs background traffic (lengths from an
Azure trace, default ``conv``, or the request's own lengths with ``background="fixed"``) at the
given load; the request (``batch_size`` copies of it) arrives in the middle of that traffic, and
its share of every iteration it took part in is its energy. The record is that of
``llmco2 predict --json`` (energy, latency, carbon) plus the server's aggregates under ``serving``.

Example:
    >>> from llmco2.api.server import ServedRequest, ServerLoad, serve_request
    >>> r = serve_request(ServedRequest("llama3.1-8b", "h100", prompt_tokens=500, generated_tokens=100),
    ...                   ServerLoad(concurrency=8, serving_requests=50))
    >>> r["serving"]["load"]["concurrency"], r["energy_j"]["total"] > 0
    (8, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llmco2.api.options import Assumptions, RequestOptions
from llmco2.errors import InvalidInputError
from llmco2.specs.limits import MAX_SIMULATED_REQUESTS, REQUEST_LIMITS, whole_number

if TYPE_CHECKING:
    from llmco2.specs import GPU, ModelArch

BACKGROUNDS = ("conv", "code", "fixed")


@dataclass(frozen=True)
class ServedRequest:
    """The request and the server it runs on: ``batch_size`` copies of (``prompt_tokens``,
    ``generated_tokens``) on ``gpus`` x ``gpu`` serving ``model``: ``dp`` data-parallel replicas
    (engine instances, each with the whole model on ``gpus / dp`` GPUs, tensor-parallel degree
    ``tp`` and expert-parallel degree ``ep``: :class:`~llmco2.specs.Request`) that share the load
    evenly; the request runs on one of them. Replicas do not share experts: vLLM's
    ``--data-parallel-size D --enable-expert-parallel`` (experts spread over the D ranks) is one
    replica with ``ep = D x tp``."""

    model: str | ModelArch
    gpu: str | GPU
    prompt_tokens: int
    generated_tokens: int
    batch_size: int = 1
    gpus: int = 1
    tp: int | None = None
    dp: int = 1
    ep: int | None = None

    def __post_init__(self) -> None:
        """Each count a whole number in its range (a whole float or a NumPy integer is taken as an int);
        any other type, NaN or a fraction is refused naming the parameter."""
        for name, limit in (("prompt_tokens", "prompt_tokens"), ("generated_tokens", "generated_tokens"),
                            ("batch_size", "batch_size"), ("gpus", "num_gpus"), ("dp", "num_gpus")):
            object.__setattr__(self, name, whole_number(getattr(self, name), name, 1, REQUEST_LIMITS[limit]))
        for name, limit in (("tp", "tensor_parallel"), ("ep", "expert_parallel")):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, whole_number(getattr(self, name), name, 1, REQUEST_LIMITS[limit]))

    @property
    def replica_gpus(self) -> int:
        """GPUs of one replica."""
        return self.gpus // self.dp


@dataclass(frozen=True)
class ServerLoad:
    """The server's load and limits.

    Attributes:
        concurrency: closed loop, requests in the server at once; or
        rate: open loop, Poisson arrivals (requests/s). Exactly one of the two.
        background: lengths of the other requests: ``conv`` or ``code`` (Azure traces) or ``fixed``
            (the request's own).
        serving_requests: background requests simulated.
        max_batch, max_batched_tokens, chunked_prefill: the scheduler's limits (vLLM's defaults).
        seed: seed of the background lengths and arrivals.
        calibration: with a checkpoint as the cost model, apply the shipped correction.
    """

    concurrency: int | None = None
    rate: float | None = None
    background: str = "conv"
    serving_requests: int = 2000
    max_batch: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    seed: int = 0
    calibration: bool = True

    def __post_init__(self) -> None:
        """Each number of its type and in its range (whole floats and NumPy numbers are numbers),
        ``background`` a text and the switches booleans; else refused naming the parameter.
        Whether exactly one load is given is :func:`check_load`'s."""
        if self.concurrency is not None:
            object.__setattr__(self, "concurrency", whole_number(self.concurrency, "concurrency", 1))
        if self.rate is not None:
            from llmco2.serving.workload import check_rate  # not at start-up: llmco2 --help stays light

            object.__setattr__(self, "rate", check_rate(self.rate))  # one a day at least
        if not isinstance(self.background, str) or self.background not in BACKGROUNDS:
            raise InvalidInputError(f"must be one of {', '.join(BACKGROUNDS)}, got {self.background!r}", field="background")
        n = whole_number(self.serving_requests, "serving_requests", 1)
        if n > MAX_SIMULATED_REQUESTS:
            raise InvalidInputError(f"must be from 1 to {MAX_SIMULATED_REQUESTS:,} requests, got {n:,}", field="serving_requests")
        object.__setattr__(self, "serving_requests", n)
        for name in ("max_batch", "max_batched_tokens"):
            object.__setattr__(self, name, whole_number(getattr(self, name), name, 1))
        object.__setattr__(self, "seed", whole_number(self.seed, "seed", 0))
        for name in ("chunked_prefill", "calibration"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise InvalidInputError(f"must be True or False, got {value!r}", field=name)
            object.__setattr__(self, name, bool(value))


def check_load(request: ServedRequest, load: ServerLoad) -> None:
    """The load and request a served prediction needs (one line naming the parameter when not)."""
    if not isinstance(request, ServedRequest):
        raise InvalidInputError(f"must be a ServedRequest, got {type(request).__name__}", field="request")
    if not isinstance(load, ServerLoad):
        raise InvalidInputError(f"must be a ServerLoad, got {type(load).__name__}", field="load")
    if (load.concurrency is None) == (load.rate is None):
        raise InvalidInputError("give exactly one load: `concurrency=N` or `rate=R`", field="serving")
    if request.gpus % request.dp:
        raise InvalidInputError(f"the {request.dp} data-parallel replicas must share the {request.gpus} GPUs evenly "
                                "(GPUs = replicas x GPUs per replica)", field="dp")
    if load.concurrency is not None and load.concurrency < request.dp:
        raise InvalidInputError(f"a closed loop of {load.concurrency} cannot keep {request.dp} replicas busy; give at least "
                                "one request per replica", field="concurrency")


def serving_workload(request: ServedRequest, load: ServerLoad) -> tuple[Any, np.ndarray]:
    """Background traffic with the request's copies inserted halfway; (workload, indices of the copies)."""
    import numpy as np

    from llmco2.serving.workload import Workload, poisson_arrivals, trace_lengths

    n, copies, dp = load.serving_requests, request.batch_size, request.dp
    if load.background == "fixed":
        prompt, output = np.full(n, request.prompt_tokens), np.full(n, request.generated_tokens)
    else:
        prompt, output, _ = trace_lengths(load.background, n, load.seed)
    at = n // 2
    prompt = np.insert(prompt, at, np.full(copies, request.prompt_tokens))
    output = np.insert(output, at, np.full(copies, request.generated_tokens))
    mine = np.arange(at, at + copies)
    of = f" (one of {dp} replicas)" if dp > 1 else ""
    if load.concurrency is not None:
        clients = -(-load.concurrency // dp)  # the replica's share of the closed loop, rounded up
        return Workload(prompt, output, None, clients, f"{load.background} background, closed loop of "
                                                       f"{clients}{of}"), mine
    assert load.rate is not None  # check_load
    arrivals = poisson_arrivals(len(prompt), load.rate / dp, load.seed)
    arrivals[mine] = arrivals[at]  # the copies arrive together
    return Workload(prompt, output, np.maximum.accumulate(arrivals), None,
                    f"{load.background} background, Poisson {load.rate / dp:g} req/s{of}"), mine


def serve_request(request: ServedRequest, load: ServerLoad, options: RequestOptions | None = None,
                  assumptions: Assumptions | None = None) -> dict[str, Any]:
    """The record of ``llmco2 predict --serving --json``: the request's energy (J), latency (s)
    and carbon (g CO2eq) inside the loaded server, and the server's aggregates."""
    from llmco2.prediction.loading import load_predictor
    from llmco2.serving.api import serve, server_setup

    opts, assume = options or RequestOptions(dtype="bf16"), assumptions or Assumptions()
    check_load(request, load)
    arch, _, _ = server_setup(request.model, request.gpu, request.replica_gpus, request.tp, opts.engine, opts.dtype,
                              request.ep)  # bad input first
    workload, mine = serving_workload(request, load)
    calibration = None
    if opts.checkpoint and load.calibration:
        from llmco2.serving.calibration import shipped_calibration

        calibration = shipped_calibration()  # applied only where it belongs to the given checkpoint
    result = serve(request.model, request.gpu, workload, num_gpus=request.replica_gpus, tp=request.tp, engine=opts.engine,
                   dtype=opts.dtype, max_batch=load.max_batch, max_batched_tokens=load.max_batched_tokens,
                   chunked_prefill=load.chunked_prefill,
                   predictor=load_predictor(opts.checkpoint) if opts.checkpoint else None, region=assume.region,
                   carbon_intensity=assume.carbon_intensity, pue=assume.pue_value(),
                   lifetime_years=assume.lifetime_years, calibration=calibration, scope=assume.scope,
                   platform=assume.platform, ep=request.ep)
    record = _record(request, load, result.requests.iloc[mine], result)
    e, c = record["energy_j"], record["carbon_g"]  # the flat keys of ``llmco2 predict --json`` too
    return {**record, "prefill": e["prefill"], "decode": e["decode"], "total": e["total"],
            "operational": c["operational"], "embodied": c["embodied"],
            "notes": list(arch.approximations)}  # what a config.json left to an assumption, as predict says


def _record(request: ServedRequest, load: ServerLoad, rows: Any, result: Any) -> dict[str, Any]:
    s = result.summary
    emb = rows["embodied_g"]
    ttft, e2e = float(rows["ttft_s"].max()), float(rows["e2e_s"].max())
    server = result.assumptions["server"]
    return {
        "model": server["model"], "gpu": server["gpu"], "num_gpus": server["num_gpus"] * request.dp, "engine": server["engine"],
        **({"tensor_parallel": server["tensor_parallel"], "expert_parallel": server["expert_parallel"]}
           if "expert_parallel" in server else {}),
        "batch_size": request.batch_size, "prompt_tokens": request.prompt_tokens,
        "generated_tokens": request.generated_tokens,
        "energy_j": {"prefill": float(rows["prefill_j"].sum()), "decode": float(rows["decode_j"].sum()),
                     "total": float(rows["energy_j"].sum())},
        "latency_s": {"prefill": ttft, "decode": e2e - ttft, "total": e2e, "ttft": ttft,
                      "tpot": None if request.generated_tokens < 2 else float(rows["tpot_s"].mean())},
        "carbon_g": {"operational": float(rows["operational_g"].sum()),
                     "embodied": None if emb.isna().any() else float(emb.sum()), "total": float(rows["total_g"].sum())},
        "server_energy_j": {"prefill": float(rows["server_prefill_j"].sum()), "decode": float(rows["server_decode_j"].sum()),
                            "total": float(rows["server_j"].sum())},
        "serving": {"load": {"concurrency": load.concurrency, "rate_per_s": load.rate},
                    "workload": result.assumptions["workload"],
                    **{k: s[k] for k in ("requests", "j_per_output_token", "j_per_output_token_interval", "gpu_utilisation", "average_power_w",
                                         "mean_batch", "makespan_s", "preemptions", "ttft_s", "tpot_s",
                                         "server_j_per_output_token", "server_average_power_w")},
                    **replicated(s, request.dp),
                    "limits": {k: server[k] for k in ("max_batch", "max_batched_tokens", "chunked_prefill",
                                                      "kv_capacity_tokens")},
                    "idle_w": server["idle_w"], "idle_source": server["idle_source"], "calibration": server["calibration"],
                    "cost_model": server["cost_model"], "interval": server["interval"]},
        "assumptions": {**{k: v for k, v in result.assumptions.items() if k not in ("server", "workload")},
                        "scope": served_scope(result.assumptions["scope"], rows)},
    }


def replicated(summary: dict[str, Any], dp: int) -> dict[str, Any]:
    """The entries of a served request's ``serving`` block that count the whole server when it has
    ``dp`` replicas: power (W) is ``dp`` times one replica's; ``requests`` and ``makespan_s`` stay
    those of the simulated replica."""
    if dp == 1:
        return {}
    return {"replicas": dp, "average_power_w": summary["average_power_w"] * dp,
            "server_average_power_w": summary["server_average_power_w"] * dp}


def served_scope(entry: dict[str, Any], rows: Any) -> dict[str, Any]:
    """The ``scope`` entry of a served request: the scope, the platform's figures and sources
    (:func:`llmco2.carbon.server_scope.platform_record`) and the request's host share: its share of the GPU slots,
    the load proxy over its attributed server time (energy-weighted over its copies), host energy and PSU losses (J)
    and non-GPU embodied carbon (g CO2eq). The host is charged for the server time the request's GPU energy is
    charged for (its share of each iteration, idle spells included: :func:`llmco2.serving.api.server_columns`)."""
    from llmco2.carbon.server_scope import platform_record
    from llmco2.specs.platforms import get_platform

    energy = rows["energy_j"].to_numpy()
    util = float((rows["utilisation"].to_numpy() * energy).sum() / energy.sum()) if energy.sum() > 0 else 0.0
    emb = rows["embodied_non_gpu_g"]
    return {**{k: v for k, v in entry.items() if k != "platforms"}, **platform_record(get_platform(str(rows["platform"].iloc[0]))),
            "gpu_slot_share": float(rows["host_share"].iloc[0]), "utilisation": util,
            "server_time_s": float(rows["gpu_s"].sum()), "host_energy_j": float(rows["host_j"].sum()),
            "psu_loss_j": float(rows["psu_loss_j"].sum()),
            "embodied_non_gpu_g": None if emb.isna().any() else float(emb.sum())}
