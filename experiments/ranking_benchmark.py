"""Ranking benchmark: does llmco2 order GPUs right for one model and load, each GPU held out of the fit?

Groups: every configuration (model and load) measured on two or more GPUs of a source:

* **ML.ENERGY v2** (steady-state vLLM servers, A100-40GB vs H100): the same model, task and batch
  cap (``max_num_seqs``); the number of GPUs is part of a configuration (a group may hold 1 and 2
  A100s against 1 H100). Quantity: J per output token.
* **Argonne** (isolated batch runs, A100-40GB / H100 / Gaudi2): the same model, batch, prompt and
  generated lengths, number of devices and precision; the same engine where two GPUs ran one in
  common, otherwise each GPU's own (Gaudi2's DeepSpeed stack against vLLM or TensorRT-LLM).
  Quantity: J per output token of the run. The rows of the superseded commit (every Gaudi2 row, the
  two-GPU H100 rows) read the power of every accelerator of the node
  (``metered_devices``, :func:`llmco2.data.importers.argonne.probe_devices`): each row is predicted at its reading's scope,
  the used GPUs' predicted energy plus the unused cards' idle power (the catalog's static power,
  :func:`llmco2.specs.gpu_power.static_power_w`) over the predicted time. Two more lines, reported and not
  in "all": GPU-scope predictions against the readings as published, and against the readings with
  the unused cards' idle taken out over the measured time. No fit reads those readings' energy
  (:mod:`llmco2.data.scope`): their latency only.
* **collected energy_code_eval** (vLLM 0.8 eager, A100-80GB vs A40): the same model, batch cap,
  lengths and weight quantisation.
* **collected ML.ENERGY v1** (HF transformers at batch 1, A100 of unstated variant vs A40 vs
  V100): the same model and task; its prompts are not published, so every row runs at 125 tokens
  (``llmco2.serving.mlenergy.TASK_PROMPT_TOKENS["chat"]``, ShareGPT first turns with a system
  prompt; the rows are flagged ``prompt_tokens_unknown``, so no fit learns from them): here they
  are measurements to order, on the catalog's a100-pcie-80gb and v100s-pcie-32gb (the parts the
  leaderboard's hosts carry). Quantity: J per output token of the mean request.

Predictions with the GPU held out: isolated rows with the step constants fitted on every other
GPU's isolated runs (:func:`llmco2.physics.step_isolated.fit_isolated_rows`, the fit of
``experiments/step_lodo.py``; a GPU that no fit sees, such as the V100S or the A100 80GB PCIe, takes the fit on all rows);
serving rows with the steady-state simulation fitted on every other GPU's serving and isolated
rows (:mod:`llmco2.serving.mlenergy_fit`, the fit of ``experiments/serving_physics.py``). Beside
it the roofline latency x TDP baseline (nothing fitted). Metrics (:mod:`llmco2.training.ranking`):
Kendall's tau within each group, averaged over groups weighted by pairs, and the share of GPU
pairs ordered right; measured ties (within 2%) are skipped and counted. A wrong pair is put down
to power or to time per output token, whichever's predicted ratio between the two GPUs is further
from the measured one (J per token = power x time per token).

    python experiments/ranking_benchmark.py [--quick] [--out experiments/results/ranking.md]

``--quick``: serving fits without the prompt-scale vote (one fit per held-out GPU, at the trace's
prompts) and no ML.ENERGY v1 rows; the Markdown file is written only by the full run.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.data.paths import shared_data
from llmco2.data.scope import UNUSED_IDLE_RANGE_W, extra_devices, unused_idle_w
from llmco2.data.usable import load_rows as load_table
from llmco2.physics.step_isolated import IsolatedRows, fit_isolated_rows, isolated_rows
from llmco2.physics.step_physics import StepParams, roofline_tdp_params
from llmco2.serving.mlenergy import TASK_PROMPT_TOKENS, load_rows, serving_rows
from llmco2.serving.mlenergy_fit import PROMPT_SCALES, fit_rows, fit_with_prompt_scales, predictions, roofline_tdp
from llmco2.training.ranking import TIE_TOLERANCE, PairCounts, gpu_pairs, pair_counts

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
DATA_CONFIG = ROOT / "conf/data/datacentre_lodo.yaml"
#: The collected rows beside the data config's sources (as ``experiments/step_lodo.py``).
COLLECTED = ("collected/energy_code_eval.csv", "collected/hb_thesis_a100pcie.csv")
V1_FILE = "collected/mlenergy_v1_legacy.csv"
V1_PROMPT_TOKENS = TASK_PROMPT_TOKENS["chat"]
ARGONNE, CODE_EVAL, V1, V2 = "Argonne", "collected energy_code_eval", "collected ML.ENERGY v1", "ML.ENERGY v2"
#: The Argonne lines of the report: GPU-scope predictions against the readings with the unused cards' idle taken
#: out (the used GPUs' order: the source's line in "all"), predictions at each reading's scope (the node's order),
#: and GPU-scope predictions against the readings as published.
ARGONNE_CORR = "Argonne (the used GPUs: readings less the unused cards' idle)"
ARGONNE_SCOPE = "Argonne (at the probes' scope: used GPUs and idle cards)"
ARGONNE_GPU = "Argonne (GPU scope vs node-wide readings)"
#: Columns that make a configuration (model and load) of an isolated source.
ISOLATED_KEY = ("model", "batch_size", "prompt_tokens", "generated_tokens", "num_devices", "tensor_parallel", "weight_bits",
                "quantisation")


def training_table() -> pd.DataFrame:
    """The isolated training rows of ``experiments/step_lodo.py``: the data config's sources (CO2-Meter
    left out) and the collected rows, flagged rows left out."""
    from omegaconf import OmegaConf

    from llmco2.training.experiment import register_resolvers

    register_resolvers()
    cfg = OmegaConf.to_container(OmegaConf.load(DATA_CONFIG), resolve=True)
    assert isinstance(cfg, dict)
    sources = [s for s in cfg["sources"] if s["format"] != "co2meter"]
    have = {str(Path(s["path"]).resolve()) for s in sources}
    sources += [{"format": "collected", "path": str(shared_data(rel))} for rel in COLLECTED
                if str(shared_data(rel).resolve()) not in have]
    return load_table(sources, cfg.get("exclude_flags"), cfg.get("exclude_sources"), 0)


def v1_rows() -> pd.DataFrame:
    """ML.ENERGY v1 legacy rows (batch 1, HF) at :data:`V1_PROMPT_TOKENS`, with their task and model name."""
    from llmco2.data.importers import import_file

    path = shared_data(V1_FILE)
    table = import_file("collected", path).table
    raw = pd.read_csv(path)
    line = pd.to_numeric(table["source_row"]).to_numpy(int) - 2  # line 1 is the header
    table["task"] = raw["source_path"].iloc[line].str.extract(r"_([a-z-]+)_benchmark")[0].to_numpy()
    table["model_name"] = raw["model_hf"].iloc[line].to_numpy()
    table["prompt_tokens"] = pd.array([int(V1_PROMPT_TOKENS)] * len(table), dtype="Int64")
    # a row's generated tokens are a mean over requests: the request modelled has the rounded mean,
    # and the energy is scaled to it (J per output token unchanged)
    mean = pd.to_numeric(table["generated_tokens"]).to_numpy(float)
    rounded = np.maximum(np.rint(mean), 1)
    table["generated_tokens"] = pd.array(rounded.astype(int), dtype="Int64")
    table["energy_j"] = pd.to_numeric(table["energy_j"]).to_numpy(float) * rounded / mean
    table["latency_s"] = pd.to_numeric(table["latency_s"]).to_numpy(float) * rounded / mean
    table["flag"] = ""
    return table


def isolated_frame(iso: IsolatedRows, label: dict[str, str], key: tuple[str, ...]) -> pd.DataFrame:
    """One line per measured row of ``iso`` with usable energy: its source label, configuration key,
    GPU, engine, measured J per output token, power (W), time per output token (s) and the idle power (W)
    of the accelerators its reading summed beyond those the run used (``unused_idle``,
    :func:`llmco2.data.scope.unused_idle_w`; ``unused_cards``: how many)."""
    rows = iso.rows
    energy = pd.to_numeric(rows["energy_j"], errors="coerce").to_numpy(float)
    lat = pd.to_numeric(rows["latency_s"], errors="coerce").to_numpy(float)
    tokens = pd.to_numeric(rows["batch_size"]).to_numpy(float) * pd.to_numeric(rows["generated_tokens"]).to_numpy(float)
    # node-wide readings are no fit's power (llmco2.data.scope) but are compared here at their scope
    ok = (iso.usable_energy | iso.node_wide_energy) & np.isfinite(energy) & (energy > 0) & np.isfinite(lat) & (lat > 0)
    src = rows["source_file"].map(label).to_numpy()
    ok &= pd.notna(src)
    out = pd.DataFrame({"source": src, "group": rows[list(key)].astype("string").fillna("-").agg("|".join, axis=1),
                        "device": rows["device"].astype(str), "engine": list(iso.decode.engines), "j": energy / tokens,
                        "power": energy / lat, "time": lat / tokens, "unused_idle": unused_idle_w(rows),
                        "unused_cards": extra_devices(rows)})
    return out[ok]


def at_scope(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the scope variants of each row (row by row, before repeated rows are averaged):
    predictions at the reading's scope (``*_j_scope``, ``*_power_scope``: the unused cards' idle power added
    over the predicted time) and readings with that idle taken out (``j_corr``, ``power_corr``, over the
    measured time). Units: J per output token and W."""
    out = frame.copy()
    idle = out["unused_idle"].to_numpy(float)
    for p in ("pred", "base"):
        j, power = out[f"{p}_j"].to_numpy(float), out[f"{p}_power"].to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{p}_j_scope"] = j + idle * np.where(idle > 0, j / power, 0.0)
        out[f"{p}_power_scope"] = power + idle
    out["j_corr"] = out["j"] - idle * out["time"]
    out["power_corr"] = out["power"] - idle
    return out


