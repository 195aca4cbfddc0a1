"""Reports: the paper's case studies (Figures 9-11), the carbon of a whole Azure trace, and which
GPU type and count emits least for a request. Each returns a DataFrame; ``plot_*`` draws it.

Assumption for the training reference of Figure 9 (no training predictor exists): a training GPU
draws its TDP (LLMCarbon's assumption), so training carbon per GPU-second is
``TDP x PUE x intensity`` plus the embodied share of one GPU-second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmco2.carbon.accounting import J_PER_KWH, SECONDS_PER_YEAR, device_embodied, operational_g
from llmco2.carbon.assumptions import resolve_assumptions
from llmco2.carbon.footprint import Footprint, predict_footprint
from llmco2.errors import InvalidInputError
from llmco2.prediction.phases import PhasePredictor
from llmco2.specs import GPU, ModelArch, Request, get_gpu, get_model, validate_request


def _items(arch: ModelArch, gpu: GPU, rows: list[dict[str, int]]) -> list[tuple[ModelArch, Request, GPU]]:
    items = []
    for r in rows:
        req = Request(batch_size=r["batch_size"], prompt_tokens=r["prompt_tokens"], generated_tokens=r["generated_tokens"],
                      num_gpus=r.get("num_gpus", 1))
        validate_request(req, arch, gpu, check_context=False)
        items.append((arch, req, gpu))
    return items


def _frame(items: list[tuple[ModelArch, Request, GPU]], fp: Footprint) -> pd.DataFrame:
    """One row per request: GPU energy (J), latency (s), carbon (g CO2eq, on the footprint's scope) and, when the
    footprint has a scope, ``server_j`` (J, wall), ``platform`` and ``scope``."""
    server = {} if fp.server is None else {
        "server_j": fp.server.total_j, "platform": [fp.server.platforms[int(c)].id for c in fp.server.platform],
        "scope": fp.scope}
    return pd.DataFrame({
        "model": [a.id for a, _, _ in items], "gpu": [g.id for _, _, g in items],
        "num_gpus": [r.num_gpus for _, r, _ in items], "batch_size": [r.batch_size for _, r, _ in items],
        "prompt_tokens": [r.prompt_tokens for _, r, _ in items], "generated_tokens": [r.generated_tokens for _, r, _ in items],
        "prefill_j": fp.prefill_j, "decode_j": fp.decode_j, "total_j": fp.total_j,
        "prefill_latency_s": fp.prefill_latency_s, "decode_latency_s": fp.decode_latency_s, "latency_s": fp.latency_s,
        "operational_g": fp.operational_g, "embodied_g": fp.embodied_g, "total_g": fp.total_g, **server,
    })


# -- Figure 9: carbon per GPU-second, training vs inference phases ---------------------------------
def carbon_per_gpu_second(model: str = "mixtral-8x7b", gpu: str = "a100-80gb", num_gpus: int = 4,
                          predictor: PhasePredictor | None = None, **assumptions: Any) -> pd.DataFrame:
    """g CO2eq per GPU-second (operational, embodied) of training and of prefill and decode of a
    few requests (paper Figure 9)."""
    arch, dev = get_model(model), get_gpu(gpu)
    rows = [dict(batch_size=b, prompt_tokens=p, generated_tokens=g, num_gpus=num_gpus)
            for b, p, g in ((1, 512, 128), (1, 2048, 256), (4, 1024, 256), (8, 512, 512))]
    items = _items(arch, dev, rows)
    fp = predict_footprint(items, predictor, **assumptions)
    a = fp.assumptions
    emb_dev = device_embodied(dev)
    emb_per_s = np.nan if emb_dev is None else emb_dev.total_kg * 1000 / (a["lifetime_years"] * SECONDS_PER_YEAR)
    out = [{"workload": "training (GPU at TDP)", "operational_g_per_gpu_s":
            float(operational_g(dev.tdp_w, a["pue"]["value"], a["grid"]["g_co2eq_per_kwh"])), "embodied_g_per_gpu_s": emb_per_s}]
    for i, r in enumerate(rows):
        for phase, e, t in (("prefill", fp.prefill_j[i], fp.prefill_latency_s[i]), ("decode", fp.decode_j[i], fp.decode_latency_s[i])):
            gpu_s = t * num_gpus
            op = float(operational_g(e, a["pue"]["value"], a["grid"]["g_co2eq_per_kwh"])) / gpu_s
            out.append({"workload": f"{phase} B={r['batch_size']} L={r['prompt_tokens']} G={r['generated_tokens']}",
                        "operational_g_per_gpu_s": op, "embodied_g_per_gpu_s": emb_per_s})
    return pd.DataFrame(out)


# -- Figures 10 and 11: Bloom-7b1 over GPU counts, batch and prompt sizes ---------------------------
def scaling_study(model: str = "bloom-7b1", gpu: str = "a100-80gb", gpu_counts: tuple[int, ...] = (1, 2, 4),
                  batch_sizes: tuple[int, ...] = (1, 4, 16), prompt_tokens: tuple[int, ...] = (128, 512, 1024),
                  generated_tokens: int = 128, predictor: PhasePredictor | None = None, **assumptions: Any) -> pd.DataFrame:
    """Operational carbon per GPU and total carbon of one request over GPU counts, batch sizes and
    prompt lengths (paper Figures 10 and 11)."""
    arch, dev = get_model(model), get_gpu(gpu)
    rows = [dict(batch_size=b, prompt_tokens=p, generated_tokens=generated_tokens, num_gpus=n)
            for n in gpu_counts for b in batch_sizes for p in prompt_tokens]
    items = _items(arch, dev, rows)
    frame = _frame(items, predict_footprint(items, predictor, **assumptions))
    frame["operational_g_per_gpu"] = frame["operational_g"] / frame["num_gpus"]
    return frame


# -- a whole trace ---------------------------------------------------------------------------------
def trace_footprint(trace: str = "conv", model: str = "llama3.1-8b", gpu: str = "a100-80gb", num_gpus: int = 1,
                    batch_size: int = 1, predictor: PhasePredictor | None = None, **assumptions: Any) -> tuple[pd.DataFrame, Footprint]:
    """Footprint of every request of an Azure trace served by ``model`` on ``num_gpus`` x ``gpu``;
    requests beyond the model's context are truncated to it (prompt first)."""
    from llmco2.data.azure import load_trace

    arch, dev = get_model(model), get_gpu(gpu)
    t = load_trace(trace)
    gen = np.clip(t["generated_tokens"].to_numpy(), 1, None)
    prompt = np.clip(t["prompt_tokens"].to_numpy(), 1, None)
    over = prompt + gen > arch.max_context
    prompt = np.where(over, np.maximum(arch.max_context - gen, 1), prompt)
    gen = np.where(prompt + gen > arch.max_context, arch.max_context - prompt, gen)
    req0 = Request(batch_size=batch_size, prompt_tokens=1, generated_tokens=1, num_gpus=num_gpus)
    validate_request(req0, arch, dev, check_context=False)
    items = [(arch, req0.replace(prompt_tokens=int(p), generated_tokens=int(g)), dev) for p, g in zip(prompt, gen, strict=True)]
    fp = predict_footprint(items, predictor, **assumptions)
    frame = _frame(items, fp)
    frame["truncated"] = over
    return frame, fp


def trace_intensities(trace: str, hourly: Any, region: str | None = None) -> np.ndarray:
    """The intensity (g CO2eq/kWh) of the hour of every request of an Azure trace; requests
    outside the file's hours raise one error with their count and the first (its trace line)."""
    from llmco2.carbon.hourly import intensity_for
    from llmco2.data.azure import load_trace, trace_path

    stamps = load_trace(trace)["timestamp"]
    lines = 2 + np.arange(len(stamps), dtype=np.int64)
    return intensity_for(hourly, stamps, None, region, lines, str(trace_path(trace)))


def hourly_trace(frame: pd.DataFrame, fp: Footprint, trace: str, intensity: Any, region: str | None = None
                 ) -> tuple[pd.DataFrame, Footprint]:
    """``frame`` and ``fp`` of :func:`trace_footprint` with each request's operational carbon at
    the hour of its timestamp (``intensity``: an hourly intensity file or frame, see
    :mod:`llmco2.carbon.hourly`; ``region`` picks one of its regions). Adds ``timestamp``,
    ``hour`` (its start, UTC) and ``g_co2eq_per_kwh`` columns."""
    from llmco2.carbon.footprint import with_hourly_carbon
    from llmco2.carbon.hourly import HourlyIntensity, load_intensity
    from llmco2.carbon.timestamps import hours_of, parse_seconds
    from llmco2.data.azure import load_trace

    hourly = intensity if isinstance(intensity, HourlyIntensity) else load_intensity(intensity)
    stamps = load_trace(trace)["timestamp"]
    g = trace_intensities(trace, hourly, region)
    fp = with_hourly_carbon(fp, g)
    name = region if len(hourly.regions) > 1 else (hourly.regions[0] or region)
    fp.assumptions["grid"] = hourly.grid(g, region=name)
    out = frame.copy()
    out["timestamp"] = stamps.to_numpy()
    out["hour"] = pd.to_datetime(hours_of(parse_seconds(stamps)) * 3600, unit="s")
    out["g_co2eq_per_kwh"] = g
    out["operational_g"] = fp.operational_g
    out["total_g"] = fp.total_g
    return out, fp


def trace_summary(frame: pd.DataFrame, assumptions: dict[str, Any]) -> dict[str, Any]:
    """Totals of a trace: energy by phase (kWh), carbon operational/embodied (kg CO2eq), per
    request (g); with an hourly intensity (a ``g_co2eq_per_kwh`` column), also per hour."""
    # each request's operational carbon (on the scope of the assumptions) split over its phases as its GPU energy is
    prefill_share = (frame["prefill_j"] / frame["total_j"].where(frame["total_j"] > 0)).fillna(0.0)
    per_hour = {}
    if "hour" in frame:
        groups = frame.groupby("hour", sort=True)
        per_hour = {"per_hour": [{"hour": h.strftime("%Y-%m-%dT%H:%MZ"), "requests": int(len(part)),
                                  "g_co2eq_per_kwh": float(part["g_co2eq_per_kwh"].iloc[0]),
                                  "energy_kwh": float(part["total_j"].sum()) / J_PER_KWH,
                                  "carbon_kg": float(part["total_g"].sum()) / 1000} for h, part in groups]}
    return {
        "requests": int(len(frame)), "truncated": int(frame["truncated"].sum()),
        "energy_kwh": {"prefill": frame["prefill_j"].sum() / J_PER_KWH, "decode": frame["decode_j"].sum() / J_PER_KWH},
        "carbon_kg": {"operational_prefill": float((frame["operational_g"] * prefill_share).sum()) / 1000,
                      "operational_decode": float((frame["operational_g"] * (1.0 - prefill_share)).sum()) / 1000,
                      "embodied": float(np.nansum(frame["embodied_g"])) / 1000,
                      "total": float(frame["total_g"].sum()) / 1000},
        "per_request_g": float(frame["total_g"].mean()),
        "assumptions": assumptions,
        **per_hour,
    }


# -- which GPU emits least ---------------------------------------------------------------------------
#: The data-centre GPUs compared by default. Left out: devices without an fp16 peak (gaudi2, gaudi3), those
#: without a published die area (mi250x, mi300x), whose unknown embodied carbon would count as zero, and PCIe
#: cards whose NVLink bridge joins only pairs (a30, a40, h100-pcie, h100-nvl), since the catalog's bridge figure
#: would be applied to groups of up to a whole node.
COMPARE_GPUS = ("t4", "l4", "a10", "l40", "l40s", "v100", "a100-40gb", "a100-80gb", "h100-sxm", "h20", "h200", "b200")


def compare_hardware(model: str, batch_size: int, prompt_tokens: int, generated_tokens: int,
                     gpus: tuple[str, ...] = COMPARE_GPUS,
                     gpu_counts: tuple[int, ...] = (1, 2, 4, 8), predictor: PhasePredictor | None = None,
                     **assumptions: Any) -> pd.DataFrame:
    """Every GPU type and count that can hold the request, sorted by total carbon."""
    from llmco2.analytic.layer import LayerBatch, analyze_layers
    from llmco2.analytic.model import model_totals

    arch = get_model(model)
    items = []
    for gid in gpus:
        dev = get_gpu(gid)
        for n in gpu_counts:
            req = Request(batch_size=batch_size, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens, num_gpus=n)
            try:
                validate_request(req, arch, dev)
            except InvalidInputError:
                continue
            items.append((arch, req, dev))
    if not items:
        raise InvalidInputError(f"no GPU of {', '.join(gpus)} can run this request", field="gpus")
    fits = model_totals(analyze_layers(LayerBatch.from_items(items, validate=False))).fits_in_memory
    items = [it for it, ok in zip(items, fits, strict=True) if ok]
    if not items:
        raise InvalidInputError(f"{arch.id} does not fit on up to {max(gpu_counts)} of {', '.join(gpus)}", field="gpus")
    frame = _frame(items, predict_footprint(items, predictor, **assumptions))
    return frame.sort_values("total_g").reset_index(drop=True)


# -- plots ---------------------------------------------------------------------------------------------
def lazy_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    lazy_pyplot().close(fig)
    return out


def plot_case_studies(fig9: pd.DataFrame, scaling: pd.DataFrame, out_dir: Path, title_suffix: str = "") -> list[Path]:
    """Figures 9, 10 and 11 as three PNGs in ``out_dir``."""
    plt = lazy_pyplot()
    paths = []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(fig9))
    ax.bar(x, fig9["operational_g_per_gpu_s"], label="operational")
    ax.bar(x, fig9["embodied_g_per_gpu_s"].fillna(0), bottom=fig9["operational_g_per_gpu_s"], label="embodied")
    ax.set_xticks(x, fig9["workload"], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("g CO2eq per GPU-second")
    ax.set_title(f"Carbon per GPU-second: training vs inference phases{title_suffix}")
    ax.legend()
    paths.append(save(fig, out_dir / "fig9_carbon_per_gpu_second.png"))
    for metric, name, label in (("operational_g_per_gpu", "fig10_operational_per_gpu.png", "operational g CO2eq per GPU"),
                                ("total_g", "fig11_total_carbon.png", "total g CO2eq (operational + embodied)")):
        batches = sorted(scaling["batch_size"].unique())
        fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 4), sharey=True, squeeze=False)
        for ax, b in zip(axes[0], batches, strict=True):
            sub = scaling[scaling["batch_size"] == b]
            prompts = sorted(sub["prompt_tokens"].unique())
            counts = sorted(sub["num_gpus"].unique())
            width = 0.8 / len(counts)
            for j, n in enumerate(counts):
                vals = [float(sub[(sub["num_gpus"] == n) & (sub["prompt_tokens"] == p)][metric].iloc[0]) for p in prompts]
                ax.bar(np.arange(len(prompts)) + j * width, vals, width, label=f"{n} GPU{'s' if n > 1 else ''}")
            ax.set_xticks(np.arange(len(prompts)) + width * (len(counts) - 1) / 2, [str(p) for p in prompts])
            ax.set_xlabel("prompt tokens")
            ax.set_title(f"batch {b}")
        axes[0][0].set_ylabel(label)
        axes[0][0].legend()
        fig.suptitle(f"{scaling['model'].iloc[0]} on {scaling['gpu'].iloc[0]}, {int(scaling['generated_tokens'].iloc[0])} "
                     f"generated tokens{title_suffix}")
        paths.append(save(fig, out_dir / name))
    return paths


