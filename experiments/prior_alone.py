"""The physics prior alone, leave one data-centre device out: how far the catalog-driven physics
carries to a GPU before the network corrects it.

For each held-out device, the prior (:func:`llmco2.physics.prior_fit.fit_physics`) is fitted on
the other rows of the data config (latencies and energies, as training does) and predicts the
held-out rows. Per device and engine, the table gives the median ratios of predicted to measured
latency, average power and energy (where the row has a latency), and the median APE of energy.

    python experiments/prior_alone.py [--data conf/data/datacentre_lodo.yaml] [--holdout a100-40gb h100-sxm gaudi2]
                                      [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.data.dataset import energy_data
from llmco2.data.usable import held_out_only_rows, load_rows
from llmco2.physics.prior_fit import fit_physics
from llmco2.physics.priors import PhaseInputs, PhysicsPrior, row_values
from llmco2.training.experiment import register_resolvers

ROOT = Path(__file__).resolve().parents[1]


def held_out_ratios(prior: PhysicsPrior, table: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``table`` with the prior's energy and latency ratios to the measurement."""
    data = energy_data(table)
    x = PhaseInputs.build(data.items, *data.analysis())
    energy, latency = prior.energy_j(x)
    frame = data.table[["device", "engine", "model", "num_devices", "batch_size", "energy_j", "latency_s"]].copy()
    frame["energy_ratio"] = row_values(energy, data.config, data.phase) / frame["energy_j"]
    measured_latency = pd.to_numeric(frame["latency_s"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    frame["latency_ratio"] = row_values(latency, data.config, data.phase) / measured_latency
    frame["power_ratio"] = frame["energy_ratio"] / frame["latency_ratio"]
    frame["ape"] = (frame["energy_ratio"] - 1.0).abs()
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "conf/data/datacentre_lodo.yaml")
    parser.add_argument("--holdout", nargs="+", default=["a100-40gb", "h100-sxm", "gaudi2"])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from omegaconf import OmegaConf

    register_resolvers()
    cfg = OmegaConf.to_container(OmegaConf.load(args.data), resolve=True)
    assert isinstance(cfg, dict)
    table = load_rows(cfg["sources"], cfg.get("exclude_flags"), cfg.get("exclude_sources"), 0)
    lines = ["| held out | engine | rows | latency ratio | power ratio | energy ratio | median APE |", "|---|---|---|---|---|---|---|"]
    for device in args.holdout:
        rows, _ = held_out_only_rows(table, cfg.get("test_only"), "device", device)  # test-only files: never fitted on
        train = energy_data(rows[rows["device"] != device].reset_index(drop=True))
        frame = held_out_ratios(fit_physics(train, train), rows[rows["device"] == device].reset_index(drop=True))
        groups = [("all", frame), *frame.groupby("engine", sort=True)]
        for engine, g in groups:
            lines.append(f"| {device} | {engine} | {len(g)} | {g['latency_ratio'].median():.2f} | {g['power_ratio'].median():.2f} | "
                         f"{g['energy_ratio'].median():.2f} | {100 * g['ape'].median():.1f}% |")
    text = "\n".join(lines) + "\n"
    if args.markdown:
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
