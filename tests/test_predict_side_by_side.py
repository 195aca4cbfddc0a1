"""`predict --requests` predicts a file's chunks side by side, one thread per CPU, and writes
them in order: the output is the same, byte for byte, as one chunk after the other's, and an
error in a later chunk is reported as the sequential run reports it."""

from __future__ import annotations

from pathlib import Path

import pytest

import llmco2.analytic.request_files as rf
import llmco2.api.files as files
from tests.fast_predict_support import REQUEST_CSV, train_small_checkpoint
from tests.helpers import run_cli as run

ROWS = REQUEST_CSV.splitlines()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return train_small_checkpoint(tmp_path_factory.mktemp("ckpt"))


def _predict(src: Path, out: Path, checkpoint: Path, capsys, threads: int, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("LLMCO2_THREADS", str(threads))
    return run(["predict", "--requests", str(src), "--out", str(out), "--checkpoint", str(checkpoint)], capsys)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_side_by_side_equals_one_after_the_other(suffix: str, checkpoint: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 3)
    monkeypatch.setattr(files, "SIDE_BY_SIDE_ROWS", 1)
    src = tmp_path / "req.csv"
    src.write_text("\n".join([ROWS[0], *ROWS[1:] * 5]) + "\n")  # a dozen chunks of three rows
    one, two = tmp_path / f"one{suffix}", tmp_path / f"two{suffix}"
    code, _, err = _predict(src, one, checkpoint, capsys, 1, monkeypatch)
    assert code == 0, err
    code, _, err = _predict(src, two, checkpoint, capsys, 2, monkeypatch)
    assert code == 0, err
    assert two.read_bytes() == one.read_bytes()
    assert Path(f"{two}.totals.json").read_text().replace(two.name, one.name) == Path(f"{one}.totals.json").read_text()


def test_side_by_side_reports_a_bad_row_as_one_after_the_other(checkpoint: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 3)
    monkeypatch.setattr(files, "SIDE_BY_SIDE_ROWS", 1)
    src = tmp_path / "req.csv"
    bad = ROWS[1].split(",")
    bad[ROWS[0].split(",").index("prompt_tokens")] = "-5"
    src.write_text("\n".join([ROWS[0], *ROWS[1:] * 3, ",".join(bad), *ROWS[1:]]) + "\n")
    results = []
    for threads in (1, 2):
        out = tmp_path / f"out{threads}.csv"
        code, _, err = _predict(src, out, checkpoint, capsys, threads, monkeypatch)
        results.append((code, err.replace(out.name, "OUT")))
        assert code != 0 and not out.exists()
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f".{out.name}")]  # nothing left behind
    assert results[0] == results[1]
