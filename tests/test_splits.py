"""Splits: deterministic, grouped by configuration, stored by row identity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmco2.data.splits import Split, co2meter_trace_vs_uniform, config_groups, leave_each_out, leave_one_out, random_split
from llmco2.errors import InvalidInputError


def table(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    files = rng.choice(["train_trace.csv", "train_uniform.csv"], n)
    return pd.DataFrame({
        "source": "co2meter", "source_file": files, "source_row": np.arange(1, n + 1),
        "device": rng.choice(["jetson-orin", "rk3588-npu"], n), "num_devices": 1,
        "model": rng.choice(["tinyllama-1.1b", "qwen2-1.5b", "qwen1.5-0.5b"], n), "batch_size": 1.0,
        "prompt_tokens": rng.integers(1, 20, n).astype(float), "generated_tokens": rng.integers(1, 5, n).astype(float),
        "weight_bits": 16, "phase": rng.choice(["prefill", "decode"], n), "energy_j": rng.uniform(1, 2, n),
    })


def groups_of(df, ix):
    return set(config_groups(df)[ix])


def test_random_split_is_deterministic_and_grouped() -> None:
    df = table()
    a, b, c = random_split(df, seed=3), random_split(df, seed=3), random_split(df, seed=4)
    assert all(np.array_equal(a.parts[p], b.parts[p]) for p in a.parts)
    assert not np.array_equal(a.parts["test"], c.parts["test"])
    assert sum(a.sizes().values()) == len(df)
    assert not groups_of(df, a.parts["train"]) & groups_of(df, a.parts["test"])
    assert not groups_of(df, a.parts["val"]) & groups_of(df, a.parts["test"])
    # repeated configurations exist in this table, so grouping is actually exercised
    assert len(np.unique(config_groups(df))) < len(df)


def test_leave_one_model_out() -> None:
    df = table()
    s = leave_one_out(df, "model", "qwen2-1.5b")
    assert set(df.iloc[s.parts["test"]]["model"]) == {"qwen2-1.5b"}
    assert "qwen2-1.5b" not in set(df.iloc[np.concatenate([s.parts["train"], s.parts["val"]])]["model"])
    assert sum(s.sizes().values()) == len(df)
    assert [x.meta["holdout"] for x in leave_each_out(df, "device")] == ["jetson-orin", "rk3588-npu"]
    with pytest.raises(InvalidInputError, match="present: jetson-orin"):
        leave_one_out(df, "device", "h100-sxm")


def test_trace_vs_uniform_share_one_trace_test_set() -> None:
    df = table(2000)
    trace, uniform = co2meter_trace_vs_uniform(df, seed=1)
    assert np.array_equal(trace.parts["test"], uniform.parts["test"])
    assert set(df.iloc[trace.parts["test"]]["source_file"]) == {"train_trace.csv"}
    assert set(df.iloc[trace.parts["train"]]["source_file"]) == {"train_trace.csv"}
    assert set(df.iloc[uniform.parts["train"]]["source_file"]) == {"train_uniform.csv"}
    assert not groups_of(df, trace.parts["train"]) & groups_of(df, trace.parts["test"])
    # uniform training set is cut to about the trace training size (whole groups)
    assert abs(len(uniform.parts["train"]) - len(trace.parts["train"])) <= np.bincount(config_groups(df)).max()


def test_split_round_trip_by_row_identity(tmp_path) -> None:
    df = table()
    s = random_split(df, seed=5)
    s.save(df, tmp_path)
    shuffled = df.sample(frac=1.0, random_state=0).reset_index(drop=True)
    back = Split.load(shuffled, tmp_path)
    for part in s.parts:
        original = set(map(tuple, df.iloc[s.parts[part]][["source_file", "source_row", "phase"]].astype(str).to_numpy()))
        restored = set(map(tuple, shuffled.iloc[back.parts[part]][["source_file", "source_row", "phase"]].astype(str).to_numpy()))
        assert original == restored


def test_bad_fractions() -> None:
    with pytest.raises(InvalidInputError):
        random_split(table(), test_fraction=0.6, val_fraction=0.5)