def isolated_fits(train: IsolatedRows, gpus: list[str]) -> dict[str, StepParams]:
    """Per GPU, the step constants fitted on ``train``'s rows of every other GPU; GPUs without
    training rows share the fit on every row (it did not see them either)."""
    device = train.rows["device"].astype(str).to_numpy()
    fits: dict[str, StepParams] = {}
    for gpu in gpus:
        seen = device == gpu
        if not seen.any() and "" in fits:
            fits[gpu] = fits[""]
            continue
        start = time.perf_counter()
        fits[gpu] = fit_isolated_rows(train, ~seen, f"isolated runs without {gpu}")
        if not seen.any():
            fits[""] = fits[gpu]
        print(f"isolated fit without {gpu} ({int((~seen).sum())} training rows): {time.perf_counter() - start:.0f} s", flush=True)
    return fits


def predict_isolated(iso: IsolatedRows, fits: dict[str, StepParams]) -> pd.DataFrame:
    """J per output token and power (W) of every row of ``iso``, with the fit that did not see its GPU
    (``pred_j``, ``pred_power``) and with the roofline x TDP baseline (``base_j``, ``base_power``)."""
    tokens = pd.to_numeric(iso.rows["batch_size"]).to_numpy(float) * pd.to_numeric(iso.rows["generated_tokens"]).to_numpy(float)
    device = iso.rows["device"].astype(str).to_numpy()
    out = pd.DataFrame(np.nan, index=iso.rows.index, columns=["pred_j", "pred_power", "base_j", "base_power"])
    for gpu in sorted(set(device) & set(fits)):
        held = device == gpu
        lat, energy = iso.cost(fits[gpu])
        out.loc[held, "pred_j"], out.loc[held, "pred_power"] = energy[held] / tokens[held], energy[held] / lat[held]
    with np.errstate(invalid="ignore", divide="ignore"):  # the baseline gives no time to some rows outside the groups (0 / 0)
        lat, energy = iso.cost(roofline_tdp_params(sorted(set(iso.decode.engines))))
        out["base_j"], out["base_power"] = energy / tokens, energy / lat
    return out


