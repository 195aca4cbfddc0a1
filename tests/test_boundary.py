"""The validation layer at the boundary: options, request files, config.json, input and output
paths. Every bad input is exit code 2 and one line naming the cause; nothing non-finite is printed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import run_cli as run
from tests.test_gnn import synthetic_table

REQUEST = ["--model", "qwen2-0.5b", "--gpu", "a100-80gb", "--batch-size", "1", "--prompt-tokens", "64", "--gen-tokens", "8"]
HEADER = "model,gpu,batch_size,prompt_tokens,generated_tokens\n"
ROW = "qwen2-0.5b,a100-80gb,1,64,8\n"


def _refused(args: list[str], capsys, *mentions: str) -> str:
    code, out, err = run(args, capsys)
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for mention in mentions:
        assert mention in err, err
    return err


@pytest.mark.parametrize("extra, mentions", [
    (["--pue", "nan"], ["--pue", "from 1 to 10"]),
    (["--pue", "inf"], ["--pue"]),
    (["--carbon-intensity", "inf"], ["--carbon-intensity", "finite"]),
    (["--carbon-intensity", "nan"], ["--carbon-intensity", "finite"]),
    (["--carbon-intensity", "1e9"], ["--carbon-intensity", "5000"]),
    (["--lifetime-years", "nan"], ["--lifetime-years", "finite"]),
    (["--lifetime-years", "1e308"], ["--lifetime-years", "100 years"]),
    (["--out", "x.csv"], ["--out", "only applies with --requests"]),
    (["--region", ""], ["--region", "is empty"]),
    (["--region", "  "], ["--region", "is empty"]),
    (["--gpus", "100000000000000000000"], ["--gpus", "out of range"]),
])
def test_bad_single_request_options(extra: list[str], mentions: list[str], capsys) -> None:
    _refused(["predict", *REQUEST, *extra, "--json"], capsys, *mentions)


@pytest.mark.parametrize("argv, mentions", [
    (["predict", *REQUEST[:2], "--gpu", "a100-80gb", "--batch-size", "2000000", "--prompt-tokens", "8", "--gen-tokens", "2"],
     ["--batch-size", "1,048,576"]),
    (["analyze", "model", "--model", "qwen2-0.5b", "--gpu", "a100-80gb", "--batch-size", "1", "--prompt-tokens", "999999999999",
      "--gen-tokens", "2", "--ignore-context"], ["--prompt-tokens", "134,217,728"]),
    (["sample", "--n", "10", "--out", "s.csv", "--gpus", ""], ["--gpus", "is empty"]),
])
def test_bad_counts_and_empty_values(argv: list[str], mentions: list[str], capsys) -> None:
    _refused(argv, capsys, *mentions)


def test_ignore_context_is_honoured_by_analyze_model(capsys) -> None:
    code, out, err = run(["analyze", "model", "--model", "qwen2-0.5b", "--gpu", "a100-80gb", "--batch-size", "1",
                          "--prompt-tokens", "100000", "--gen-tokens", "2", "--ignore-context", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["summary"]["time_s"] > 0


@pytest.mark.parametrize("body, mentions", [
    (HEADER + "qwen2-0.5b,a100-80gb,1e20,64,8\n", ["line 2: batch_size", "1,048,576", "1e20"]),
    (HEADER + "qwen2-0.5b,a100-80gb,-9.2e18,64,8\n", ["batch_size"]),
    (HEADER + "qwen2-0.5b,a100-80gb,1,nan,8\n", ["prompt_tokens"]),
    ("model,gpu,batch_size,prompt_tokens,generated_tokens,batch_size\n" + ROW.strip() + ",2\n", ["batch_size", "more than once"]),
    ("a,b,c\n1,2,3\n", ["does not look like a request file", "expected columns model, gpu"]),
    (HEADER.replace("\n", ",hidden_size\n") + ROW.strip() + ",32.5\n", ["hidden_size", "integer"]),
])
def test_bad_request_files(body: str, mentions: list[str], tmp_path: Path, capsys) -> None:
    src = tmp_path / "r.csv"
    src.write_text(body)
    for argv in (["predict", "--requests", str(src), "--out", str(tmp_path / "p.csv")],
                 ["analyze", "batch", "--requests", str(src), "--out", str(tmp_path / "a.csv")]):
        _refused(argv, capsys, *mentions)
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "a.csv").exists()


def test_binary_and_oversized_request_files(tmp_path: Path, capsys) -> None:
    binary = tmp_path / "b.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    _refused(["predict", "--requests", str(binary), "--out", str(tmp_path / "p.csv")], capsys, "b.csv")
    huge_field = tmp_path / "h.csv"
    huge_field.write_text(HEADER + ROW + "qwen2-0.5b," + "x" * (3 << 20) + ",1,64,8\n")
    _refused(["predict", "--requests", str(huge_field), "--out", str(tmp_path / "p.csv")], capsys, "h.csv")
    huge_header = tmp_path / "hh.csv"
    huge_header.write_text("m" * (3 << 20) + "\n" + ROW)
    _refused(["predict", "--requests", str(huge_header), "--out", str(tmp_path / "p.csv")], capsys, "hh.csv")


def test_inputs_that_are_not_files(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "p.csv")
    _refused(["predict", "--requests", str(tmp_path), "--out", out], capsys, "is a directory")
    if os.path.exists("/dev/zero"):
        _refused(["predict", "--requests", "/dev/zero", "--out", out], capsys, "is not a regular file")
        _refused(["data", "import", "argonne", "/dev/zero", "--out", str(tmp_path / "t.parquet")], capsys,
                 "is not a regular file")
    _refused(["evaluate", "--data", str(tmp_path)], capsys, "is a directory")


def _output_cases(tmp_path: Path, suffix: str) -> list[tuple[str, str]]:
    plain = tmp_path / "plain.txt"
    plain.write_text("a file")
    (tmp_path / f"folder{suffix}").mkdir(exist_ok=True)
    return [(str(tmp_path / f"folder{suffix}"), "is a directory"), (str(plain / f"x{suffix}"), "is a file, not a folder"),
            (str(tmp_path / "missing" / f"x{suffix}"), "does not exist")]


def test_output_paths_are_checked_before_the_work(tmp_path: Path, capsys) -> None:
    src = tmp_path / "r.csv"
    src.write_text(HEADER + ROW)
    commands = {".csv": [["predict", "--requests", str(src)], ["sample", "--n", "5"]],
                ".parquet": [["data", "import", "argonne", str(src)]],
                ".png": [["report", "trace", "--model", "qwen2-0.5b", "--gpu", "a100-80gb"]]}
    for suffix, argvs in commands.items():
        for path, reason in _output_cases(tmp_path, suffix):
            for argv in argvs:
                _refused([*argv, "--out", path], capsys, f"cannot write {path}", reason)
    _refused(["predict", "--requests", str(src), "--out", str(src)], capsys, "it is the --requests input")
    _refused(["report", "case-studies", "--gpu", "a100-80gb", "--out", str(src)], capsys, "is a file, not a folder")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_is_refused(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        _refused(["sample", "--n", "5", "--out", str(folder / "s.csv")], capsys, "cannot write", "permission denied")
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("change, mention", [
    ({"num_hidden_layers": 32.7}, "num_hidden_layers"),
    ({"hidden_size": "4096"}, "hidden_size"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_attention_heads": float("nan")}, "num_attention_heads"),
    ({"hidden_size": 10**30}, "hidden_size"),
    ({"intermediate_size": -5}, "intermediate_size"),
])
def test_bad_config_json(change: dict, mention: str, tmp_path: Path, capsys) -> None:
    cfg = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4,
           "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000, **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))  # NaN is written as the bare token NaN, which json.loads accepts
    _refused(["analyze", "model", "--model", str(path), "--gpu", "a100-80gb", "--batch-size", "1", "--prompt-tokens", "8",
              "--gen-tokens", "2", "--json"], capsys, mention)


def test_importer_names_the_format_a_file_does_not_match(tmp_path: Path, capsys) -> None:
    path = tmp_path / "co2.csv"
    path.write_text("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,0,1,16\n" * 3)
    _refused(["data", "import", "argonne", str(path), "--out", str(tmp_path / "t.parquet")], capsys,
             "does not look like an argonne file", "expected columns")


def test_evaluate_lists_non_finite_energies_as_excluded(tmp_path: Path, capsys) -> None:
    table = synthetic_table(3)
    table.loc[0, "energy_j"] = np.inf
    path = tmp_path / "rows.csv"
    table.to_csv(path, index=False)
    code, out, err = run(["evaluate", "--data", str(path), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["excluded_rows"] == {"measured energy not finite": 1} and np.isfinite(doc["mape"])
    table["energy_j"] = np.inf
    table.to_csv(path, index=False)
    _refused(["evaluate", "--data", str(path)], capsys, "measured energy not finite")


def test_repredicted_file_replaces_its_prediction_columns(tmp_path: Path, capsys, caplog) -> None:
    src = tmp_path / "r.csv"
    src.write_text(HEADER + ROW + "qwen2-1.5b,h100,2,128,16\n")
    first, second = tmp_path / "p1.csv", tmp_path / "p2.csv"
    assert run(["predict", "--requests", str(src), "--out", str(first)], capsys)[0] == 0
    code, _, err = run(["predict", "--requests", str(first), "--out", str(second)], capsys)
    assert code == 0, err
    assert [r.getMessage().split(" already ")[1][:38] for r in caplog.records if "already has" in r.getMessage()] == [
        "has prediction columns (prefill_j, dec"]
    assert second.read_bytes() == first.read_bytes()
