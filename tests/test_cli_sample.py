"""`llmco2 sample` (convention 5 (docs/reference/conventions.md)): columns, reproducibility, bad input."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import run_cli as run

COLUMNS = ["model", "gpu", "num_gpus", "batch_size", "prompt_tokens", "generated_tokens"]




def test_focused_sample_is_reproducible(tmp_path: Path, capsys, shared_data) -> None:
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    for path, seed in ((a, 3), (b, 3), (c, 4)):
        code, _, err = run(["sample", "--strategy", "focused", "--trace", "conv", "--n", "300", "--seed", str(seed),
                            "--out", str(path)], capsys)
        assert code == 0, err
    fa, fb, fc = (pd.read_csv(p) for p in (a, b, c))
    assert list(fa.columns[:6]) == COLUMNS and len(fa) == 300
    assert fa.equals(fb) and not fa.equals(fc)
    assert set(fa["trace"]) == {"conv"}


def test_random_sample_is_bounded_by_the_trace(tmp_path: Path, capsys, shared_data) -> None:
    out = tmp_path / "r.csv"
    code, _, err = run(["sample", "--strategy", "random", "--trace", "code", "--n", "200", "--out", str(out)], capsys)
    assert code == 0, err
    frame = pd.read_csv(out)
    assert frame["generated_tokens"].max() <= 1899 and frame["prompt_tokens"].max() <= 7437


@pytest.mark.parametrize("args, mention", [
    (["--n", "0"], "--n"),
    (["--n", "10", "--strategy", "smart"], "strategy"),
    (["--n", "10", "--gpus", "h100,a999"], "a999"),
])
def test_bad_sample_arguments(args, mention, tmp_path: Path, capsys) -> None:
    code, out, err = run(["sample", "--out", str(tmp_path / "x.csv"), *args], capsys)
    assert code == 2 and out == "" and mention in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("strategy", ["focused", "random"])
def test_large_samples_are_drawn_and_written_in_blocks(strategy: str, tmp_path: Path, capsys, shared_data, monkeypatch) -> None:
    import llmco2.data.sampling.samplers as samplers

    small = tmp_path / "small.csv"
    args = ["sample", "--strategy", strategy, "--trace", "conv", "--seed", "5"]
    assert run([*args, "--n", "120", "--out", str(small)], capsys)[0] == 0
    monkeypatch.setattr(samplers, "SAMPLE_BLOCK", 120)
    same = tmp_path / "same.csv"
    assert run([*args, "--n", "120", "--out", str(same)], capsys)[0] == 0
    assert same.read_bytes() == small.read_bytes()  # up to one block: the single draw, as before
    out = tmp_path / "blocks.csv"
    code, _, err = run([*args, "--n", "300", "--out", str(out)], capsys)
    assert code == 0 and "wrote 300 " in err and "requested=300" in err, err
    frame = pd.read_csv(out)
    assert len(frame) == 300 and list(frame.columns) == list(pd.read_csv(small).columns)
    assert not frame.iloc[:120].equals(frame.iloc[120:240].reset_index(drop=True))  # each block has its own seed
    again = tmp_path / "again.csv"
    assert run([*args, "--n", "300", "--out", str(again)], capsys)[0] == 0
    assert again.read_bytes() == out.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.csv", "blocks.csv", "same.csv", "small.csv"]