def plot_trace(summary: dict[str, Any], frame: pd.DataFrame, out: Path, title: str) -> Path:
    plt = lazy_pyplot()
    hourly = "per_hour" in summary
    fig, axes = plt.subplots(1, 3 if hourly else 2, figsize=(16.5 if hourly else 11, 4.2))
    a, b = axes[0], axes[1]
    if hourly:
        _plot_hours(axes[2], summary["per_hour"])
    c = summary["carbon_kg"]
    parts = {"prefill (operational)": c["operational_prefill"], "decode (operational)": c["operational_decode"],
             "embodied": c["embodied"]}
    a.bar(list(parts), list(parts.values()), color=["tab:blue", "tab:orange", "tab:gray"])
    a.set_ylabel("kg CO2eq")
    a.set_title(f"{summary['requests']:,} requests: {c['total']:.3g} kg CO2eq in all")
    a.tick_params(axis="x", labelsize=8)
    b.hist(frame["total_g"], bins=np.geomspace(max(frame["total_g"].min(), 1e-6), frame["total_g"].max(), 50))
    b.set_xscale("log")
    b.set_xlabel("g CO2eq per request")
    b.set_ylabel("requests")
    b.set_title(f"median {frame['total_g'].median():.3g} g per request")
    fig.suptitle(title)
    return save(fig, out)


