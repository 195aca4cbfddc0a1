"""``llmco2 predict --requests GLOB_OR_DIR --out DIR --cluster local|ADDRESS`` on a real local Dask
cluster of two worker processes: the parts equal the single-process predictions, a rerun skips the
complete parts, and bad input or a bad cluster is exit 2 with one line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from llmco2.api.cluster_parts import MANIFEST_NAME
from tests.test_fuzz_boundary import _cli

pytest.importorskip("distributed")

NUMERIC = ["prefill_j", "decode_j", "total_j", "total_j_low", "total_j_high", "latency_s", "operational_g", "embodied_g",
           "total_g"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a 37,000-row CSV (the first 2,500 sampled rows repeated) and a 1,200-row
    Parquet file of mixed models and GPUs."""
    root = tmp_path_factory.mktemp("cluster")
    code, _, err = _cli(["sample", "--strategy", "focused", "--trace", "conv", "--n", "3700", "--seed", "0", "--out",
                         str(root / "all.csv")])
    assert code == 0, err
    frame = pd.read_csv(root / "all.csv", dtype=str, keep_default_na=False)
    folder = root / "in"
    folder.mkdir()
    pd.concat([frame.iloc[:2500]] * 15, ignore_index=True).iloc[:37_000].to_csv(folder / "a.csv", index=False)
    frame.iloc[2500:].reset_index(drop=True).to_parquet(folder / "b.parquet")
    return folder


def _single(src: Path, out: Path) -> pd.DataFrame:
    code, _, err = _cli(["predict", "--requests", str(src), "--out", str(out)])
    assert code == 0, err
    return pd.read_parquet(out)


def _parts(out: Path, stem: str) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in sorted(out.glob(f"{stem}-*.parquet"))], ignore_index=True)


def test_local_cluster_equals_single_process_and_resumes(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "parts"
    argv = ["predict", "--requests", str(inputs), "--out", str(out), "--cluster", "local", "--workers", "2",
            "--partition-rows", "16384"]
    code, _, err = _cli(argv)
    assert code == 0, err
    names = sorted(p.name for p in out.glob("*.parquet"))
    assert [n.split("-")[0] for n in names] == ["a", "a", "a", "b"]
    assert [n[-13:] for n in names] == ["00000.parquet", "00001.parquet", "00002.parquet", "00000.parquet"]
    for src in sorted(inputs.iterdir()):
        expected = _single(src, tmp_path / f"{src.stem}.parquet")
        got = _parts(out, src.stem)
        assert list(got.columns) == list(expected.columns) and len(got) == len(expected)
        inputs_only = [c for c in expected.columns if c not in NUMERIC + ["total_j_low", "extrapolated"]]
        pd.testing.assert_frame_equal(got[inputs_only], expected[inputs_only])
        np.testing.assert_allclose(got[NUMERIC].to_numpy(float), expected[NUMERIC].to_numpy(float), rtol=1e-9, atol=0)
        assert (got["extrapolated"] == expected["extrapolated"]).all()
        assert got.equals(expected)  # the same chunks as a single-process run: the same bits
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["finished"] and manifest["totals"]["rows"] == 38_200
    assert pq.read_table(out).num_rows == 38_200  # the folder reads as one data set (the manifest is ignored)

    # a part lost (or never finished): the rerun writes that part only
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    (out / names[1]).unlink()
    (out / f".{names[2]}.deadbeef.tmp").write_bytes(b"half a part")  # a worker killed while writing
    code, _, err = _cli(argv)
    assert code == 0, err
    assert "1 written now" in err and "3 parts (21,816 rows) were already complete" in err
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    assert after.keys() == mtimes.keys()
    assert [n for n in names if after[n] != mtimes[n]] == [names[1]]
    assert not list(out.glob(".*.tmp"))
    pd.testing.assert_frame_equal(_parts(out, "a"), pd.read_parquet(tmp_path / "a.parquet"), rtol=1e-9)

    # every part complete: nothing to do, no cluster started
    code, _, err = _cli(argv)
    assert code == 0 and "0 written now" in err

    # other options or another input: refused, the parts kept
    for changed in ([*argv, "--region", "fra"], [*argv[:-1], "32768"]):
        code, _, err = _cli(changed)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "holds the parts of a run with other" in err, err
    assert sorted(p.name for p in out.glob("*.parquet")) == names


def test_bad_row_on_a_worker_is_exit_2_and_leaves_nothing(inputs: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    body = "".join((inputs / "a.csv").open().readlines()[:2501])
    width = body.splitlines()[0].count(",")
    (folder / "a.csv").write_text(body + "\n" + "qwen2-0.5b,nogpu,1,1,1,1" + "," * (width - 5) + "\n")
    out = tmp_path / "parts"
    code, _, err = _cli(["predict", "--requests", str(folder / "*.csv"), "--out", str(out), "--cluster", "local",
                         "--workers", "2"])
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{folder / 'a.csv'}, line 2503: gpu: unknown gpu 'nogpu'" in lines[0], err
    assert not out.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("extra, words", [
    (["--out", "{tmp}/o", "--cluster", "local", "--requests", "{tmp}/none/*.csv"], "no files match"),
    (["--out", "{tmp}/o", "--cluster", "local", "--requests", "{tmp}/empty"], "holds no .csv or .parquet files"),
    (["--cluster", "local", "--requests", "{in}"], "--cluster needs --out FOLDER"),
    (["--out", "{tmp}/o.csv", "--cluster", "local", "--requests", "{in}"], "--out is a folder of Parquet parts"),
    (["--out", "{tmp}/file", "--cluster", "local", "--requests", "{in}"], "it is a file"),
    (["--out", "{tmp}/full", "--cluster", "local", "--requests", "{in}"], "is not empty"),
    (["--out", "{tmp}/o", "--requests", "{in}"], "is a directory; give one file, or predict many with --cluster"),
    (["--out", "{tmp}/o", "--requests", "{tmp}/*.csv"], "is a glob; give one file, or predict many with --cluster"),
    (["--out", "{tmp}/o", "--cluster", "tcp://127.0.0.1:1", "--workers", "2", "--requests", "{in}"], "only applies with --cluster local"),
    (["--out", "{tmp}/o", "--cluster", "local", "--partition-rows", "20000", "--requests", "{in}"], "multiple of 16,384"),
    (["--out", "{tmp}/o", "--cluster", "local", "--workers", "0", "--requests", "{in}"], "from 1 to 1,024"),
    (["--out", "{tmp}/o.csv", "--workers", "2", "--requests", "{in}/a.csv"], "only apply with --cluster"),
    (["--model", "qwen2-0.5b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "8", "--gen-tokens", "8",
      "--cluster", "local"], "only apply with --requests"),
    (["--out", "{tmp}/o", "--cluster", "tcp://127.0.0.1:{port}", "--requests", "{in}"], "cannot reach a Dask scheduler"),
    (["--out", "{tmp}/o", "--cluster", "local", "--intensity-file", "{tmp}/file", "--requests", "{in}"],
     "hourly intensities are applied by single-process runs only"),
])
def test_refused_with_one_line(extra: list[str], words: str, inputs: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import llmco2.api.cluster as pc

    monkeypatch.setattr(pc, "CONNECT_TIMEOUT_S", 1.0)
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("x")
    argv = ["predict", *(a.format(tmp=tmp_path, port=_free_port(), **{"in": inputs}) for a in extra)]
    code, _, err = _cli(argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0], (argv, err)
    assert not (tmp_path / "o").exists()
