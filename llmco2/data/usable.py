"""Which measured rows an energy fit may learn from: unreliable flags, energy-counter windows too
short to read, steady-state averages; and loading a data config's sources into one table with
those rows left out (and logged)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from llmco2.data.schema import concat_tables
from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)


#: Flags that mark a row's energy as unreliable (see the importers).
UNRELIABLE_FLAGS = ("power_includes_idle_gpus", "power_exceeds_tdp", "repeat_outlier", "device_assumed", "counter_quantised",
                    "power_near_idle", "flagged_in_source", "device_proxy")
#: An NVML energy-counter window shorter than this (s) reads 0 J or one whole counter increment
#: (``../shared/data/h100_hf/README.md``: 17-180 ms prefill windows on an H100), so its energy is unusable.
MIN_NVML_WINDOW_S = 0.2
#: Repeats whose standard deviation exceeds their mean: one repeat read 0 J (a quantised counter).
MAX_REPEAT_CV = 1.0


def usable_rows(table: pd.DataFrame, exclude_flags: tuple[str, ...] = UNRELIABLE_FLAGS,
                exclude_sources: dict[str, str] | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """Rows to learn energy from and what was left out (reason -> rows): sources in
    ``exclude_sources`` (name -> reason), rows carrying an ``exclude_flags`` flag (by default
    :data:`UNRELIABLE_FLAGS`, ``counter_quantised`` included), energy-counter readings over windows
    too short for the counter or with a 0 J repeat, steady-state averages (no prompt lengths)."""
    left: dict[str, int] = {}
    keep = np.ones(len(table), dtype=bool)
    for source, reason in (exclude_sources or {}).items():
        mask = (table["source"] == source).to_numpy()
        left[f"{source}: {reason}"] = int((mask & keep).sum())
        keep &= ~mask
    flags = table["flag"].fillna("").astype(str)
    for flag in exclude_flags:
        mask = flags.str.contains(flag, regex=False).to_numpy()
        if (mask & keep).any():
            left[f"flag {flag}"] = int((mask & keep).sum())
        keep &= ~mask
    left.update(_quantised(table, keep))
    keep &= ~_quantised_mask(table)
    steady = (table["level"] == "steady_state").to_numpy()
    left["steady-state averages (no prompt lengths)"] = int((steady & keep).sum())
    keep &= ~steady
    return table[keep].reset_index(drop=True), {k: v for k, v in left.items() if v}


def _quantised_mask(table: pd.DataFrame) -> np.ndarray:
    """Rows whose energy counter was read over too short a window, or whose repeats include a 0 J
    reading (``energy_std_j > energy_j``). The window is the row's ``window_s`` where the row records
    one (``llmco2 measure`` runs ``k`` short passes in one window of a second or more and divides
    by ``k``), else its latency (one pass per window)."""
    def col(name: str) -> pd.Series:
        return pd.to_numeric(table[name], errors="coerce") if name in table.columns else pd.Series(np.nan, index=table.index)

    nvml = table["measurement"].astype("string").fillna("").str.startswith("nvml").to_numpy(dtype=bool) \
        if "measurement" in table.columns else np.zeros(len(table), dtype=bool)
    window_s = col("window_s").fillna(col("latency_s"))
    short = nvml & (window_s < MIN_NVML_WINDOW_S).fillna(False).to_numpy(dtype=bool)
    zero_repeat = (col("energy_std_j") > MAX_REPEAT_CV * col("energy_j")).fillna(False).to_numpy(dtype=bool)
    return short | zero_repeat


def _quantised(table: pd.DataFrame, keep: np.ndarray) -> dict[str, int]:
    n = int((_quantised_mask(table) & keep).sum())
    return {f"energy counter read over < {MIN_NVML_WINDOW_S} s or a 0 J repeat (quantised)": n} if n else {}


def load_rows(sources: list[dict[str, Any]], exclude_flags: list[str] | None = None,
              exclude_sources: dict[str, str] | None = None, seed: int = 0) -> pd.DataFrame:
    """Import every ``{format, path}`` source into one canonical table, leaving out (and logging)
    the rows the data config excludes. A source with ``max_rows`` keeps a seeded random sample of
    that many rows (to keep an experiment's cost modest where a source has tens of thousands); one
    with ``assume_prompt_tokens`` and ``round_mean_tokens`` is read as in :func:`assume_mean_request`."""
    from llmco2.config_checks import MAX_ROWS, check_value
    from llmco2.data.importers import import_file

    for src in sources:  # every count before any file is read; null: every row
        if src.get("max_rows") is not None:
            check_value(src["max_rows"], "max_rows", *MAX_ROWS)
    tables = []
    for src in sources:
        max_rows = src.get("max_rows")
        result = import_file(src["format"], src["path"])
        log.info(result.summary())
        table = result.table
        if max_rows is not None and len(table) > max_rows:
            table = table.sample(n=max_rows, random_state=seed).sort_index().reset_index(drop=True)
            log.info("kept a random %d of the rows of %s", max_rows, src["path"])
        if src.get("assume_prompt_tokens") is not None or src.get("round_mean_tokens"):
            table = assume_mean_request(table, src.get("assume_prompt_tokens"), bool(src.get("round_mean_tokens")))
        tables.append(table)
    table = concat_tables(tables)
    if exclude_flags or exclude_sources:
        table, left = usable_rows(table, tuple(exclude_flags or ()), exclude_sources)
        if left:
            log.info("left out %s", ", ".join(f"{n} rows: {r}" for r, n in left.items()))
    return table


def assume_mean_request(table: pd.DataFrame, prompt_tokens: int | None, round_tokens: bool) -> pd.DataFrame:
    """Rows that are a mean request over many (ML.ENERGY v1's batch-1 means) as one modelled request:
    a null ``prompt_tokens`` set to ``prompt_tokens`` (an assumption the data config states; the rows
    keep their ``prompt_tokens_unknown`` flag) and, with ``round_tokens``, a fractional
    ``generated_tokens`` rounded to the nearest count (at least 1) with energy and latency scaled by the
    same factor, so that J and seconds per output token are unchanged (as
    ``experiments/ranking_benchmark.py``'s ``v1_rows`` does)."""
    table = table.copy()
    if prompt_tokens is not None:
        if int(prompt_tokens) < 1:
            raise InvalidInputError(f"assume_prompt_tokens must be a positive count, not {prompt_tokens!r}",
                                    field="assume_prompt_tokens")
        prompt = pd.to_numeric(table["prompt_tokens"], errors="coerce")
        table["prompt_tokens"] = prompt.fillna(int(prompt_tokens)).astype(table["prompt_tokens"].dtype)
    if round_tokens:
        mean = pd.to_numeric(table["generated_tokens"], errors="coerce").to_numpy(float, na_value=np.nan)
        rounded = np.where(np.isfinite(mean), np.maximum(np.rint(mean), 1.0), np.nan)
        factor = np.where(np.isfinite(mean) & (mean > 0), rounded / mean, 1.0)
        table["generated_tokens"] = pd.array(rounded, dtype=table["generated_tokens"].dtype)
        for name in ("energy_j", "latency_s"):
            table[name] = pd.array(pd.to_numeric(table[name], errors="coerce").to_numpy(float, na_value=np.nan) * factor,
                                   dtype=table[name].dtype)
    return table


def held_out_only_rows(table: pd.DataFrame, test_only: dict[str, str] | None, column: str | None = None,
                   holdout: str | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """Leave out the rows of the data config's ``test_only`` files (``source_file`` -> why no fit may
    learn from them) except those a leave-one-out split tests on (``column`` equal to ``holdout``):
    they are predicted when their group is held out and are in no other run's training or validation
    rows. Returns the table and what was left out (reason -> rows)."""
    if not test_only or "source_file" not in table.columns:
        return table, {}
    files = table["source_file"].astype("string")
    held = (table[column].astype("string") == holdout).fillna(False).to_numpy(bool) if column and holdout is not None \
        else np.zeros(len(table), dtype=bool)
    keep = np.ones(len(table), dtype=bool)
    left: dict[str, int] = {}
    for name, reason in test_only.items():
        mask = (files == name).fillna(False).to_numpy(bool) & ~held
        if mask.any():
            left[f"{name} (test only: {reason})"] = int(mask.sum())
        keep &= ~mask
    return table[keep].reset_index(drop=True), left


def family(model_id: str) -> str:
    """Model family of a catalog id (``qwen2-7b`` -> ``qwen2``)."""
    from llmco2.specs import get_model

    try:
        arch = get_model(model_id)
        return arch.family or model_id.rsplit("-", 1)[0]
    except InvalidInputError:
        return model_id.rsplit("-", 1)[0]
