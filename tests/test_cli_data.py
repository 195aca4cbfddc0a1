"""`llmco2 data import | summary | azure-figure`: real files, counts that match DATA.md, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli as run


def test_import_and_summary_of_co2meter(tmp_path: Path, capsys, shared_data: Path) -> None:
    out = tmp_path / "trace.parquet"
    code, _, err = run(["data", "import", "co2meter", str(shared_data / "co2meter" / "train_trace.csv"), "-o", str(out)], capsys)
    assert code == 0, err
    assert "31,952 rows read" in err and "11 energy_j == 0" in err
    code, text, _ = run(["data", "summary", str(out), "--json"], capsys)
    summary = json.loads(text)
    assert summary["rows"] == 31_952 - 11
    assert summary["per_source"] == {"co2meter": 31_941}
    assert set(summary["per_device"]) == {"jetson-orin", "rk3588-npu"}
    assert set(summary["per_model"]) == {"tinyllama-1.1b", "qwen1.5-0.5b", "qwen2-1.5b", "internlm2-1.8b"}
    assert summary["ranges"]["prompt_tokens"]["max"] <= 1024


def test_import_all_writes_every_source(tmp_path: Path, capsys, shared_data: Path) -> None:
    out = tmp_path / "all.csv"
    code, _, err = run(["data", "import", "all", str(shared_data), "-o", str(out)], capsys)
    assert code == 0, err
    assert "refused DATA.md" in err
    code, text, _ = run(["data", "summary", str(out), "--json"], capsys)
    per_source = json.loads(text)["per_source"]
    assert set(per_source) >= {"co2meter", "argonne", "mlenergy_v2", "mlenergy_v3", "wilkins", "delavande", "tokenpowerbench",
                               "splitwise"}
    assert set(per_source) <= {"co2meter", "argonne", "mlenergy_v2", "mlenergy_v3", "wilkins", "delavande", "tokenpowerbench",
                               "splitwise", "h100_hf", "llmco2", "collected"}


def test_malformed_source_leaves_no_output(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "argonne.csv"
    bad.write_text("source,hardware,num_devices\nx,Nvidia A100 GPU,1\n")
    out = tmp_path / "out.parquet"
    code, text, err = run(["data", "import", "argonne", str(bad), "-o", str(out)], capsys)
    assert code == 2 and text == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("args, mention", [
    (["data", "import", "nosuchformat", "x.csv", "-o", "o.parquet"], "nosuchformat"),
    (["data", "import", "co2meter", "/nonexistent.csv", "-o", "o.parquet"], "nonexistent"),
    (["data", "import", "co2meter", "/nonexistent.csv", "-o", "o.xlsx"], "xlsx"),
    (["data", "summary", "/nonexistent.parquet"], "nonexistent"),
])
def test_bad_data_arguments(args, mention, capsys) -> None:
    code, text, err = run(args, capsys)
    assert code == 2 and mention in err and len(err.strip().splitlines()) == 1


def test_azure_figure(tmp_path: Path, capsys, shared_data: Path) -> None:
    out = tmp_path / "fig6.png"
    code, text, err = run(["data", "azure-figure", "-o", str(out), "--json"], capsys)
    assert code == 0, err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stats = json.loads(text)
    assert stats["code"]["prompt_tokens"]["median"] == 1469 and stats["conv"]["generated_tokens"]["median"] == 129


def test_import_with_no_usable_row_exits_2_with_counts(tmp_path: Path, capsys) -> None:
    src = tmp_path / "argonne.csv"
    src.write_text("source,hardware,num_devices,framework,model,input_len,output_len,batch_size,latency_s,avg_power_W,"
                   "power_unit_in_file,energy_J_est\n"
                   "x,Cerebras WSE-3,1,vLLM,Qwen3-14B,10,10,1,1.0,400,W,400\n"
                   "x,Cerebras WSE-3,1,vLLM,Qwen3-14B,10,10,1,1.0,400,W,400\n"
                   "x,Nvidia H100 GPU,1,vLLM,GPT-9,10,10,1,1.0,400,W,400\n")
    out = tmp_path / "out.csv"
    code, _, err = run(["data", "import", "argonne", str(src), "-o", str(out)], capsys)
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "no usable rows" in err
    assert "2 device not in catalog: Cerebras WSE-3" in err and "1 model not in catalog: GPT-9" in err


def test_summary_of_a_measurement_folder(tmp_path: Path, capsys) -> None:
    code, text, _ = run(["data", "summary", str(tmp_path)], capsys)
    assert code == 0 and text.startswith("0 rows in") and "no measurement table yet" in text
    (tmp_path / "h100.failed.csv").write_text("key,reason,time\n")
    code, text, _ = run(["data", "summary", str(tmp_path), "--json"], capsys)
    assert code == 0 and json.loads(text) == {"rows": 0, "files": []}
