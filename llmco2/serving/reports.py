"""Capacity-planning views of the serving simulator: J per output token against load for a few
GPUs and engines, and the footprint of a whole Azure trace served at a load."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmco2.errors import InvalidInputError
from llmco2.serving.api import ServingResult, serve, server_setup
from llmco2.serving.costs import GridCostModel, idle_power_w
from llmco2.serving.workload import Workload, make_workload, trace_lengths

log = logging.getLogger(__name__)
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def parse_servers(text: str) -> list[tuple[str, int]]:
    """``"h100,a100-80gb:2"`` -> [("h100", 1), ("a100-80gb", 2)] (GPU id, optionally ``:count``)."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        gpu, _, count = part.partition(":")
        try:
            n = int(count) if count else 1
        except ValueError:
            raise InvalidInputError(f"{part!r}: expected GPU or GPU:COUNT (e.g. h100:2)", field="sweep_gpus") from None
        if n < 1:
            raise InvalidInputError(f"{part!r}: the GPU count must be >= 1", field="sweep_gpus")
        out.append((gpu, n))
    if not out:
        raise InvalidInputError("name at least one GPU (e.g. h100,a100-80gb:2)", field="sweep_gpus")
    return out


def load_sweep(model: str, servers: list[tuple[str, int]], engines: list[str], trace: str = "conv",
               concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY, n: int = 1000, seed: int = 0, dtype: str = "bf16",
               predictor: Any = None, progress: Any = None, calibration: Any = None, **carbon: Any) -> pd.DataFrame:
    """J per output token, latency and power of ``n`` trace requests at each closed-loop concurrency,
    for every (GPU, count) x engine. Servers whose weights do not fit are skipped with a warning."""
    prompt, output, _ = trace_lengths(trace, n, seed)
    rows = []
    for gpu, count in servers:
        for engine in engines:
            try:
                arch, dev, req = server_setup(model, gpu, count, None, engine, dtype)
                cost = GridCostModel.from_predictor(arch, dev, req, predictor, idle_w=idle_power_w(dev, count)[0])
            except InvalidInputError as exc:
                log.warning("skipping %d x %s with %s: %s", count, gpu, engine, exc)
                continue
            for c in concurrency:
                try:
                    r = serve(model, gpu, Workload(prompt, output, None, int(c)), num_gpus=count, engine=engine, dtype=dtype,
                              cost=cost, calibration=calibration, **carbon)
                except InvalidInputError as exc:
                    log.warning("skipping %d x %s with %s: %s", count, gpu, engine, exc)
                    break
                s = r.summary
                rows.append({"gpu": dev.id, "num_gpus": count, "engine": req.engine, "concurrency": int(c),
                             "j_per_output_token": s["j_per_output_token"], "g_per_output_token": s["g_per_output_token"],
                             "mean_batch": s["mean_batch"], "tpot_p50_s": s["tpot_s"]["p50"], "ttft_p50_s": s["ttft_s"]["p50"],
                             "gpu_utilisation": s["gpu_utilisation"], "average_power_w": s["average_power_w"],
                             "throughput_tok_s": s["output_tokens"] / s["makespan_s"]})
                if progress is not None:
                    progress(1)
    if not rows:
        raise InvalidInputError(f"none of the servers can hold {model}; add GPUs (e.g. h100:2)", field="sweep_gpus")
    return pd.DataFrame(rows)


def plot_load_sweep(frame: pd.DataFrame, out: Path, title: str) -> Path:
    """J per output token (log) against concurrency (log): one line per GPU x engine; TPOT on the right panel."""
    from llmco2.carbon.reports import lazy_pyplot, save

    plt = lazy_pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
    servers = list(dict.fromkeys(zip(frame["gpu"], frame["num_gpus"], strict=True)))
    engines = list(dict.fromkeys(frame["engine"]))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ("-", "--", ":", "-.")
    for (gpu, count, engine), g in frame.groupby(["gpu", "num_gpus", "engine"], sort=True):
        label = f"{count} x {gpu}, {engine}"
        look = {"color": colors[servers.index((gpu, count)) % len(colors)], "ls": styles[engines.index(engine) % len(styles)],
                "marker": "o", "ms": 3, "label": label}
        ax.plot(g["concurrency"], g["j_per_output_token"], **look)
        ax2.plot(g["concurrency"], 1000 * g["tpot_p50_s"], **look)
    ax.set(xscale="log", yscale="log", xlabel="concurrent requests (closed loop)", ylabel="J per output token",
           title="energy per output token")
    ax2.set(xscale="log", yscale="log", xlabel="concurrent requests (closed loop)", ylabel="median time per output token (ms)",
            title="latency")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save(fig, out)


def trace_served(trace: str, model: str, gpu: str, num_gpus: int = 1, engine: str = "vllm", rate: float | None = None,
                 concurrency: int | None = None, seed: int = 0, dtype: str = "bf16", predictor: Any = None,
                 calibration: Any = None, **carbon: Any) -> ServingResult:
    """The whole Azure ``trace`` served at a Poisson ``rate``, a closed-loop ``concurrency``, or (neither)
    its own timestamps."""
    w = make_workload(trace, rate=rate, concurrency=concurrency, timestamps=rate is None and concurrency is None, seed=seed)
    return serve(model, gpu, w, num_gpus=num_gpus, engine=engine, dtype=dtype, predictor=predictor, calibration=calibration,
                 **carbon)


def served_summary(result: ServingResult) -> dict[str, Any]:
    """JSON-ready summary of a served trace: aggregates, carbon (kg) and the server."""
    s = dict(result.summary)
    s["carbon_kg"] = {"operational": s["operational_g"] / 1000.0,
                      "embodied": None if s["embodied_g"] is None else s["embodied_g"] / 1000.0,
                      "total": float(result.requests["total_g"].sum()) / 1000.0}
    s["energy_kwh"] = s["energy_j"] / 3.6e6
    s["server"] = result.assumptions["server"]
    s["workload"] = result.assumptions["workload"]
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in s.items()}