def _plot_hours(ax: Any, hours: list[dict[str, Any]]) -> None:
    """Carbon per hour (bars, kg CO2eq) beside the load (requests per hour, line)."""
    x = np.arange(len(hours))
    ax.bar(x, [h["carbon_kg"] for h in hours], color="tab:green", label="carbon")
    ax.set_xticks(x, [f"{h['hour'][5:10]} {h['hour'][11:16]}\n{h['g_co2eq_per_kwh']:.0f} g/kWh" for h in hours], fontsize=7)
    ax.set_ylabel("kg CO2eq per hour")
    ax.set_title("carbon per hour (UTC) and load")
    load = ax.twinx()
    load.plot(x, [h["requests"] for h in hours], color="black", marker="o", label="requests")
    load.set_ylabel("requests per hour")
    load.set_ylim(bottom=0)


def plot_compare(frame: pd.DataFrame, out: Path, title: str) -> Path:
    plt = lazy_pyplot()
    fig, ax = plt.subplots(figsize=(9, max(3, 0.32 * len(frame))))
    labels = [f"{g} x{n}" for g, n in zip(frame["gpu"], frame["num_gpus"], strict=True)]
    y = np.arange(len(frame))[::-1]
    ax.barh(y, frame["operational_g"], label="operational")
    ax.barh(y, frame["embodied_g"].fillna(0), left=frame["operational_g"], label="embodied")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("g CO2eq per request")
    ax.set_title(title)
    ax.legend()
    return save(fig, out)


def default_assumptions(gpus: list[GPU], **kw: Any) -> dict[str, Any]:
    """The assumptions a report will use (for titles)."""
    return resolve_assumptions(gpus, **kw)
