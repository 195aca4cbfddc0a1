"""Two checkpoints side by side, per architecture family and per device group: request-level
accuracy on the shipped checkpoint's validation rows, and on the rows of GPUs neither saw.

The validation rows are those ``experiments/train_default.py`` holds out (the same split: usable
rows of ``../shared/data``, random 10% grouped by configuration, ``--seed``), so both checkpoints
are judged on rows they were not trained on when both were trained by that script with that seed.
A family is the kind of attention, MLP and positional scheme (:mod:`llmco2.specs.families`).

    python experiments/compare_checkpoints.py --old OLD.safetensors [--new llmco2/prediction/checkpoints/default.safetensors]
                                              [--markdown experiments/results/checkpoint_families.md]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pandas as pd

from llmco2.data.dataset import energy_data
from llmco2.data.importers import import_all
from llmco2.data.paths import shared_data
from llmco2.data.splits import random_split
from llmco2.data.usable import usable_rows
from llmco2.specs.families import architecture_family
from llmco2.training.metrics import scores
from llmco2.training.train import GNNPredictor

ROOT = Path(__file__).resolve().parents[1]
EXCLUDED_SOURCES = {"wilkins": "generation without a KV cache", "delavande": "codecarbon counted other GPUs"}


def validation_rows(seed: int) -> pd.DataFrame:
    """The validation rows of ``train_default.py`` (same filters, split and seed)."""
    table = import_all(shared_data())[0]
    rows, _ = usable_rows(table, exclude_sources=EXCLUDED_SOURCES)
    uniform = ((rows["source"] == "co2meter") & (rows["source_file"] == "train_uniform.csv")).to_numpy()
    rows = rows[~uniform].reset_index(drop=True)
    split = random_split(rows, test_fraction=0.0, val_fraction=0.1, seed=seed)
    return split.frame(rows, "val")


def predictions(model: GNNPredictor, frame: pd.DataFrame) -> pd.DataFrame:
    data = energy_data(frame)
    out = data.table[["device", "model", "source"]].copy()
    out["family"] = [architecture_family(data.items[c][0]) for c in data.config]
    out["group"] = ["edge" if data.items[c][2].form_factor in ("module", "SoC") else "data-centre" for c in data.config]
    out["energy_j"] = data.energy_j
    out["predicted_j"] = model.predict_rows(data)
    return out


def table(old: pd.DataFrame, new: pd.DataFrame, by: str) -> list[str]:
    lines = [f"| {by} | rows | old median APE | new median APE | old EBA(10%) | new EBA(10%) |", "|---|---|---|---|---|---|"]
    for key, g in new.groupby(by, sort=True):
        o = scores(old.loc[g.index, "predicted_j"], g["energy_j"])
        n = scores(g["predicted_j"], g["energy_j"])
        lines.append(f"| {key} | {n['n']} | {100 * o['median_ape']:.1f}% | {100 * n['median_ape']:.1f}% | "
                     f"{100 * o['eba_10']:.1f}% | {100 * n['eba_10']:.1f}% |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, default=ROOT / "llmco2/prediction/checkpoints/default.safetensors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    val = validation_rows(args.seed)
    old, new = (predictions(GNNPredictor.load(p), val) for p in (args.old, args.new))
    text = [f"# Checkpoints compared: {args.old.name} (old) and {args.new.name} (new)", "",
            f"Validation rows of `experiments/train_default.py --seed {args.seed}` ({len(new)} rows), as the data imports "
            "now. Where the import changed between the two trainings (a relabelled engine changes the configuration "
            "groups the split shuffles), the old checkpoint may have trained on some of these rows, which favours it.", "",
            "`python experiments/compare_checkpoints.py " + f"--old {args.old} --new {args.new}`", "",
            "## Per architecture family", "", *table(old, new, "family"), "",
            "## Per device group", "", *table(old, new, "group"), "", "## Per device", "", *table(old, new, "device"), ""]
    if args.markdown:
        args.markdown.write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
