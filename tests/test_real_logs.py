"""Request files as real systems export them: a byte-order mark, CRLF line ends, quoted fields and
blank lines read correctly (the predictions equal those of the plain file); bytes that are not
UTF-8 and malformed rows are refused with exit 2 and one line naming the file and the line."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_fuzz_boundary import SETTINGS, _check, _cli

HEADER = "model,gpu,batch_size,prompt_tokens,generated_tokens,note"
ROWS = ["qwen2-0.5b,h100,1,64,8,a", "llama3.1-8b,a100-80gb,2,128,16,b", "qwen2-7b,l4,4,512,32,c"]
PLAIN = "\n".join([HEADER, *ROWS]) + "\n"


def _predict(tmp: Path, body: bytes, name: str = "r.csv") -> tuple[int, str, pd.DataFrame | None]:
    src, out = tmp / name, tmp / f"out-{name}"
    src.write_bytes(body)
    code, _, err = _cli(["predict", "--requests", str(src), "--out", str(out)])
    return code, err, pd.read_csv(out, dtype={"note": str}) if code == 0 else None


@pytest.fixture(scope="module")
def expected() -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as d:
        code, err, frame = _predict(Path(d), PLAIN.encode())
    assert code == 0, err
    return frame


def _quoted(row: str) -> str:
    return ",".join(f'"{c}"' for c in row.split(","))


READABLE = {
    "bom": b"\xef\xbb\xbf" + PLAIN.encode(),
    "crlf": PLAIN.replace("\n", "\r\n").encode(),
    "bom+crlf": b"\xef\xbb\xbf" + PLAIN.replace("\n", "\r\n").encode(),
    "quoted": ("\n".join([_quoted(HEADER), *map(_quoted, ROWS)]) + "\n").encode(),
    "blank lines": ("\n\n" + HEADER + "\n\n" + "\n\n\n".join(ROWS) + "\n\n").encode(),
    "blank crlf lines": ("\r\n".join([HEADER, "", *ROWS, "", ""])).encode(),
    "no final line end": PLAIN.rstrip("\n").encode(),
    "cr only": PLAIN.replace("\n", "\r").encode(),
}


@pytest.mark.parametrize("case", sorted(READABLE))
def test_exported_files_read_like_the_plain_file(case: str, expected: pd.DataFrame, tmp_path: Path) -> None:
    code, err, frame = _predict(tmp_path, READABLE[case])
    assert code == 0, err
    pd.testing.assert_frame_equal(frame, expected)


def test_quoted_cells_with_commas_quotes_and_line_breaks(tmp_path: Path) -> None:
    body = HEADER + '\nqwen2-0.5b,h100,1,64,8,"x, ""y""\nz"\n'
    code, err, frame = _predict(tmp_path, body.encode())
    assert code == 0, err
    assert frame["note"].tolist() == ['x, "y"\nz']


REFUSED = {
    # (file body, the line named, words in the message)
    "non-UTF-8 byte in the header": (b"model,gpu,batch_size,prompt_tokens,generated_tok\xffens\n" + ROWS[0].encode(), 1,
                                     "not UTF-8"),
    "non-UTF-8 byte in a row": (f"{HEADER}\n{ROWS[0]}\n".encode() + b"qwen2-0.5b,h1\xe900,1,64,8,a\n", 3, "not UTF-8"),
    "latin-1 after a BOM": (b"\xef\xbb\xbf" + f"{HEADER}\n".encode() + b"qwen2-0.5b,h100,1,64,8,caf\xe9\n", 2,
                            "not UTF-8"),
    "short row after blank lines": (f"{HEADER}\n\n{ROWS[0]}\n\nqwen2-0.5b,h100,1,64\n".encode(), 5, "malformed CSV row"),
    "stray quote": (f'{HEADER}\n{ROWS[0]}\nqwen2-0.5b,"h100,1,64,8,a\n'.encode(), 3, "malformed CSV row"),
    "bad value after blank lines": (f"{HEADER}\n\n\n{ROWS[0]}\n\nqwen2-0.5b,h100,1,64,-8,a\n".encode(), 6,
                                    "generated_tokens"),
    "bad value after a quoted line break": (f'{HEADER}\n{ROWS[0][:-1]}"x\ny"\nqwen2-0.5b,h100,0,64,8,a\n'.encode(), 4,
                                            "batch_size"),
    "bad value in a CRLF file": (f"{HEADER}\r\n\r\n{ROWS[0]}\r\nqwen2-0.5b,nope,1,64,8,a\r\n".encode(), 4, "unknown gpu"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_file_and_line(case: str, tmp_path: Path) -> None:
    body, line, words = REFUSED[case]
    code, err, _ = _predict(tmp_path, body)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "r.csv" in lines[0] and f"line {line}:" in lines[0] and words in lines[0], lines[0]
    assert not (tmp_path / "out-r.csv").exists()


def test_parquet_with_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"model": ["qwen2-0.5b"] * 2, "gpu": pa.array([b"h100", b"h1\xff"], pa.binary()), "batch_size": [1, 1],
                      "prompt_tokens": [3, 4], "generated_tokens": [1, 2]})
    pq.write_table(table, tmp_path / "r.parquet")
    code, _, err = _cli(["predict", "--requests", str(tmp_path / "r.parquet"), "--out", str(tmp_path / "o.csv")])
    assert code == 2 and "line 3: gpu: not UTF-8" in err and len(err.strip().splitlines()) == 1


@st.composite
def exported_files(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A valid request file as some system might export it, sometimes damaged: ``(bytes, damaged)``."""
    rows = [HEADER, *draw(st.lists(st.sampled_from(ROWS), min_size=1, max_size=4))]
    if draw(st.booleans()):
        rows = [_quoted(r) if draw(st.booleans()) else r for r in rows]
    lines: list[str] = []
    for r in rows:
        lines += [""] * draw(st.integers(0, 2)) + [r]
    end = draw(st.sampled_from(["\n", "\r\n"]))
    body = (end.join(lines) + end * draw(st.integers(0, 2))).encode()
    if draw(st.booleans()):
        body = b"\xef\xbb\xbf" + body
    damaged = False
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(body)))
        junk = draw(st.one_of(st.binary(min_size=1, max_size=3), st.sampled_from([b'"', b",", b"\r", b"\n", b"\xff", b"\x00",
                                                                                   b"\xef\xbb\xbf", b'""'])))
        body = body[:at] + junk + body[at:]
        damaged = True
    return body, damaged


@SETTINGS
@given(exported_files())
def test_exported_and_damaged_files_never_give_a_traceback(case: tuple[bytes, bool]) -> None:
    body, damaged = case
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "r.csv", Path(d) / "p.csv"
        src.write_bytes(body)
        code, _, err = _check(["predict", "--requests", str(src), "--out", str(out)])
        if not damaged:
            assert code == 0, err
        if code == 2:
            assert "r.csv" in err and not out.exists()
        assert [p.name for p in Path(d).iterdir() if p.name.startswith(".")] == []