def serving_frame(quick: bool) -> pd.DataFrame:
    """ML.ENERGY v2 rows of configurations on both GPUs, measured and predicted with the GPU held out."""
    from llmco2.data.importers import import_all

    rows, _ = load_rows()
    iso = isolated_rows(import_all(shared_data())[0])
    scales = (1.0,) if quick else PROMPT_SCALES
    builds = {k: serving_rows(rows, k) for k in scales}
    sr = builds[1.0]
    r = sr.rows
    v2 = (r["release"] == "v2").to_numpy()
    key = r["model"].astype(str) + "|" + r["task"].astype(str) + "|" + r["max_batch"].astype(str)
    multi = key.map(r[v2].groupby(key[v2])["device"].nunique()).fillna(0).to_numpy() >= 2
    bench = v2 & multi
    j, power = np.full(len(r), np.nan), np.full(len(r), np.nan)
    for gpu in sorted(set(r.loc[bench, "device"])):
        test = (r["device"] == gpu).to_numpy()
        start = time.perf_counter()
        if quick:
            p, built = fit_rows(sr, ~test, f"without {gpu}", iso), sr
        else:
            p, built = fit_with_prompt_scales(builds, ~test, f"without {gpu}", iso)
        idx = np.flatnonzero(test & bench)
        pred = predictions(built, p, idx)
        j[idx], power[idx] = pred["j"].to_numpy(), pred["power"].to_numpy()
        print(f"serving fit without {gpu} ({int((~test).sum())} serving rows): {time.perf_counter() - start:.0f} s", flush=True)
    idx = np.flatnonzero(bench)
    base = predictions(sr, roofline_tdp(), idx)
    implied = pd.to_numeric(r["implied_power_w"], errors="coerce").to_numpy(float)
    jm = r["j_per_output_token"].to_numpy(float)
    return pd.DataFrame({"source": V2, "group": key.to_numpy()[idx], "device": r["device"].astype(str).to_numpy()[idx],
                         "engine": r["engine"].astype(str).to_numpy()[idx], "j": jm[idx], "power": implied[idx],
                         "time": jm[idx] / implied[idx], "pred_j": j[idx], "pred_power": power[idx],
                         "base_j": base["j"].to_numpy(), "base_power": base["power"].to_numpy()})


