"""Serving physics on GPUs and models it was not fitted on (ML.ENERGY v2 + v3 steady-state rows).

The step physics (:mod:`llmco2.physics.step_physics`) is fitted through the closed-form steady
state (:mod:`llmco2.serving.steady`) on all three observables at once (J per output token,
latency, power; :mod:`llmco2.serving.mlenergy`), then judged on held-out rows, uncorrected:

* all rows, fitted on all rows (what is shipped);
* leave one GPU out: fit without the A100 rows and test on v2 A100-40GB; fit without the H100
  rows (then the V1 engine keeps its catalog priors: only H100 rows ran it) and test on H100;
* v3 H100 leave one model out: fit on every other model's rows, test on that model's rows.

Beside it: a roofline latency x TDP estimate (every kernel at the peak that binds it, no
overheads, every GPU at its power limit; llm-analysis's approach with efficiencies of 1).
Intervals: 10-90% quantiles of log(measured / predicted) of held-out rows; the "new GPU" interval
is judged on each held-out GPU with the quantiles of the other GPU's held-out residuals.

    python experiments/serving_physics.py [--out experiments/results/serving_physics.md] [--write]

``--write`` stores the all-rows fit and the intervals as ``llmco2/serving/data/step_physics.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.physics.step_isolated import IsolatedRows, isolated_rows
from llmco2.physics.step_physics import StepParams
from llmco2.serving.mlenergy import BITS_DTYPE, ServingRows, load_rows, serving_rows
from llmco2.serving.mlenergy_fit import PROMPT_SCALES, fit_with_prompt_scales, predictions, roofline_tdp
from llmco2.serving.physics_params import family, params_path

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent
QUANTILES = (0.1, 0.9)


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    v3 = (rows["release"] == "v3").to_numpy()
    itl = pd.to_numeric(rows.get("median_itl_ms"), errors="coerce").to_numpy(float) * 1e-3
    tpot = pd.to_numeric(rows.get("round_time_s"), errors="coerce").to_numpy(float)
    return pd.DataFrame({"j": rows["j_per_output_token"].to_numpy(float), "latency": np.where(v3, itl, tpot),
                         "power": measured_power(rows)}, index=rows.index)


def measured_power(rows: pd.DataFrame) -> np.ndarray:
    """Average power of all GPUs of each row (W): v3's measured ``avg_power_w``; for v2, which
    publishes none, the average implied by its J per output token x output tokens per s (judged,
    never fitted on)."""
    measured = pd.to_numeric(rows.get("avg_power_w"), errors="coerce").to_numpy(float)
    implied = pd.to_numeric(rows.get("implied_power_w"), errors="coerce").to_numpy(float)
    return np.where(np.isfinite(measured), measured, implied)


#: Isolated batch runs fitted together with the serving rows (set by :func:`main`); ``None`` fits
#: the serving rows alone.
ISOLATED: IsolatedRows | None = None


def fit(builds: dict[float, ServingRows], mask: np.ndarray, source: str) -> tuple[StepParams, ServingRows]:
    """Constants fitted on the rows under ``mask`` (with :data:`ISOLATED`) and the rows rebuilt with
    each task's prompt scale (:func:`llmco2.serving.mlenergy_fit.fit_with_prompt_scales`)."""
    return fit_with_prompt_scales(builds, mask, source, ISOLATED)


