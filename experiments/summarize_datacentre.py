"""Tables of the data-centre experiments (leave one device / source / engine out; edge check;
random-split interval coverage) from their run folders, as Markdown.

    python experiments/summarize_datacentre.py outputs/exp10 [--markdown OUT.md] [--figure OUT.png] [--apart GROUP ...]

Below each experiment with held-out groups, a compact table gives one line per group (llmco2's
median APE and coverage beside every other predictor's median APE) and the mean over the groups.

A third table gives the llmco2 runs' coverage with the held-out device's intervals calibrated as the
shipped checkpoint calibrates a GPU it has not seen (``experiments/train_default.py --out-of-domain``):
out-of-domain quantiles from the residuals of the *other* held-out devices of the same seed (groups in
``--apart`` left out, as they are of the checkpoint's calibration), joined with the run's in-domain
interval (:meth:`llmco2.prediction.intervals.IntervalCalibration.log_bounds`). The runs themselves have
no out-of-domain residuals, so their own intervals are the in-domain ones widened by
:data:`llmco2.prediction.intervals.UNCALIBRATED_WIDENING`; the in-domain ends are read back from them.

``--figure`` draws predicted against measured energy for every held-out device of the
leave-one-device-out runs (one panel per device, one colour per predictor, the 30% band shaded).

Every run folder holds ``metrics.json`` (written by ``python -m llmco2.training.experiment``); a
table row is one held-out group, columns are the predictors' test metrics on it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmco2.prediction.intervals import UNCALIBRATED_WIDENING, IntervalCalibration

MODEL_ORDER = ("llmco2", "llmco2_physical_prior", "llmco2_tdp_prior", "gbt", "llmcarbon", "roofline_tdp")
LABELS = {"llmco2": "llmco2 (step-physics prior)", "llmco2_physical_prior": "llmco2, per-device prior (before)",
          "llmco2_tdp_prior": "llmco2, TDP prior", "gbt": "gbt", "llmcarbon": "llmcarbon",
          "roofline_tdp": "roofline x TDP (nothing fitted)"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def load(root: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(root.rglob("metrics.json")):
        m = json.loads(path.read_text())
        split = path.parent / "split.json"
        m["holdout"] = json.loads(split.read_text()).get("meta", {}).get("holdout") if split.is_file() else None
        m["experiment"] = path.parent.parent.name
        m["seed"] = _seed(path.parent)
        runs.append(m)
    return runs


def _seed(folder: Path) -> int | None:
    """The run's seed, from its Hydra config (``.hydra/config.yaml`` or ``config.yaml``)."""
    for cfg in (folder / ".hydra" / "config.yaml", folder / "config.yaml"):
        if cfg.is_file():
            for line in cfg.read_text().splitlines():
                if line.startswith("seed:"):
                    return int(line.split(":", 1)[1])
    return None