def items(frame: pd.DataFrame) -> pd.DataFrame:
    """One item per (source, group, GPU, engine, configuration): the mean of repeated rows; only
    groups with two or more GPUs."""
    agg = frame.groupby(["source", "group", "device", "engine"], as_index=False).mean(numeric_only=True)
    n_gpus = agg.groupby(["source", "group"])["device"].transform("nunique")
    return agg[n_gpus >= 2].reset_index(drop=True)


def evaluate(it: pd.DataFrame, pred: str) -> tuple[dict[str, PairCounts], pd.DataFrame]:
    """Pair counts per source under predictions ``pred`` (``pred_j`` or ``base_j``), and one line per
    counted pair: source, GPU pair, right or wrong, and what drives a wrong pair (power or time).
    Measured J per output token and power are read from ``j`` and ``power``."""
    counts: dict[str, PairCounts] = {}
    lines = []
    power_col = pred.replace("_j", "_power")
    for (source, _), g in it.groupby(["source", "group"], sort=True):
        ok = gpu_pairs(g["device"].to_numpy(), g["engine"].to_numpy())
        m, p = g["j"].to_numpy(float), g[pred].to_numpy(float)
        counts[source] = counts.get(source, PairCounts()) + pair_counts(m, p, ok)
        pw_m, pw_p = g["power"].to_numpy(float), g[power_col].to_numpy(float)
        dev = g["device"].to_numpy()
        for a, b in zip(*np.nonzero(np.triu(ok, k=1)), strict=True):
            dm, dp = np.log(m[a] / m[b]), np.log(p[a] / p[b])
            if abs(dm) <= np.log1p(TIE_TOLERANCE) + 1e-12:
                continue
            e_power = np.log(pw_p[a] / pw_p[b]) - np.log(pw_m[a] / pw_m[b])
            e_time = (dp - dm) - e_power
            pair = " vs ".join(sorted((dev[a], dev[b])))
            lines.append({"source": source, "pair": pair, "right": bool(np.sign(dm) == np.sign(dp)), "gap": float(np.expm1(abs(dm))),
                          "driver": "power" if abs(e_power) > abs(e_time) else "time per token"})
    return counts, pd.DataFrame(lines)


