"""The figure of ``llmco2 compare``: each configuration on the plane of carbon per output token
against TPOT at the SLO percentile, with its 10-90% interval, the SLO line and the Pareto front
(configurations no other beats on both carbon and TPOT). Expert-parallel configurations of a
mixture-of-experts model are ringed (the best of them labelled). Needs the ``plots`` extra."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def pareto_front(carbon: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both coordinates (lower is better on each)."""
    order = np.lexsort((carbon, tpot))
    front = np.zeros(len(carbon), dtype=bool)
    best = np.inf
    for i in order:
        if carbon[i] < best:
            front[i] = True
            best = carbon[i]
    return front


def plot_comparison(table: pd.DataFrame, out: Path, title: str, slo_tpot_s: float | None = None) -> Path:
    """Write the figure of ``table`` (a :func:`llmco2.api.compare.compare` result) to ``out``."""
    from llmco2.carbon.reports import lazy_pyplot, save

    plt = lazy_pyplot()
    tpot_col = next(c for c in table.columns if c.startswith("tpot_p"))
    ok = table["meets_slo"].to_numpy(dtype=bool)
    x, g = table[tpot_col].to_numpy(dtype=float) * 1e3, table["g_per_output_token"].to_numpy(dtype=float) * 1e3
    low, high = table["g_per_output_token_low"].to_numpy(dtype=float) * 1e3, table["g_per_output_token_high"].to_numpy(dtype=float) * 1e3
    fig, ax = plt.subplots(figsize=(9, 6))
    err = np.vstack([np.nan_to_num(g - low), np.nan_to_num(high - g)])
    ax.errorbar(x[ok], g[ok], yerr=err[:, ok], fmt="o", color="tab:blue", ecolor="lightsteelblue", capsize=2,
                label="meets the targets and keeps up")
    if (~ok).any():
        ax.errorbar(x[~ok], g[~ok], yerr=err[:, ~ok], fmt="x", color="tab:gray", ecolor="lightgray", capsize=2,
                    label="misses a target or falls behind")
    front = pareto_front(g, x) & ok
    if front.any():
        idx = np.argsort(x[front])
        ax.plot(x[front][idx], g[front][idx], "-", color="tab:green", label="Pareto front")
    ep = table["expert_parallel"].to_numpy() > 1 if "expert_parallel" in table else np.zeros(len(table), dtype=bool)
    if ep.any():
        ax.scatter(x[ep], g[ep], marker="D", s=70, facecolors="none", edgecolors="tab:purple", zorder=3,
                   label="expert parallel (ep = GPUs)")
    first_ep = int(np.argmax(ep)) if ep.any() else -1  # the best-ranked expert-parallel option
    for i, (xi, gi, label, best) in enumerate(zip(x, g, table["label"], table["rank"] == 1, strict=True)):
        if best:
            ax.annotate(f"best: {label}", (xi, gi), xytext=(6, -12), textcoords="offset points", fontsize=8)
        elif i == first_ep:
            ax.annotate(f"best with ep: {label}", (xi, gi), xytext=(6, 8), textcoords="offset points", fontsize=8,
                        color="tab:purple")
    if slo_tpot_s is not None:
        ax.axvline(slo_tpot_s * 1e3, color="tab:red", linestyle="--", label=f"TPOT target {slo_tpot_s * 1e3:g} ms")
    ax.set_xscale("log")
    ax.set_xlabel(f"TPOT, {tpot_col[6:-2]}th percentile (ms)")
    ax.set_ylabel("mg CO2eq per output token (10-90% interval)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, out)
