"""Summary figure of a measurement table: energy per token against batch and context, per model.

Left: decode energy per generated token and sequence (J) against the batch size. Right: prefill
energy per prompt token and sequence (J) against the prompt length. One colour per model, one
marker per engine (``hf`` o, ``hf-static`` ^, others s). Rows flagged ``counter_quantised`` are
left out (their count is in the title).

``python -m llmco2.measure.figures data/measurements --out data/measurements/summary_h100.png``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.errors import InvalidInputError

MARKERS = {"hf": "o", "hf-static": "^"}
QUANTISED = "counter_quantised"


def read_measurements(path: Path) -> pd.DataFrame:
    """A canonical table, or every canonical table of a folder (failure logs and configuration lists left out)."""
    from llmco2.data.schema import concat_tables, read_table

    if path.is_dir():
        files = sorted(p for p in path.glob("*.csv") if not p.name.endswith(".failed.csv") and not p.name.startswith("configs"))
        return concat_tables(read_table(p)[0] for p in files)
    return read_table(path)[0]


def per_token(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Decode and prefill rows with ``j_per_token`` (J per token and sequence), and the rows left out as quantised."""
    flags = table["flag"].fillna("").astype(str)
    quantised = flags.str.contains(QUANTISED).to_numpy()
    usable = table.loc[~quantised & table["energy_j"].notna().to_numpy()]
    decode = usable[(usable["phase"] == "decode") & (usable["generated_tokens"] > 1)].copy()
    decode["j_per_token"] = decode["energy_j"] / (decode["batch_size"] * (decode["generated_tokens"] - 1))
    prefill = usable[(usable["phase"] == "prefill") & (usable["prompt_tokens"] > 0)].copy()
    prefill["j_per_token"] = prefill["energy_j"] / (prefill["batch_size"] * prefill["prompt_tokens"])
    return decode, prefill, int(quantised.sum())


def plot_summary(table: pd.DataFrame, out: Path, title: str = "") -> Path:
    """Draw the two panels of ``table`` into ``out`` (.png, .pdf or .svg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise InvalidInputError(f"{out}: use .png, .pdf or .svg", field="out")
    decode, prefill, left_out = per_token(table)
    if not len(decode) and not len(prefill):
        raise InvalidInputError("no usable prefill or decode rows to plot", field="path")
    models = sorted(set(decode["model"]) | set(prefill["model"]))
    colours = dict(zip(models, plt.cm.tab20(np.linspace(0, 1, max(len(models), 2))), strict=False))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, rows, x, xlabel, ylabel in ((axes[0], decode, "batch_size", "batch size", "decode J per generated token and sequence"),
                                        (axes[1], prefill, "prompt_tokens", "prompt tokens", "prefill J per prompt token and sequence")):
        for (model, engine), group in rows.groupby(["model", "engine"], dropna=False):
            ax.scatter(group[x].astype(float), group["j_per_token"].astype(float), s=18, color=colours[model],
                       marker=MARKERS.get(str(engine), "s"), label=f"{model} ({engine})", alpha=0.8)
        ax.set_xscale("log", base=2 if x == "batch_size" else 10)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle((title + ": " if title else "") + f"{len(decode)} decode and {len(prefill)} prefill rows"
                 + (f" ({left_out} counter_quantised rows left out)" if left_out else ""))
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmco2.measure.figures", description="Summary figure of measured energy.")
    parser.add_argument("path", help="canonical table or folder of them (e.g. data/measurements)")
    parser.add_argument("--out", required=True, help="image file (.png, .pdf, .svg)")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    try:
        plot_summary(read_measurements(Path(args.path)), Path(args.out), args.title)
    except InvalidInputError as exc:
        sys.stderr.write(f"llmco2: error: {exc}\n")
        return 2
    sys.stderr.write(f"wrote {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
