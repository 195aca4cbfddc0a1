"""Train / validation / test splits shared by every experiment.

Splits are deterministic for a seed and **grouped by configuration**: repeated measurements of
the same (source, device, model, batch, prompt, generated, phase) always land on the same side,
so a test row never has an identical twin in training. A split is stored by row identity
(``source, source_file, source_row, phase``), not by position, so it survives reordering.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmco2.errors import InvalidInputError

PARTS = ("train", "val", "test")
ROW_KEY = ("source", "source_file", "source_row", "phase")
CONFIG_KEY = ("source", "device", "num_devices", "model", "batch_size", "prompt_tokens", "generated_tokens", "weight_bits",
              "phase")
CO2METER_TRACE_FILE = "train_trace.csv"
CO2METER_UNIFORM_FILE = "train_uniform.csv"


@dataclass
class Split:
    """Row positions of each part of a table, and how they were made."""

    name: str
    parts: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)

    def frame(self, df: pd.DataFrame, part: str) -> pd.DataFrame:
        """The rows of ``part`` (``train``, ``val`` or ``test``)."""
        return df.iloc[self.parts[part]].reset_index(drop=True)

    def sizes(self) -> dict[str, int]:
        return {p: int(len(ix)) for p, ix in self.parts.items()}

    def assignment(self, df: pd.DataFrame) -> pd.DataFrame:
        """Row identity and part of every assigned row (what :meth:`save` writes)."""
        cols = [c for c in ROW_KEY if c in df.columns]
        frames = []
        for part, ix in self.parts.items():
            f = df.iloc[ix][cols].copy()
            f["part"] = part
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    def save(self, df: pd.DataFrame, folder: str | Path) -> Path:
        """Write ``split.csv`` (row identity -> part) and ``split.json`` (name, sizes, meta)."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        self.assignment(df).to_csv(out / "split.csv", index=False)
        (out / "split.json").write_text(json.dumps({"name": self.name, "sizes": self.sizes(), "meta": self.meta}, indent=2,
                                                   default=str))
        return out / "split.csv"

    @classmethod
    def load(cls, df: pd.DataFrame, folder: str | Path) -> Split:
        """Rebuild a saved split against ``df`` (rows matched by identity; missing rows are an error)."""
        folder = Path(folder)
        meta = json.loads((folder / "split.json").read_text())
        assign = pd.read_csv(folder / "split.csv", dtype={"source": str, "source_file": str, "phase": str})
        cols = [c for c in ROW_KEY if c in assign.columns and c != "part"]
        keyed = df[cols].astype(str).reset_index(drop=True)
        keyed["_pos"] = np.arange(len(df))
        merged = assign.astype({c: str for c in cols}).merge(keyed, on=cols, how="left")
        if merged["_pos"].isna().any():
            raise InvalidInputError(f"{folder}: {int(merged['_pos'].isna().sum())} rows of the saved split are not in the table",
                                    field="split")
        parts = {p: merged.loc[merged["part"] == p, "_pos"].astype(int).to_numpy() for p in PARTS if (merged["part"] == p).any()}
        return cls(meta["name"], parts, meta.get("meta", {}))


def config_groups(df: pd.DataFrame) -> np.ndarray:
    """Group id per row: identical configurations share an id (nulls compare equal)."""
    cols = [c for c in CONFIG_KEY if c in df.columns]
    if not cols:
        return np.arange(len(df))
    keys = df[cols].astype("string").fillna("<NA>")
    return keys.groupby(cols, sort=True, dropna=False).ngroup().to_numpy()


def _assign_groups(groups: np.ndarray, fractions: dict[str, float], seed: int) -> dict[str, np.ndarray]:
    """Shuffle the distinct groups with ``seed`` and cut them by ``fractions`` (of groups)."""
    uniq = np.unique(groups)
    rng = np.random.default_rng(seed)
    order = rng.permutation(uniq)
    n = len(order)
    n_test = int(round(fractions.get("test", 0.0) * n))
    n_val = int(round(fractions.get("val", 0.0) * n))
    chosen = {"test": order[:n_test], "val": order[n_test:n_test + n_val], "train": order[n_test + n_val:]}
    return {p: np.flatnonzero(np.isin(groups, g)) for p, g in chosen.items() if len(g) or p == "train"}


def _check_fractions(test_fraction: float, val_fraction: float) -> None:
    for name, value in (("test_fraction", test_fraction), ("val_fraction", val_fraction)):
        if not 0 <= value < 1:
            raise InvalidInputError(f"must be in [0, 1), got {value}", field=name)
    if test_fraction + val_fraction >= 1:
        raise InvalidInputError("test_fraction + val_fraction must leave rows to train on", field="test_fraction")


