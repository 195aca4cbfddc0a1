"""The step physics alone on isolated batch runs, leave one data-centre GPU out.

For each held-out GPU the constants of the step physics (:mod:`llmco2.physics.step_physics`) are
fitted on the isolated runs of every other GPU (:func:`llmco2.physics.step_isolated.fit_isolated`'s
settings: latency and power of each source, robust log loss) and predict the held-out GPU's rows
from its catalog entry alone. Beside it: a roofline latency x TDP estimate with nothing fitted
(every kernel at the catalog peak that binds it, no overheads, the GPU at its power limit: what
llm-analysis and LLM-Viewer give with efficiencies of 1).

Rows: the isolated sources of :data:`llmco2.physics.step_isolated.SOURCES` in the data config
(flagged rows left out as in training; bitsandbytes rows left out). Per held-out GPU: median APE of
energy, latency and average power (power and energy only where the row's energy is usable; a node-wide
reading, which no fit reads, at its scope: the prediction plus the unused devices' idle power over
the predicted time, :func:`errors`; those rows again at both ends of the unused cards' sourced idle range).

    python experiments/step_lodo.py [--data conf/data/datacentre_lodo.yaml] [--markdown experiments/results/step_lodo.md]
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.data.scope import UNUSED_IDLE_RANGE_W, extra_devices, unused_idle_w
from llmco2.data.usable import load_rows
from llmco2.physics.step_isolated import IsolatedRows, fit_isolated_rows, isolated_rows
from llmco2.physics.step_physics import StepParams, roofline_tdp_params
from llmco2.training.experiment import register_resolvers

ROOT = Path(__file__).resolve().parents[1]
#: The collected rows (``../shared/data/collected``) beside the data config's sources.
COLLECTED = ("collected/energy_code_eval.csv", "collected/hb_thesis_a100pcie.csv", "collected/mlenergy_v1_legacy.csv")
MIN_ROWS = 5


def fit_without(iso: IsolatedRows, train: np.ndarray) -> StepParams:
    """Constants fitted on the isolated rows under ``train`` (``fit_isolated``'s settings)."""
    return fit_isolated_rows(iso, train, "isolated runs without the held-out GPU")


def errors(iso: IsolatedRows, p: StepParams, rows: np.ndarray, card_w: float | None = None) -> dict[str, float]:
    """Median APE (%) of energy, latency and power of ``rows``, and the rows behind each. A reading
    that sums devices the run did not use (no fit reads it: :mod:`llmco2.data.scope`) is compared at
    its scope: the prediction plus those devices' idle power over the predicted time (a card no process
    uses, :func:`llmco2.data.scope.unused_idle_w`; ``card_w``: each at that draw instead, W)."""
    lat, energy = iso.cost(p)
    idle = unused_idle_w(iso.rows) if card_w is None else extra_devices(iso.rows) * card_w
    energy = energy + idle * lat
    lat_m = pd.to_numeric(iso.rows["latency_s"], errors="coerce").to_numpy(float)
    e_m = pd.to_numeric(iso.rows["energy_j"], errors="coerce").to_numpy(float)
    has_lat = rows & np.isfinite(lat_m) & (lat_m > 0)
    has_e = has_lat & (iso.usable_energy | iso.node_wide_energy) & np.isfinite(e_m) & (e_m > 0)

    def mdape(pred: np.ndarray, meas: np.ndarray, sel: np.ndarray) -> float:
        ape = np.abs(pred[sel] / meas[sel] - 1.0)
        ape = np.where(np.isfinite(ape), ape, np.inf)  # a prediction of no time (0 / 0) counts as the worst
        return float(np.median(ape) * 100) if sel.any() else float("nan")

    return {"energy": mdape(energy, e_m, has_e), "latency": mdape(lat, lat_m, has_lat),
            "power": mdape(energy / lat, e_m / lat_m, has_e), "energy_rows": int(has_e.sum()), "latency_rows": int(has_lat.sum())}


def range_line(iso: IsolatedRows, p: StepParams, rows: np.ndarray, gpu: str) -> str:
    """A table row: the node-wide ``rows`` of ``gpu`` judged with every unused card at the low, then the high
    end of :data:`llmco2.data.scope.UNUSED_IDLE_RANGE_W`."""
    lo, hi = (errors(iso, p, rows, card_w) for card_w in UNUSED_IDLE_RANGE_W[gpu])
    w = UNUSED_IDLE_RANGE_W[gpu]
    return (f"| {gpu} | {lo['energy_rows']} | {w[0]:g} / {w[1]:g} | {pct(lo['energy'])} / {pct(hi['energy'])} | "
            f"{pct(lo['power'])} / {pct(hi['power'])} |")


def pct(value: float) -> str:
    """A median APE (%) for the tables; a dash where no row could be compared (e.g. no usable energy)."""
    return f"{value:.1f}%" if np.isfinite(value) else "-"


def unfitted_rows() -> list[tuple[str, IsolatedRows]]:
    """Rows of GPUs that no fit learns from, each with what keeps it out of the fits: ML.ENERGY v1's
    batch-1 HF runs (prompt lengths unpublished: run at the task's prompt length as
    ``experiments/ranking_benchmark.py`` does; the GPU variant unstated), the thesis runs on
    A100-PCIe-40GB (host-bound: HF generate on four processes) and ``llmco2 measure``'s own rows in
    ``data/measurements/`` (no data config lists them)."""
    from ranking_benchmark import V1_PROMPT_TOKENS, v1_rows  # experiments/ is the script's folder

    from llmco2.data.importers import import_file
    from llmco2.data.paths import shared_data

    v1 = isolated_rows(v1_rows())
    thesis = import_file("collected", shared_data("collected/hb_thesis_a100pcie.csv")).table
    return [(f"ML.ENERGY v1 (HF at batch 1, prompts unpublished: {int(V1_PROMPT_TOKENS)} tokens assumed)", v1),
            ("thesis runs (HF generate on four processes: host-bound)", isolated_rows(thesis, host_bound=True)),
            *own_measurements()]


def own_measurements() -> list[tuple[str, IsolatedRows]]:
    """``llmco2 measure``'s tables in ``data/measurements/`` (random weights; see its README)."""
    from llmco2.data.schema import read_table

    out = []
    for path in sorted((ROOT / "data" / "measurements").glob("*.csv")):
        if path.name.startswith("configs"):
            continue
        table, _ = read_table(path)
        out.append((f"`llmco2 measure` (HF eager and static cache, random weights): {path.name}", isolated_rows(table)))
    return out


def unfitted_gpus(fitted: StepParams, engines: list[str]) -> list[str]:
    """Markdown lines: the fit on every row (which never saw these GPUs) on :func:`unfitted_rows`."""
    lines = ["## GPUs no fit learns from", "",
             "Predicted by the constants fitted on every row above (none of these rows is in any fit).", "",
             "| rows | GPU | energy rows | step physics: energy MdAPE | latency MdAPE | power MdAPE | roofline x TDP: energy MdAPE | power MdAPE |",
             "|---|---|---|---|---|---|---|---|"]
    for label, iso in unfitted_rows():
        device = iso.rows["device"].astype(str).to_numpy()
        for g in sorted(set(device)):
            sel = device == g
            ours, base = errors(iso, fitted, sel), errors(iso, roofline_tdp_params(engines), sel)
            lines.append(f"| {label} | {g} | {ours['energy_rows']} | {ours['energy']:.1f}% | {ours['latency']:.1f}% | "
                         f"{ours['power']:.1f}% | {base['energy']:.1f}% | {base['power']:.1f}% |")
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "conf/data/datacentre_lodo.yaml")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--holdout", nargs="*", default=None, help="GPUs to hold out (default: every GPU with energy rows)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from omegaconf import OmegaConf

    register_resolvers()
    cfg = OmegaConf.to_container(OmegaConf.load(args.data), resolve=True)
    assert isinstance(cfg, dict)
    sources = [s for s in cfg["sources"] if s["format"] != "co2meter"]
    root = Path(next(s["path"] for s in sources if s["format"] == "argonne")).parents[1]
    have = {str(Path(s["path"]).resolve()) for s in sources}
    sources += [{"format": "collected", "path": str(root / rel)} for rel in COLLECTED if str((root / rel).resolve()) not in have]
    start = time.perf_counter()
    table = load_rows(sources, cfg.get("exclude_flags"), cfg.get("exclude_sources"), 0)
    iso = isolated_rows(table)
    device = iso.rows["device"].astype(str).to_numpy()
    e_ok = (iso.usable_energy | iso.node_wide_energy) & np.isfinite(pd.to_numeric(iso.rows["energy_j"], errors="coerce").to_numpy(float))
    gpus = args.holdout or sorted(g for g in set(device) if (e_ok & (device == g)).sum() >= MIN_ROWS)
    engines = sorted(set(iso.decode.engines))
    lines = [f"Rows: {len(iso.rows)} isolated runs ({', '.join(f'{k} {v}' for k, v in iso.rows['source'].value_counts().items())}); "
             f"`python experiments/step_lodo.py` (deterministic: least squares, no random seed). Readings that sum "
             "devices the run did not use (Argonne's Gaudi2 rows, its two-card H100 rows; no fit reads their energy) are "
             "compared at their scope: the prediction plus those devices' idle power over the predicted time (a card no "
             "process uses: `llmco2.specs.gpu_power.unused_power_w`, Gaudi2 87.5 W, H100 SXM 71.8 W).", "",
             "| held out | energy rows | step physics: energy MdAPE | latency MdAPE | power MdAPE | roofline x TDP: energy MdAPE | power MdAPE |",
             "|---|---|---|---|---|---|---|"]
    summary, ranges = [], []
    for g in gpus:
        held = device == g
        p = fit_without(iso, ~held)
        ours, base = errors(iso, p, held), errors(iso, roofline_tdp_params(engines), held)
        summary.append(ours)
        if g in UNUSED_IDLE_RANGE_W and (held & iso.node_wide_energy).any():
            ranges.append(range_line(iso, p, held & iso.node_wide_energy, g))
        lines.append(f"| {g} | {ours['energy_rows']} | {pct(ours['energy'])} | {pct(ours['latency'])} | {pct(ours['power'])} | "
                     f"{pct(base['energy'])} | {pct(base['power'])} |")
        print(lines[-1], flush=True)
    mean = {k: float(np.nanmean([s[k] for s in summary])) for k in ("energy", "latency", "power")}
    lines.append(f"| mean of the held-out GPUs (energy and power: those with energy rows) | | {pct(mean['energy'])} | "
                 f"{pct(mean['latency'])} | {pct(mean['power'])} | | |")
    if ranges:
        lines += ["", "Readings that sum unused cards, held out with their GPU, with every unused card at either end of its "
                  "sourced idle range (`llmco2.data.scope.UNUSED_IDLE_RANGE_W`; a card with no process on it or with a model "
                  "held) and at the catalog's bare idle (the table above):", "",
                  "| held out | node-wide rows | unused card's idle (W) | energy MdAPE | power MdAPE |", "|---|---|---|---|---|", *ranges]
    all_rows = np.ones(len(device), dtype=bool)
    fitted = fit_without(iso, all_rows)
    e = errors(iso, fitted, all_rows)
    lines += ["", f"Fitted on every row, judged on every row: energy {e['energy']:.1f}%, latency {e['latency']:.1f}%, "
              f"power {e['power']:.1f}% median APE ({time.perf_counter() - start:.0f} s in all).", "",
              "Constants fitted on every row: " + ", ".join(f"{k} {fitted.to_dict()[k]:.4g}" for k in
                                                           ("eta_compute", "eta_memory", "kernel_gap_s", "power_base",
                                                            "memory_pj_per_byte", "op_pj_7nm", "op_node_exp"))]
    lines += ["", *unfitted_gpus(fitted, engines)]
    text = "# Step physics alone, leave one GPU out (isolated batch runs)\n\n" + "\n".join(lines) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