def scope_lines(it: pd.DataFrame) -> pd.DataFrame:
    """Every source's items once, the Argonne ones three times (:data:`ARGONNE_CORR`, the source's line in "all";
    :data:`ARGONNE_SCOPE`; :data:`ARGONNE_GPU`), each with its measured and predicted columns in ``j``, ``power``,
    ``pred_*`` and ``base_*``."""
    arg = it["source"] == ARGONNE
    corr = it.copy()
    corr.loc[arg, "j"], corr.loc[arg, "power"] = it.loc[arg, "j_corr"], it.loc[arg, "power_corr"]
    corr.loc[arg, "source"] = ARGONNE_CORR
    scope = it[arg].assign(source=ARGONNE_SCOPE)
    for p in ("pred", "base"):
        scope[f"{p}_j"], scope[f"{p}_power"] = scope[f"{p}_j_scope"], scope[f"{p}_power_scope"]
    gpu = it[arg].assign(source=ARGONNE_GPU)
    return pd.concat([corr, scope, gpu], ignore_index=True)


def band_decided(it: pd.DataFrame) -> tuple[int, int]:
    """Of the Argonne GPU pairs the benchmark counts (the used GPUs' order, measured ties skipped), how many
    keep their measured order with the unused cards of each reading anywhere in their idle range
    (:data:`llmco2.data.scope.UNUSED_IDLE_RANGE_W`, each GPU's independently; a GPU outside it at its catalog
    figure): the order at all four pairings of the two readings' ends, which bound every point between them
    (a reading's J per token falls as its unused cards' idle rises). ``(decided, counted)``."""
    arg = it[it["source"] == ARGONNE]
    ends = []
    for k in (0, 1):
        per_card = np.array([UNUSED_IDLE_RANGE_W.get(d, (np.nan, np.nan))[k] for d in arg["device"]])
        fallback = np.divide(arg["unused_idle"], arg["unused_cards"], out=np.zeros(len(arg)), where=arg["unused_cards"] > 0)
        ends.append(arg["j"].to_numpy(float) - arg["unused_cards"].to_numpy(float)
                    * np.where(np.isfinite(per_card), per_card, fallback) * arg["time"].to_numpy(float))
    lo, hi = (pd.Series(e, index=arg.index) for e in ends)
    decided = counted = 0
    for _, g in arg.groupby("group", sort=True):
        ok = gpu_pairs(g["device"].to_numpy(), g["engine"].to_numpy())
        m = g["j_corr"].to_numpy(float)
        j_ends = (lo[g.index].to_numpy(), hi[g.index].to_numpy())
        for a, b in zip(*np.nonzero(np.triu(ok, k=1)), strict=True):
            if abs(np.log(m[a] / m[b])) <= np.log1p(TIE_TOLERANCE) + 1e-12:
                continue
            counted += 1
            pairs = [(ja[a], jb[b]) for ja in j_ends for jb in j_ends]
            signs = {np.sign(x - y) if min(x, y) > 0 else 0.0 for x, y in pairs}
            decided += int(len(signs) == 1 and 0.0 not in signs)
    return decided, counted


