"""Tables of the data-centre experiments (leave one device / source / engine out; edge check;
random-split interval coverage) from their run folders, as Markdown.

    python experiments/summarize_datacentre.py outputs/exp10 [--markdown OUT.md] [--figure OUT.png]

``--figure`` draws predicted against measured energy for every held-out device of the
leave-one-device-out runs (one panel per device, one colour per predictor, the 30% band shaded).

Every run folder holds ``metrics.json`` (written by ``python -m llmco2.models.experiment``); a
table row is one held-out group, columns are the predictors' test metrics on it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MODEL_ORDER = ("llmco2", "llmco2_physical_prior", "llmco2_tdp_prior", "gbt", "llmcarbon")
LABELS = {"llmco2": "llmco2 (step-physics prior)", "llmco2_physical_prior": "llmco2, per-device prior (before)",
          "llmco2_tdp_prior": "llmco2, TDP prior", "gbt": "gbt", "llmcarbon": "llmcarbon"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def load(root: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(root.rglob("metrics.json")):
        m = json.loads(path.read_text())
        split = path.parent / "split.json"
        m["holdout"] = json.loads(split.read_text()).get("meta", {}).get("holdout") if split.is_file() else None
        m["experiment"] = path.parent.parent.name
        runs.append(m)
    return runs


def table(runs: list[dict[str, Any]]) -> str:
    head = ["held out", "predictor", "MAPE", "median APE", "EBA(10%)", "EBA(30%)", "coverage 10-90%", "test rows"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {m: i for i, m in enumerate(MODEL_ORDER)}
    for r in sorted(runs, key=lambda r: (str(r["holdout"] or r["split"]), order.get(r["model"], 9))):
        t = r["test"]
        cov = t.get("coverage", {}).get("coverage") if t.get("coverage") else None
        cells = [str(r["holdout"] or r["split"]), LABELS.get(r["model"], r["model"]), _pct(t["mape"]), _pct(t["median_ape"]),
                 _pct(t["eba_10"]), _pct(t["eba_30"]), _pct(cov), f"{t['n']:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(root: Path, out: Path, experiment: str = "lodo_datacenter") -> Path:
    """Predicted vs measured energy (J, log-log) of each held-out device, per predictor."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in load(root) if r["experiment"] == experiment and r["holdout"]]
    devices = sorted({str(r["holdout"]) for r in runs})
    if not devices:
        raise SystemExit(f"no {experiment} runs with a held-out device under {root}")
    fig, axes = plt.subplots(1, len(devices), figsize=(4.2 * len(devices), 4.2), squeeze=False)
    colours = {"llmco2": "tab:blue", "llmco2_physical_prior": "tab:cyan", "llmco2_tdp_prior": "tab:gray", "gbt": "tab:orange",
               "llmcarbon": "tab:red"}
    for ax, device in zip(axes[0], devices, strict=True):
        lo, hi = float("inf"), 0.0
        for model in reversed(MODEL_ORDER):  # llmco2 drawn last, on top
            folder = root / experiment / f"{model}-datacentre_lodo-without-{device}"
            if not (folder / "predictions.csv").is_file():
                continue
            with (folder / "predictions.csv").open() as f:
                rows = [(float(r["energy_j"]), float(r["predicted_j"])) for r in csv.DictReader(f)]
            y, p = zip(*rows, strict=True)
            lo, hi = min(lo, *y, *p), max(hi, *y, *p)
            ax.scatter(y, p, s=9, alpha=0.6, color=colours.get(model), label=LABELS.get(model, model))
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.fill_between([lo, hi], [0.7 * lo, 0.7 * hi], [1.3 * lo, 1.3 * hi], color="black", alpha=0.08, lw=0)
        ax.set(xscale="log", yscale="log", xlabel="measured energy (J)", ylabel="predicted energy (J)",
               title=f"held out: {device}")
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--figure", type=Path, help="write the leave-one-device-out scatter here (PNG)")
    args = parser.parse_args()
    runs = load(args.root)
    parts = []
    for exp in sorted({r["experiment"] for r in runs}):
        parts.append(f"### {exp}\n\n" + table([r for r in runs if r["experiment"] == exp]))
    text = "\n\n".join(parts) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    if args.figure:
        print(f"wrote {figure(args.root, args.figure)}")


if __name__ == "__main__":
    main()