def medape(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(meas) & (meas > 0)
    return float(np.median(np.abs(pred[ok] / meas[ok] - 1.0)) * 100) if ok.any() else float("nan")


def split_rows(builds: dict[float, ServingRows], quick: bool = False) -> dict[str, tuple[np.ndarray, pd.DataFrame]]:
    """Held-out predictions per split: {name: (test index, predictions)}; ``quick``: without the
    leave-one-model-out folds."""
    r = builds[1.0].rows
    out = {}
    allrows = np.arange(len(r))
    out["all rows (fitted on all)"] = (allrows, predictions(*_swap(fit(builds, np.ones(len(r), bool), "all")), allrows))
    for gpu, label in (("a100-40gb", "leave GPU out: v2 A100-40GB"), ("h100-sxm", "leave GPU out: H100 (v2 + v3)")):
        test = (r["device"] == gpu).to_numpy()
        out[label] = (np.flatnonzero(test), predictions(*_swap(fit(builds, ~test, f"without {gpu}")), np.flatnonzero(test)))
    if quick:
        return out
    v3 = (r["release"] == "v3").to_numpy()
    parts = []
    for model in sorted(r.loc[v3, "model"].unique()):
        test = v3 & (r["model"] == model).to_numpy()
        parts.append(predictions(*_swap(fit(builds, ~(r["model"] == model).to_numpy(), f"without {model}")), np.flatnonzero(test)))
    lomo = pd.concat(parts).sort_index()
    out["v3 H100 leave one model out"] = (lomo.index.to_numpy(), lomo)
    return out


def _swap(fitted: tuple[StepParams, ServingRows]) -> tuple[ServingRows, StepParams]:
    return fitted[1], fitted[0]


def table(sr: ServingRows, splits: dict) -> list[str]:
    """Accuracy per split; the baseline runs on ``sr``'s shapes (the all-rows prompt scales, which
    favours it on held-out rows)."""
    meas = measured(sr.rows)
    base = roofline_tdp()
    lines = ["| split | rows | J/token MdAPE | latency MdAPE | power MdAPE | roofline x TDP J/token MdAPE |",
             "|---|---|---|---|---|---|"]
    for name, (idx, pred) in splits.items():
        m = meas.loc[pred.index]
        b = predictions(sr, base, idx)
        lines.append(f"| {name} | {len(idx)} | {medape(pred.j.to_numpy(), m.j.to_numpy()):.1f}% | "
                     f"{medape(pred.latency.to_numpy(), m.latency.to_numpy()):.1f}% | {medape(pred.power.to_numpy(), m.power.to_numpy()):.1f}% | "
                     f"{medape(b.j.to_numpy(), m.j.to_numpy()):.1f}% |")
    return lines


def by_precision(sr: ServingRows, splits: dict) -> list[str]:
    """Accuracy of the held-out H100 rows by weight precision (FP8 rows on their own)."""
    meas = measured(sr.rows)
    lines = ["| split | weights | rows | J/token MdAPE | latency MdAPE | power MdAPE |", "|---|---|---|---|---|---|"]
    for name in ("leave GPU out: H100 (v2 + v3)", "v3 H100 leave one model out"):
        _, pred = splits[name]
        bits = sr.rows.loc[pred.index, "weight_bits"].astype(int)
        for b in sorted(bits.unique(), reverse=True):
            p, m = pred[bits == b], meas.loc[pred.index[bits == b]]
            lines.append(f"| {name} | {BITS_DTYPE.get(int(b), b)} | {len(p)} | {medape(p.j.to_numpy(), m.j.to_numpy()):.1f}% | "
                         f"{medape(p.latency.to_numpy(), m.latency.to_numpy()):.1f}% | {medape(p.power.to_numpy(), m.power.to_numpy()):.1f}% |")
    return lines


#: How each FP8 checkpoint of the v3 rows scales its weights and activations (its model card), and so
#: which vLLM kernels ran it. Block-scaled FP8 GEMMs were 2.4-3.6x slower than bf16 ones at decode
#: batches on an H100 in vLLM's own kernel benchmark of September 2025 (N=2112, K=7168, batch 1-16; 1.8x at 256:
#: https://github.com/vllm-project/vllm/pull/23280), and its block-FP8 fused MoE ran with N=128 tiles
#: that left decode bound by the SMs, not by memory (https://github.com/vllm-project/vllm/pull/46642);
#: the step physics costs every FP8 GEMM as a per-channel one.
FP8_SCHEMES = {
    "qwen3-235b-a22b": "block-scaled (128 x 128 weight blocks, per-token-group activations): Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 "
                       "model card, 'fine-grained fp8 quantization with block size of 128'",
    "llama3.1-405b": "per-channel weights, dynamic per-token activations: meta-llama/Llama-3.1-405B-Instruct-FP8 model card (FBGEMM row-wise FP8)",
    "llama4-maverick": "per-channel weights, dynamic per-token activations: meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8 model card",
}


def fp8_by_model(sr: ServingRows, splits: dict) -> list[str]:
    """The FP8 rows of the leave-one-model-out split, per model, with the scaling scheme of its checkpoint."""
    meas = measured(sr.rows)
    _, pred = splits["v3 H100 leave one model out"]
    rows = sr.rows.loc[pred.index]
    lines = ["| model | FP8 scheme | rows | J/token MdAPE | latency MdAPE | power MdAPE |", "|---|---|---|---|---|---|"]
    for model in sorted(rows.loc[rows["weight_bits"].astype(int) == 8, "model"].unique()):
        sel = (rows["weight_bits"].astype(int) == 8) & (rows["model"] == model)
        p, m = pred[sel.to_numpy()], meas.loc[pred.index[sel.to_numpy()]]
        scheme = FP8_SCHEMES.get(model, "not stated").split(":")[0]
        lines.append(f"| {model} | {scheme} | {len(p)} | {medape(p.j.to_numpy(), m.j.to_numpy()):.1f}% | "
                     f"{medape(p.latency.to_numpy(), m.latency.to_numpy()):.1f}% | {medape(p.power.to_numpy(), m.power.to_numpy()):.1f}% |")
    return lines


def intervals(sr: ServingRows, splits: dict) -> tuple[dict, list[str]]:
    """Interval quantiles of log(measured / predicted) and their held-out coverage."""
    meas = measured(sr.rows)
    res = {}
    for name, (_, pred) in splits.items():
        res[name] = np.log(meas.loc[pred.index, "j"].to_numpy() / pred.j.to_numpy())
    a, h = res["leave GPU out: v2 A100-40GB"], res["leave GPU out: H100 (v2 + v3)"]
    lomo = res["v3 H100 leave one model out"]
    lines = ["| held-out rows | interval from | coverage of the 10-90% interval |", "|---|---|---|"]
    width = QUANTILES[1] - QUANTILES[0]
    for test, train, label in ((a, h, "v2 A100-40GB"), (h, a, "H100 (v2 + v3)")):
        half = np.quantile(np.abs(train), width)
        lines.append(f"| {label} | the other GPU's held-out residuals (symmetric: the sign of a new GPU's bias is unknown) | "
                     f"{np.mean(np.abs(test) <= half) * 100:.0f}% |")
    known = [float(q) for q in np.quantile(lomo, QUANTILES)]
    # never narrower than the known-GPU interval: a new GPU adds its transfer error to a new model's
    half = max(float(np.quantile(np.abs(np.concatenate([a, h])), width)), abs(known[0]), abs(known[1]))
    shipped = {"new_gpu": [-half, half], "known_gpu": known,
               "source": "10-90% quantiles of log(measured / predicted) J per output token: v3 H100 leave-one-model-out "
                         "residuals (known_gpu); new_gpu is symmetric (the sign of a new GPU's bias is unknown), its half-width "
                         "the 80% quantile of |log residual| of the leave-one-GPU-out rows, at least as wide as known_gpu, of experiments/serving_physics.py"}
    return shipped, lines


def _scales(builds: dict[float, ServingRows], mixed: ServingRows) -> list[float]:
    """The prompt scale each row of ``mixed`` was taken at (matched on its prefill shapes)."""
    out = []
    for i in range(len(mixed.rows)):
        out.append(next(k for k, b in builds.items() if np.allclose(b.shapes.prefill.compute_s[i], mixed.shapes.prefill.compute_s[i])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "serving_physics.md"))
    ap.add_argument("--write", action="store_true", help="write llmco2/serving/data/step_physics.json")
    ap.add_argument("--serving-only", action="store_true", help="fit on the serving rows alone (no isolated batch runs)")
    ap.add_argument("--quick", action="store_true", help="only the all-rows fit and the two leave-one-GPU-out splits (no table written)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    global ISOLATED
    rows, dropped = load_rows()
    if not args.serving_only:
        from llmco2.data.importers import import_all
        from llmco2.data.paths import shared_data

        ISOLATED = isolated_rows(import_all(shared_data())[0])
    builds = {k: serving_rows(rows, k) for k in PROMPT_SCALES}
    sr = builds[1.0]
    splits = split_rows(builds, args.quick)
    if args.quick:
        print("\n".join(table(sr, splits)))
        return 0
    shipped, cov = intervals(sr, splits)
    meas = measured(sr.rows)
    full, mixed = fit(builds, np.ones(len(sr.rows), bool), "all ML.ENERGY v2 + v3 text rows")
    _, lomo = splits["v3 H100 leave one model out"]
    fam = pd.DataFrame({"family": sr.rows.loc[lomo.index, "model"].map(family),
                        "ape": np.abs(lomo.j / meas.loc[lomo.index, "j"] - 1) * 100})
    text = ["# Serving physics: held-out ML.ENERGY steady-state rows (uncorrected)", "",
            f"Rows: {len(sr.rows)} (v2 {int((sr.rows.release == 'v2').sum())}, v3 {int((sr.rows.release == 'v3').sum())}); "
            f"import drops: {dropped}; not buildable: {len(sr.skipped)}.", "",
            "`python experiments/serving_physics.py` (deterministic: no random seed enters the fit; lengths are "
            "drawn from the Azure traces with the row's own seed).", "", *table(mixed, splits), "",
            "Latency: v2 mean time per decode round (mean batch / output tokens per s), v3 median inter-token latency; "
            "power: v3 measured, v2 implied (J per output token x output tokens per s; never fitted on).", "",
            "## v3 H100 leave one model out, per family (J/token MdAPE)", "",
            "| family | rows | MdAPE |", "|---|---|---|",
            *[f"| {f} | {len(g)} | {g.ape.median():.1f}% |" for f, g in fam.groupby("family")], "",
            "## By weight precision (held-out H100 rows)", "", *by_precision(mixed, splits), "",
            "FP8 rows of the leave-one-model-out split by checkpoint (`FP8_SCHEMES` in this script gives each scheme's "
            "source): block-scaled FP8 GEMMs ran 2.4-3.6x slower than bf16 ones at batches of 1-16 (1.8x at 256) in vLLM's own benchmark "
            "(https://github.com/vllm-project/vllm/pull/23280), which the step physics, costing every FP8 GEMM as a "
            "per-channel one, does not hold.", "", *fp8_by_model(mixed, splits), "",
            "## Interval coverage (leave one GPU out)", "", *cov, "",
            "## Constants fitted on all rows", "", "```json", json.dumps(full.to_dict(), indent=1), "```"]
    Path(args.out).write_text("\n".join(text) + "\n")
    scales = mixed.rows.assign(scale=_scales(builds, mixed)).groupby("task")["scale"].first().to_dict()
    text.insert(text.index("## Constants fitted on all rows"), f"Prompt scale per task chosen on all rows: {scales}\n")
    Path(args.out).write_text("\n".join(text) + "\n")
    print("\n".join(text[:12 + len(splits)]))
    if args.write:
        payload = {**replace(full, source="fitted by experiments/serving_physics.py on all ML.ENERGY v2 + v3 text rows").to_dict(),
                   "interval": shipped, "fitted_gpus": sorted(set(sr.rows.device)),
                   "fitted_families": sorted(set(sr.rows.model.map(family))), "rows": len(sr.rows)}
        params_path().write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {params_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
