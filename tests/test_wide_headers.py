"""Request files with very wide headers: the header checks are linear in the number of columns, a
header of more than :data:`~llmco2.specs.limits.MAX_REQUEST_COLUMNS` columns (or longer than the
header bytes read) is refused up front with exit 2 and one line naming the count and the limit,
and a few hundred harmless extra columns are predicted and written back."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

from llmco2.analytic.csv_text import MAX_HEADER_BYTES
from llmco2.analytic.request_files import check_header
from llmco2.errors import InvalidInputError
from llmco2.specs.limits import MAX_REQUEST_COLUMNS
from tests.helpers import run_cli

REQUIRED = "model,gpu,batch_size,prompt_tokens,generated_tokens"
ROW = "qwen2-0.5b,h100,1,64,8"


def _wide(path: Path, extra: int, rows: int = 2) -> Path:
    """A request file with ``extra`` columns after the required ones (``x0`` ... with cells ``v0`` ...)."""
    header = ",".join([REQUIRED, *(f"x{i}" for i in range(extra))])
    row = ",".join([ROW, *(f"v{i}" for i in range(extra))])
    path.write_text("\n".join([header, *[row] * rows]) + "\n")
    return path


def _refused(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    out = tmp_path / "out.csv"
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(out)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    return lines[0]


def test_a_50000_column_header_is_refused_naming_the_count_and_the_limit(tmp_path: Path, capsys) -> None:
    src = _wide(tmp_path / "wide.csv", 50_000 - 5)
    line = _refused(src, tmp_path, capsys)
    assert f"{src} has 50,000 columns, more than the {MAX_REQUEST_COLUMNS:,} a request file may have" in line
    packed = tmp_path / "wide.csv.gz"
    packed.write_bytes(gzip.compress(src.read_bytes()))
    assert "has 50,000 columns" in _refused(packed, tmp_path, capsys)


def test_a_header_longer_than_the_bytes_read_is_refused(tmp_path: Path, capsys) -> None:
    src = tmp_path / "huge.csv"
    src.write_text(",".join([REQUIRED, *(f"column_{i:07d}" for i in range(MAX_HEADER_BYTES // 10))]) + "\n" + ROW + "\n")
    line = _refused(src, tmp_path, capsys)
    assert f"line 1: the header is longer than {MAX_HEADER_BYTES:,} bytes" in line
    assert f"columns or more); a request file has at most {MAX_REQUEST_COLUMNS:,} columns" in line


def test_one_column_over_the_limit_is_refused_and_the_limit_itself_is_not(tmp_path: Path) -> None:
    names = [*REQUIRED.split(","), *(f"x{i}" for i in range(MAX_REQUEST_COLUMNS - 5))]
    check_header(tmp_path / "r.csv", names)  # exactly the limit
    with pytest.raises(InvalidInputError, match=f"has {MAX_REQUEST_COLUMNS + 1:,} columns"):
        check_header(tmp_path / "r.csv", [*names, "one_more"])


def test_duplicates_among_many_columns_are_named(tmp_path: Path) -> None:
    names = [*REQUIRED.split(","), *(f"x{i}" for i in range(5_000)), "x17", "gpu"]
    with pytest.raises(InvalidInputError, match="column gpu, x17 appears more than once"):
        check_header(tmp_path / "r.csv", names)


def test_a_parquet_file_over_the_limit_is_refused(tmp_path: Path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [*REQUIRED.split(","), *(f"x{i}" for i in range(MAX_REQUEST_COLUMNS))]
    src = tmp_path / "wide.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["1"])] * len(names), names=names), src, write_statistics=False)
    assert f"has {MAX_REQUEST_COLUMNS + 5:,} columns" in _refused(src, tmp_path, capsys)


def test_a_few_hundred_extra_columns_are_predicted_and_kept(tmp_path: Path, capsys) -> None:
    src = _wide(tmp_path / "r.csv", 300)
    out = tmp_path / "out.csv"
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    frame = pd.read_csv(out, dtype=str)
    assert list(frame.columns[5:305]) == [f"x{i}" for i in range(300)] and "total_j" in frame.columns
    assert frame["x299"].tolist() == ["v299", "v299"] and len(frame) == 2
