"""``predict --requests FILE --on-error skip``: rows that fail their checks are left out and listed
(line and reason) in ``OUT.rejects.csv``; the other rows get exactly the predictions a file of
only them gets; without the option the first bad row stops the run as before."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from llmco2.api.options import FileJob
from llmco2.errors import InvalidInputError
from tests.helpers import run_cli

ROWS = [("llama3.1-8b", "h100", "1", "100", "20"), ("llama9-8b", "h100", "1", "100", "20"),
        ("llama3.1-8b", "h1000", "1", "100", "20"), ("qwen2-7b", "a100-80gb", "2", "50", "10"),
        ("llama3.1-8b", "h100", "0", "100", "20")]
GOOD = [0, 3]
HEADER = ["model", "gpu", "batch_size", "prompt_tokens", "generated_tokens"]


def _write(path: Path, rows: list[tuple[str, ...]]) -> Path:
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([HEADER, *rows])
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_bad_rows_are_left_out_and_listed(suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "in.csv", ROWS)
    clean = _write(tmp_path / "clean.csv", [ROWS[i] for i in GOOD])
    if suffix == ".parquet":
        frame = pd.read_csv(src, dtype=str)
        src = tmp_path / "in.parquet"
        frame.to_parquet(src)
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"), "--on-error", "skip"], capsys)
    assert code == 0, err
    assert "left out 3 rows that failed their checks" in err
    rejects = pd.read_csv(tmp_path / "out.csv.rejects.csv")
    assert list(rejects["line"]) == [3, 4, 6]
    assert rejects["reason"].str.startswith(("model:", "gpu:", "batch_size:")).all()
    code, _, err = run_cli(["predict", "--requests", str(clean), "--out", str(tmp_path / "clean_out.csv")], capsys)
    assert code == 0, err
    got, want = pd.read_csv(tmp_path / "out.csv"), pd.read_csv(tmp_path / "clean_out.csv")
    pd.testing.assert_frame_equal(got[want.columns[5:]], want[want.columns[5:]])


def test_without_the_option_the_first_bad_row_stops_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "in.csv", ROWS)
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv")], capsys)
    assert code == 2 and "line 3: model: unknown model 'llama9-8b'" in err
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.csv.rejects.csv").exists()


def test_a_file_with_no_good_row_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "in.csv", [ROWS[1], ROWS[2]])
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"), "--on-error", "skip"], capsys)
    assert code == 2 and "every row of" in err and "line 2: model" in err


@pytest.mark.parametrize("argv, mention", [
    (["--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "5", "--gen-tokens", "5",
      "--on-error", "skip"], "--on-error: only applies with --requests"),
    (["--requests", "IN", "--out", "OUTDIR", "--cluster", "local", "--on-error", "skip"], "--on-error: rows are left out"),
])
def test_where_it_does_not_apply(argv: list[str], mention: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "in.csv", ROWS)
    argv = [str(src) if a == "IN" else str(tmp_path / "parts") if a == "OUTDIR" else a for a in argv]
    code, _, err = run_cli(["predict", *argv], capsys)
    assert code == 2 and mention in err, err


def test_the_api_refuses_an_unknown_policy() -> None:
    with pytest.raises(InvalidInputError, match="must be one of raise, skip"):
        FileJob("in.csv", "out.csv", on_error="ignore")