def report(it: pd.DataFrame, command: str, seconds: float) -> str:
    """The Markdown tables: by source and by GPU pair."""
    decided, counted = band_decided(it)
    it = scope_lines(it)
    ours, pairs = evaluate(it, "pred_j")
    base, _ = evaluate(it, "base_j")
    order = [s for s in (V2, ARGONNE_CORR, ARGONNE_SCOPE, ARGONNE_GPU, CODE_EVAL, V1) if s in ours]
    lines = ["| source | GPUs | groups | pairs (measured ties skipped) | Kendall tau | pairs right | roofline x TDP: tau | pairs right |",
             "|---|---|---|---|---|---|---|---|"]
    total, total_base = PairCounts(), PairCounts()
    for s in order:
        sub = it[it["source"] == s]
        o, b = ours[s], base[s]
        if s not in (ARGONNE_SCOPE, ARGONNE_GPU):  # "all" counts each source once
            total, total_base = total + o, total_base + b
        lines.append(f"| {s} | {', '.join(sorted(set(sub['device'])))} | {sub['group'].nunique()} | {o.pairs} ({o.measured_ties}) | "
                     f"{o.tau:.2f} | {o.share_right * 100:.0f}% | {b.tau:.2f} | {b.share_right * 100:.0f}% |")
    once = ~it["source"].isin((ARGONNE_SCOPE, ARGONNE_GPU))
    lines.append(f"| all | | {it[once].groupby(['source', 'group']).ngroups} | {total.pairs} ({total.measured_ties}) | {total.tau:.2f} | "
                 f"{total.share_right * 100:.0f}% | {total_base.tau:.2f} | {total_base.share_right * 100:.0f}% |")
    by_pair = ["| source | GPU pair | pairs | right | wrong | wrong, measured gap < 10% | wrong: power drives | wrong: time per token drives |",
               "|---|---|---|---|---|---|---|---|"]
    for (s, pair), g in pairs.groupby(["source", "pair"], sort=False):
        wrong = g[~g["right"]]
        by_pair.append(f"| {s} | {pair} | {len(g)} | {g['right'].mean() * 100:.0f}% | {len(wrong)} | {int((wrong['gap'] < 0.1).sum())} | "
                       f"{int((wrong['driver'] == 'power').sum())} | {int((wrong['driver'] == 'time per token').sum())} |")
    return "\n".join(["# Ranking benchmark: GPUs ordered by J per output token, each GPU held out of the fit", "",
                      f"`{command}` ({seconds:.0f} s; deterministic: least-squares fits, no random seed; serving lengths "
                      "drawn from the Azure traces with each row's own seed). Data: `../shared/data` (ML.ENERGY v2, Argonne "
                      "LLM-Inference-Bench, collected energy_code_eval and ML.ENERGY v1 legacy).", "",
                      "Tau: Kendall's tau within each group (model and load), averaged over groups weighted by pairs; "
                      "pairs right: share of GPU pairs in the measured order; pairs whose measurements lie within 2% "
                      "are skipped (counted in brackets).", "",
                      "Argonne's superseded commit (every Gaudi2 row, the two-GPU H100 rows) read power with probes that "
                      "sum every accelerator of the node (8 Gaudi2, 4 H100), used or not "
                      "(`llmco2.data.importers.argonne.probe_devices`). The question is which GPUs cost less, so "
                      "Argonne's line in \"all\" orders the used GPUs: GPU-scope predictions against the readings less the "
                      "unused cards' idle over the measured time, at the draw of a card no process uses "
                      "(`llmco2.specs.gpu_power.unused_power_w`: the catalog's bare idle, Gaudi2 87.5 W, H100 SXM 71.8 W). "
                      f"That order hardly rests on the idle figure: {decided} of its {counted} pairs keep their measured "
                      "order with each reading's unused cards anywhere in the range of their sourced idle readings, with or "
                      "without a model held (Gaudi2 71-112 W, H100 SXM 71.8-121.7 W), each GPU's independently. Two more "
                      "Argonne lines, reported and not in "
                      "\"all\": predictions at the probes' scope (the used GPUs' predicted power plus the unused cards' "
                      "idle over the predicted time: the order of the nodes as read, idle cards included), and GPU-scope "
                      "predictions against the readings as published. No fit reads those readings' energy "
                      "(`llmco2.data.scope`): their latency only.", "",
                      *lines, "", "## By GPU pair", "",
                      "A wrong pair is put down to power or to time per output token, whichever's predicted ratio between "
                      "the two GPUs is further from the measured one.", "", *by_pair]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="serving fits without the prompt-scale vote, no ML.ENERGY v1 rows")
    ap.add_argument("--out", type=Path, default=ROOT / "experiments/results/ranking.md")
    ap.add_argument("--items", type=Path, help="also write every compared configuration, measured and predicted, as CSV")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    start = time.perf_counter()
    train = isolated_rows(training_table())
    labels = {"argonne_llm_inference_bench.csv": ARGONNE, "energy_code_eval.csv": CODE_EVAL}
    frames = [isolated_frame(train, labels, ISOLATED_KEY)]
    isos = [train]
    if not args.quick:
        v1 = isolated_rows(v1_rows())
        frame = isolated_frame(v1, {"mlenergy_v1_legacy.csv": V1}, ("model_name", "task"))
        frames.append(frame)
        isos.append(v1)
    fits = isolated_fits(train, sorted(set(pd.concat(frames)["device"])))
    for k, (iso, frame) in enumerate(zip(isos, frames, strict=True)):
        frames[k] = frame.join(predict_isolated(iso, fits))
    frames.append(serving_frame(args.quick))
    it = items(at_scope(pd.concat(frames, ignore_index=True).fillna({"unused_idle": 0.0, "unused_cards": 0.0})))
    if args.items:
        it.to_csv(args.items, index=False)
    command = "python experiments/ranking_benchmark.py" + (" --quick" if args.quick else "")
    text = report(it, command, time.perf_counter() - start)
    print(text)
    if not args.quick:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
