"""Tables of the data-centre experiments (leave one device / source / engine out; edge check;
random-split interval coverage) from their run folders, as Markdown.

    python experiments/summarize_datacentre.py outputs/exp10 [--markdown OUT.md]

Every run folder holds ``metrics.json`` (written by ``python -m llmco2.models.experiment``); a
table row is one held-out group, columns are the predictors' test metrics on it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MODEL_ORDER = ("llmco2", "llmco2_tdp_prior", "gbt", "llmcarbon")
LABELS = {"llmco2": "llmco2 (after)", "llmco2_tdp_prior": "llmco2, TDP prior (before)", "gbt": "gbt",
          "llmcarbon": "llmcarbon"}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    runs = load(args.root)
    parts = []
    for exp in sorted({r["experiment"] for r in runs}):
        parts.append(f"### {exp}\n\n" + table([r for r in runs if r["experiment"] == exp]))
    text = "\n\n".join(parts) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
