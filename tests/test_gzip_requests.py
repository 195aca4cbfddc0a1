"""Gzip-compressed request logs: ``predict --requests in.csv.gz`` (by suffix or by the gzip magic
bytes) predicts what the plain file predicts, in chunks; ``--out FILE.csv.gz`` writes the same CSV
compressed, atomically and byte-for-byte reproducibly; an interrupted run resumes (the fingerprint
is the input's contents); a damaged gzip is exit 2 with one line and leaves nothing behind."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import llmco2.analytic.request_files as rf
import llmco2.carbon.footprint as footprint
from llmco2.analytic.compressed import is_gzip
from llmco2.analytic.request_files import count_rows, iter_request_chunks
from llmco2.errors import InvalidInputError
from tests.helpers import interrupted_on_call, run_cli

HEADER = "model,gpu,batch_size,prompt_tokens,generated_tokens,note"
ROWS = ["qwen2-0.5b,h100,1,64,8,a", "llama3.1-8b,a100-80gb,2,128,16,\"b, quoted\"", "qwen2-7b,l4,4,512,32,c"]
BODY = ("\n".join([HEADER, *ROWS * 3]) + "\n").encode()  # 9 rows: several chunks of two


def _predict(src: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(out)], capsys)
    return code, err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """The same requests plain, gzip-compressed (``.csv.gz``) and gzip-compressed under a ``.csv`` name."""
    (tmp_path / "in").mkdir()
    paths = {"plain": tmp_path / "in" / "r.csv", "gz": tmp_path / "in" / "r.csv.gz",
             "magic": tmp_path / "in" / "renamed.csv"}
    paths["plain"].write_bytes(BODY)
    paths["gz"].write_bytes(gzip.compress(BODY))
    paths["magic"].write_bytes(gzip.compress(BODY, compresslevel=1))
    return paths


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_gzip_input_predicts_like_the_plain_file(files: dict[str, Path], tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    assert not is_gzip(files["plain"]) and is_gzip(files["gz"]) and is_gzip(files["magic"])
    outs = {}
    for name, src in files.items():
        outs[name] = tmp_path / f"{name}.csv"
        code, err = _predict(src, outs[name], capsys)
        assert code == 0, err
    assert outs["gz"].read_bytes() == outs["plain"].read_bytes() == outs["magic"].read_bytes()
    chunks = list(iter_request_chunks(files["gz"], chunk_rows=2))
    assert [len(c.table) for c in chunks] == [2, 2, 2, 2, 1] and [c.first_line for c in chunks] == [2, 4, 6, 8, 10]
    assert count_rows(files["gz"]) == count_rows(files["plain"]) == 9


def test_gzip_output_is_the_csv_compressed(files: dict[str, Path], tmp_path: Path, capsys) -> None:
    plain, packed = tmp_path / "p.csv", tmp_path / "p.csv.gz"
    assert _predict(files["plain"], plain, capsys)[0] == 0
    code, err = _predict(files["gz"], packed, capsys)
    assert code == 0 and f"-> {packed};" in err, err
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    first = packed.read_bytes()
    packed.unlink()
    assert _predict(files["gz"], packed, capsys)[0] == 0
    assert packed.read_bytes() == first  # no time stamp or name in the gzip header: the same bytes
    assert json.loads((tmp_path / "p.csv.gz.totals.json").read_text())["rows"] == 9
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("out_name", ["pred.csv", "pred.csv.gz"])
def test_interrupted_gzip_run_resumes_to_the_same_bytes(out_name: str, files: dict[str, Path], tmp_path: Path, capsys,
                                                        monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    reference = tmp_path / f"ref-{out_name}"
    assert _predict(files["gz"], reference, capsys)[0] == 0
    out = tmp_path / out_name
    stop_third = interrupted_on_call(footprint.predict_footprint, 3)
    with monkeypatch.context() as m:
        m.setattr(footprint, "predict_footprint", stop_third)
        code, err = _predict(files["gz"], out, capsys)
    assert code == 130 and "interrupted after 4 of 9 rows" in err, err
    assert not out.exists() and json.loads((tmp_path / f".{out_name}.partial.json").read_text())["rows"] == 4
    files["gz"].write_bytes(files["gz"].read_bytes())  # rewritten, same contents (a new time stamp): still resumes
    code, err = _predict(files["gz"], out, capsys)
    assert code == 0 and "(4 of them by the interrupted run)" in err, err
    assert out.read_bytes() == reference.read_bytes()
    assert _hidden(tmp_path) == []


def _damaged() -> dict[str, tuple[str, bytes]]:
    packed = gzip.compress(BODY * 40)
    flipped = bytearray(packed)
    flipped[len(flipped) // 2] ^= 0xFF
    bad_crc = bytearray(packed)
    bad_crc[-6] ^= 0x01
    return {"truncated": ("r.csv.gz", packed[: len(packed) // 2]), "flipped byte": ("r.csv.gz", bytes(flipped)),
            "bad checksum": ("r.csv.gz", bytes(bad_crc)), "not gzip at all": ("r.csv.gz", BODY),
            "truncated, no suffix": ("r.csv", packed[:40]), "garbage after it": ("r.csv.gz", packed + b"garbage")}


@pytest.mark.parametrize("case", sorted(_damaged()))
def test_damaged_gzip_is_exit_2_with_one_line(case: str, tmp_path: Path, capsys) -> None:
    name, body = _damaged()[case]
    src, out = tmp_path / name, tmp_path / "out.csv"
    src.write_bytes(body)
    code, err = _predict(src, out, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "is not a readable gzip file" in lines[0] and str(src) in lines[0], err
    assert "Traceback" not in err and not out.exists() and _hidden(tmp_path) == []
    with pytest.raises(InvalidInputError, match="not a readable gzip file"):
        for _ in iter_request_chunks(src):
            pass


def test_gzip_parquet_is_refused(files: dict[str, Path], tmp_path: Path, capsys) -> None:
    code, err = _predict(files["gz"], tmp_path / "o.parquet.gz", capsys)
    assert code == 2 and "Parquet compresses its own columns" in err and len(err.strip().splitlines()) == 1, err
    src = tmp_path / "r.parquet.gz"
    src.write_bytes(gzip.compress(b"PAR1"))
    code, err = _predict(src, tmp_path / "o.csv", capsys)
    assert code == 2 and "gzip-compressed Parquet file is not read" in err and len(err.strip().splitlines()) == 1, err


def test_predict_file_api_reads_and_writes_gzip(files: dict[str, Path], tmp_path: Path, capsys) -> None:
    import llmco2
    from llmco2.api.options import FileJob

    out = tmp_path / "api.csv.gz"
    assert llmco2.predict_file(FileJob(str(files["magic"]), str(out))) == 0
    assert _predict(files["plain"], tmp_path / "cli.csv", capsys)[0] == 0
    assert gzip.decompress(out.read_bytes()) == (tmp_path / "cli.csv").read_bytes()


def test_errors_in_a_gzip_file_name_the_line(tmp_path: Path, capsys) -> None:
    src = tmp_path / "r.csv.gz"
    src.write_bytes(gzip.compress(f"{HEADER}\n\n{ROWS[0]}\n{ROWS[2]}\nqwen2-0.5b,nogpu,1,64,8,x\n".encode()))
    code, err = _predict(src, tmp_path / "o.csv", capsys)
    assert code == 2 and f"{src}, line 5: gpu: unknown gpu 'nogpu'" in err and len(err.strip().splitlines()) == 1, err
    src.write_bytes(gzip.compress(f"{HEADER}\n{ROWS[0]}\nqwen2-0.5b,h100,1\n".encode()))
    code, err = _predict(src, tmp_path / "o.csv", capsys)
    assert code == 2 and f"{src}, line 3: malformed CSV row" in err and len(err.strip().splitlines()) == 1, err


def test_region_column_of_a_gzip_file(tmp_path: Path, capsys) -> None:
    body = f"{HEADER},region\n" + "".join(f"{r},{g}\n" for r, g in zip(ROWS, ["fra", "deu", ""], strict=True))
    plain, packed = tmp_path / "r.csv", tmp_path / "r.csv.gz"
    plain.write_text(body)
    packed.write_bytes(gzip.compress(body.encode()))
    assert _predict(plain, tmp_path / "a.csv", capsys)[0] == 0
    assert _predict(packed, tmp_path / "b.csv", capsys)[0] == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    packed.write_bytes(gzip.compress(body.replace("deu", "atlantis").encode()))
    code, err = _predict(packed, tmp_path / "c.csv", capsys)
    assert code == 2 and f"{packed}, line 3" in err and len(err.strip().splitlines()) == 1, err


def test_hourly_intensities_of_a_gzip_file(tmp_path: Path, capsys) -> None:
    hours = tmp_path / "hours.csv"
    hours.write_text("timestamp,g_co2eq_per_kwh\n2024-03-01T00:00:00Z,100\n2024-03-01T01:00:00Z,400\n")
    body = f"{HEADER},timestamp\n{ROWS[0]},2024-03-01T00:10:00Z\n{ROWS[0]},2024-03-01T01:10:00Z\n"
    for name, data in (("r.csv", body.encode()), ("r.csv.gz", gzip.compress(body.encode()))):
        (tmp_path / name).write_bytes(data)
        code, _, err = run_cli(["predict", "--requests", str(tmp_path / name), "--out", str(tmp_path / f"o-{name}.csv"),
                                "--intensity-file", str(hours)], capsys)
        assert code == 0, err
    assert (tmp_path / "o-r.csv.csv").read_bytes() == (tmp_path / "o-r.csv.gz.csv").read_bytes()


def test_a_folder_for_a_cluster_run_takes_its_gzip_logs(files: dict[str, Path]) -> None:
    from llmco2.api.cluster import input_files

    assert [p.name for p in input_files(str(files["gz"].parent))] == ["r.csv", "r.csv.gz", "renamed.csv"]
