"""Collect experiment run folders (each with metrics.json and predictions.csv) into markdown tables
and parity plots.

    python experiments/summarize.py outputs/experiments --markdown experiments/results.md --plots experiments/figures
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd

METRIC_COLUMNS = (("mape", "MAPE"), ("median_ape", "median APE"), ("eba_5", "EBA(5%)"), ("eba_10", "EBA(10%)"),
                  ("eba_30", "EBA(30%)"))
MODEL_ORDER = ("llmco2", "llmco2_no_phase_split", "llmco2_no_roofline", "nnlqp", "deepen", "gbt", "llmcarbon")


def load_runs(root: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(root.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        metrics["folder"] = path.parent
        metrics["experiment"] = path.parent.parent.name
        split_file = path.parent / "split.json"
        meta = json.loads(split_file.read_text()).get("meta", {}) if split_file.is_file() else {}
        metrics["holdout"] = meta.get("holdout")
        runs.append(metrics)
    return runs


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _order(model: str) -> int:
    return MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER)


def overall_table(runs: list[dict[str, Any]], with_split: bool = False) -> str:
    head = ["model"] + (["training data / split"] if with_split else []) + [label for _, label in METRIC_COLUMNS] + ["test rows"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(runs, key=lambda r: (r["split"], _order(r["model"]))):
        t = r["test"]
        cells = [f"`{r['model']}`"] + ([r["split"]] if with_split else []) + [_pct(t[k]) for k, _ in METRIC_COLUMNS] + [f"{t['n']:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def grouped_table(runs: list[dict[str, Any]], key: str, metric_pair: tuple[str, str] = ("eba_10", "eba_30")) -> str:
    groups = sorted({g for r in runs for g in r["test"][key]})
    head = ["model"] + [f"{g} EBA10 / EBA30" for g in groups]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(runs, key=lambda r: _order(r["model"])):
        cells = [f"`{r['model']}`"]
        for g in groups:
            s = r["test"][key].get(g)
            cells.append("-" if s is None else f"{_pct(s[metric_pair[0]])} / {_pct(s[metric_pair[1]])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def transfer_table(runs: list[dict[str, Any]]) -> str:
    head = ["held out", "model"] + [label for _, label in METRIC_COLUMNS] + ["test rows"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(runs, key=lambda r: (str(r.get("holdout")), _order(r["model"]))):
        t = r["test"]
        lines.append("| " + " | ".join([str(r.get("holdout") or r["split"]), f"`{r['model']}`"]
                                        + [_pct(t[k]) for k, _ in METRIC_COLUMNS] + [f"{t['n']:,}"]) + " |")
    return "\n".join(lines)


def parity_plot(run: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    frame = pd.read_csv(run["folder"] / "predictions.csv")
    phases = [p for p in ("prefill", "decode", "total") if (frame["phase"] == p).any()]
    fig, axes = plt.subplots(1, len(phases), figsize=(5.2 * len(phases), 4.8), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        f = frame[frame["phase"] == phase]
        ax.scatter(f["energy_j"], f["predicted_j"], s=3, alpha=0.3)
        lo = float(min(f["energy_j"].min(), f["predicted_j"].min()))
        hi = float(max(f["energy_j"].max(), f["predicted_j"].max()))
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, "k-", lw=1, label="y = x")
        ax.fill_between(xs, xs * 0.9, xs * 1.1, color="g", alpha=0.15, label="±10%")
        ax.fill_between(xs, xs * 0.7, xs * 1.3, color="g", alpha=0.07, label="±30%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ape = (f["predicted_j"] - f["energy_j"]).abs() / f["energy_j"]
        ax.set_title(f"{phase}: {len(f):,} rows, median APE {100 * ape.median():.1f}%, EBA10 {100 * (ape <= 0.1).mean():.0f}%")
        ax.set_xlabel("measured energy (J)")
        ax.set_ylabel("predicted energy (J)")
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{run['model']} on {run['data']} ({run['split']} split, test rows)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--plots", type=Path, default=None)
    args = parser.parse_args()
    runs = load_runs(args.root)
    by_exp: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_exp.setdefault(r["experiment"], []).append(r)
    parts = ["# Results", "", f"Generated by `python experiments/summarize.py {args.root}` from {len(runs)} runs "
             "(`bash experiments/reproduce.sh` regenerates them). Fractions of held-out test rows with positive measured "
             "energy; splits are grouped by configuration, so no test configuration was seen in training."]
    if "table3_co2meter" in by_exp:
        rs = by_exp["table3_co2meter"]
        parts += ["", "## Paper Table 3/4 layout: CO2-Meter edge data, trace-sampled training, held-out trace-sampled requests",
                  "", overall_table(rs), "", "Per model family (EBA(10%) / EBA(30%)):", "", grouped_table(rs, "per_family"),
                  "", "Per phase:", "", grouped_table(rs, "per_phase"), "", "Per device:", "", grouped_table(rs, "per_device")]
    if "table5_ablations" in by_exp:
        parts += ["", "## Paper Table 5: ablations (same test set; `uniform` = trained on uniformly sampled requests)", "",
                  overall_table(by_exp["table5_ablations"], with_split=True)]
    for exp, title in (("transfer_datacenter", "Transfer to an unseen data-centre GPU (trained on every other usable row: "
                                               "CO2-Meter, the other data-centre GPUs)"),
                       ("transfer_device", "Transfer between the two CO2-Meter devices (trained on one, tested on the other: "
                                           "an NPU and a GPU)"),
                       ("transfer_model", "Transfer to an unseen model (CO2-Meter, trained on the other three models)")):
        if exp in by_exp:
            parts += ["", f"## {title}", "", transfer_table(by_exp[exp])]
    text = "\n".join(parts) + "\n"
    if args.plots:
        for r in by_exp.get("table3_co2meter", []):
            if r["model"] in ("llmco2", "gbt"):
                out = parity_plot(r, args.plots / f"parity_{r['model']}_co2meter.png")
                text += f"\n![parity {r['model']}]({out.relative_to(args.markdown.parent) if args.markdown else out})\n"
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