def random_split(df: pd.DataFrame, test_fraction: float = 0.2, val_fraction: float = 0.1, seed: int = 0) -> Split:
    """Random split of configuration groups into train / val / test."""
    _check_fractions(test_fraction, val_fraction)
    parts = _assign_groups(config_groups(df), {"test": test_fraction, "val": val_fraction}, seed)
    return Split("random", parts, {"seed": seed, "test_fraction": test_fraction, "val_fraction": val_fraction})


def leave_one_out(df: pd.DataFrame, column: str, holdout: str, val_fraction: float = 0.1, seed: int = 0) -> Split:
    """Test on every row whose ``column`` (``model`` or ``device``) is ``holdout``; train (and
    validate) on the rest."""
    if column not in df.columns:
        raise InvalidInputError(f"the table has no column {column!r}", field="column")
    values = df[column].astype("string")
    if not (values == holdout).any():
        known = ", ".join(sorted(values.dropna().unique()))
        raise InvalidInputError(f"no row has {column} = {holdout!r}; present: {known}", field="holdout")
    test = np.flatnonzero((values == holdout).fillna(False).to_numpy())
    rest = np.flatnonzero((values != holdout).fillna(True).to_numpy())
    inner = _assign_groups(config_groups(df.iloc[rest]), {"val": val_fraction}, seed)
    parts = {"train": rest[inner["train"]], "test": test}
    if "val" in inner:
        parts["val"] = rest[inner["val"]]
    return Split(f"leave_one_{column}_out", parts, {"column": column, "holdout": holdout, "seed": seed})


def leave_each_out(df: pd.DataFrame, column: str, val_fraction: float = 0.1, seed: int = 0) -> Iterator[Split]:
    """:func:`leave_one_out` for every distinct value of ``column``."""
    for value in sorted(df[column].astype("string").dropna().unique()):
        yield leave_one_out(df, column, str(value), val_fraction, seed)


def co2meter_trace_vs_uniform(df: pd.DataFrame, test_fraction: float = 0.2, val_fraction: float = 0.1,
                              seed: int = 0) -> tuple[Split, Split]:
    """The paper's sampling ablation on real data: two splits sharing one test set.

    The test set is held-out trace-sampled requests (configuration groups of ``train_trace.csv``).
    ``trace`` trains on the other trace-sampled rows; ``uniform`` trains on ``train_uniform.csv``
    rows, subsampled (by configuration group) to the same number of training rows so that only
    the sampling differs. Rows of other sources are ignored.
    """
    _check_fractions(test_fraction, val_fraction)
    files = df["source_file"].astype("string") if "source_file" in df.columns else pd.Series(dtype="string")
    is_co2 = (df["source"].astype("string") == "co2meter").fillna(False).to_numpy()
    trace_rows = np.flatnonzero(is_co2 & (files == CO2METER_TRACE_FILE).fillna(False).to_numpy())
    uniform_rows = np.flatnonzero(is_co2 & (files == CO2METER_UNIFORM_FILE).fillna(False).to_numpy())
    if not len(trace_rows) or not len(uniform_rows):
        raise InvalidInputError(f"the table needs co2meter rows from both {CO2METER_TRACE_FILE} and {CO2METER_UNIFORM_FILE}",
                                field="source_file")
    t = _assign_groups(config_groups(df.iloc[trace_rows]), {"test": test_fraction, "val": val_fraction}, seed)
    test = trace_rows[t["test"]]
    val = trace_rows[t.get("val", np.array([], dtype=int))]
    trace_train = trace_rows[t["train"]]
    u_groups = config_groups(df.iloc[uniform_rows])
    rng = np.random.default_rng(seed + 1)
    order = rng.permutation(np.unique(u_groups))
    counts = np.bincount(u_groups)
    cum = np.cumsum(counts[order])
    keep = order[: int(np.searchsorted(cum, len(trace_train)) + 1)]
    uniform_train = uniform_rows[np.isin(u_groups, keep)]
    meta = {"seed": seed, "test_fraction": test_fraction, "val_fraction": val_fraction}
    return (Split("co2meter_trace", {"train": trace_train, "val": val, "test": test}, {**meta, "train_file": CO2METER_TRACE_FILE}),
            Split("co2meter_uniform", {"train": uniform_train, "val": val, "test": test},
                  {**meta, "train_file": CO2METER_UNIFORM_FILE}))


SPLITTERS = {"random": random_split, "leave_one_out": leave_one_out, "co2meter_trace_vs_uniform": co2meter_trace_vs_uniform}