def _cell(values: list[float | None]) -> str:
    """A metric over the seeds of a configuration: the value, or the mean and the range."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return _pct(vals[0])
    return f"{_pct(sum(vals) / len(vals))} ({100 * min(vals):.1f}-{100 * max(vals):.1f})"


def table(runs: list[dict[str, Any]]) -> str:
    """One line per (held-out set, predictor); where several seeds ran, each metric is the mean over
    the seeds with its range in brackets."""
    head = ["held out", "predictor", "seeds", "MAPE", "median APE", "EBA(10%)", "EBA(30%)", "coverage 10-90%", "test rows"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = {m: i for i, m in enumerate(MODEL_ORDER)}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((str(r["holdout"] or r["split"]), r["model"]), []).append(r)
    for (held, model), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9))):
        tests = [r["test"] for r in rs]
        cov = [t["coverage"]["coverage"] if t.get("coverage") else None for t in tests]
        cells = [held, LABELS.get(model, model), str(len(rs)), *(_cell([t[k] for t in tests]) for k in ("mape", "median_ape", "eba_10", "eba_30")),
                 _cell(cov), f"{tests[0]['n']:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_device(runs: list[dict[str, Any]], apart: tuple[str, ...] = ()) -> str:
    """One line per held-out device: llmco2's median APE and 10-90% interval coverage (mean over its
    seeds, range in brackets) beside each other predictor's median APE, then the mean over the
    devices of each column (a device without a run of a predictor is left out of that mean, and the
    line says how many devices each mean is over). Groups in ``apart`` (e.g. host-bound rows no fit
    may learn from) are left out of the first mean; a second line gives the mean over every group."""
    held = sorted({str(r["holdout"]) for r in runs if r["holdout"]})
    models = [m for m in MODEL_ORDER if any(r["model"] == m for r in runs)]
    others = [m for m in models if m != "llmco2"]
    head = ["held out", "test rows", "llmco2: median APE", "llmco2: coverage 10-90%", *(f"{LABELS.get(m, m)}: median APE" for m in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    columns: dict[str, list[float]] = {}
    every: dict[str, list[float]] = {}
    for device in held:
        rs = {m: [r for r in runs if str(r["holdout"]) == device and r["model"] == m] for m in models}
        n = next((f"{x[0]['test']['n']:,}" for x in rs.values() if x), "-")
        cells = [device, n]
        for key, model, metric in [("llmco2", "llmco2", "median_ape"), ("cov", "llmco2", "coverage"),
                                   *((m, m, "median_ape") for m in others)]:
            tests = [r["test"] for r in rs.get(model, [])]
            vals = [(t["coverage"]["coverage"] if t.get("coverage") else None) if metric == "coverage" else t[metric] for t in tests]
            vals = [v for v in vals if v is not None]
            cells.append(_cell(vals))
            if vals:
                every.setdefault(key, []).append(sum(vals) / len(vals))
                if device not in apart:
                    columns.setdefault(key, []).append(sum(vals) / len(vals))
        lines.append("| " + " | ".join(cells) + " |")
    keys = ("llmco2", "cov", *others)
    means = [f"{_pct(sum(v) / len(v))} ({len(v)})" if (v := columns.get(k)) else "-" for k in keys]
    without = f" but {', '.join(apart)}" if set(apart) & set(held) else ""
    lines.append(f"| mean of the held-out devices{without} (devices) | | " + " | ".join(means) + " |")
    if without:
        means = [f"{_pct(sum(v) / len(v))} ({len(v)})" if (v := every.get(k)) else "-" for k in keys]
        lines.append("| mean of every held-out device (devices) | | " + " | ".join(means) + " |")
    return "\n".join(lines)


def calibrated_coverage(root: Path, experiment: str, apart: tuple[str, ...] = ()) -> str:
    """Per held-out device, the llmco2 runs' 10-90% coverage with out-of-domain quantiles from the other held-out
    devices' residuals of the same seed (see the module docstring); mean over seeds, range in brackets."""
    frames = []
    for path in sorted((root / experiment).glob("llmco2-*-without-*-seed*/predictions.csv")):
        name = path.parent.name
        f = pd.read_csv(path).assign(holdout=name.split("-without-")[1].rsplit("-seed", 1)[0], seed=int(name.rsplit("-seed", 1)[1]))
        frames.append(f[f["device"] == f["holdout"]])
    if not frames:
        return ""
    rows = pd.concat(frames, ignore_index=True)
    rows["resid"] = np.log(rows["energy_j"] / rows["predicted_j"])
    rows["phase_code"] = rows["phase"].map({"prefill": 0, "decode": 1}).fillna(2).astype(int)
    result: dict[str, list[float]] = {}
    for (seed, device), mine in rows.groupby(["seed", "holdout"], sort=True):
        others = rows[(rows["seed"] == seed) & (rows["holdout"] != device) & ~rows["holdout"].isin(apart)]
        cal = IntervalCalibration().with_out_of_domain(others["resid"].to_numpy(), others["phase_code"].to_numpy(), "other held-out devices")
        ood = np.array([cal.out_of_domain["prefill" if c == 0 else "decode"] for c in mine["phase_code"]])
        lo = np.minimum(np.log(mine["low_j"] / mine["predicted_j"]) / UNCALIBRATED_WIDENING, ood[:, 0])
        hi = np.maximum(np.log(mine["high_j"] / mine["predicted_j"]) / UNCALIBRATED_WIDENING, ood[:, 1])
        inside = (mine["resid"] >= lo) & (mine["resid"] <= hi)
        result.setdefault(str(device), []).append(float(inside.mean()))
    lines = ["| held out | llmco2: coverage 10-90%, calibrated on the other held-out devices |", "|---|---|"]
    lines += [f"| {d} | {_cell(v)} |" for d, v in result.items()]
    kept = [sum(v) / len(v) for d, v in result.items() if d not in apart]
    within = sum(abs(c - 0.8) <= 0.1 for c in kept)
    lines.append(f"| mean of the held-out devices (within 10 points of 80%) | {_pct(sum(kept) / len(kept))} ({within} of {len(kept)}) |")
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
               "llmcarbon": "tab:red", "roofline_tdp": "tab:brown"}
    for ax, device in zip(axes[0], devices, strict=True):
        lo, hi = float("inf"), 0.0
        for model in reversed(MODEL_ORDER):  # llmco2 drawn last, on top
            folders = sorted((root / experiment).glob(f"{model}-*-without-{device}-seed*/predictions.csv"))
            if not folders:
                continue
            folder = folders[0].parent  # one run per predictor (the first seed)
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
    parser.add_argument("--apart", nargs="*", default=[], help="held-out groups left out of the first mean (e.g. host-bound rows)")
    args = parser.parse_args()
    runs = load(args.root)
    parts = []
    for exp in sorted({r["experiment"] for r in runs}):
        mine = [r for r in runs if r["experiment"] == exp]
        parts.append(f"### {exp}\n\n" + table(mine))
        if any(r["holdout"] for r in mine):
            parts.append(f"#### {exp}: per held-out group\n\n" + per_device(mine, tuple(args.apart)))
            calibrated = calibrated_coverage(args.root, exp, tuple(args.apart))
            if calibrated:
                parts.append(f"#### {exp}: intervals calibrated as the shipped checkpoint's\n\n" + calibrated)
    text = "\n\n".join(parts) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    if args.figure:
        print(f"wrote {figure(args.root, args.figure)}")


if __name__ == "__main__":
    main()
