"""A batch run prints and writes its totals (rows, kWh with the interval ends, kg CO2eq
operational and embodied), and a resumed run's totals equal an uninterrupted run's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import llmco2.analytic.request_files as rf
import llmco2.carbon.footprint as footprint
from tests.helpers import interrupted_on_call
from tests.helpers import run_cli as run

HEADER = "model,gpu,batch_size,prompt_tokens,generated_tokens,region\n"
ROWS = ["llama3.1-8b,h100,1,100,10,FR", "qwen2-7b,a100-80gb,4,512,64,DE", "llama3.1-8b,h100,2,300,30,", "qwen2-7b,l4,1,64,16,FR",
        "llama3.1-8b,a100-80gb,8,128,128,DE", "qwen2-7b,h100,1,1000,200,"]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "log.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n")
    return path


def test_totals_are_printed_and_written_beside_the_output(src: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "pred.csv"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("totals: 6 requests, ") and "kg CO2eq" in line and line.endswith("pred.csv.totals.json")
    totals = json.loads((tmp_path / "pred.csv.totals.json").read_text())
    pred = pd.read_csv(out)
    assert totals["rows"] == 6
    assert totals["energy_kwh"] == pytest.approx(pred["total_j"].sum() / 3.6e6, rel=1e-6)
    lo, hi = totals["energy_kwh_interval"]
    assert lo == pytest.approx(pred["total_j_low"].sum() / 3.6e6, rel=1e-6) and hi == pytest.approx(pred["total_j_high"].sum() / 3.6e6, rel=1e-6)
    assert totals["operational_kg_co2eq"] == pytest.approx(pred["operational_g"].sum() / 1e3, rel=1e-4)
    assert totals["embodied_kg_co2eq"] == pytest.approx(pred["embodied_g"].sum() / 1e3, rel=1e-3)
    assert totals["assumptions"]["pue"]["value"] > 1


def test_a_resumed_run_has_the_totals_of_an_uninterrupted_one(src: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    ref = tmp_path / "ref" / "pred.csv"
    ref.parent.mkdir()
    assert run(["predict", "--requests", str(src), "--out", str(ref)], capsys)[0] == 0
    stop_at_second = interrupted_on_call(footprint.predict_footprint, 2)
    out = tmp_path / "pred.csv"
    with monkeypatch.context() as m:
        m.setattr(footprint, "predict_footprint", stop_at_second)
        assert run(["predict", "--requests", str(src), "--out", str(out)], capsys)[0] == 130
    assert run(["predict", "--requests", str(src), "--out", str(out)], capsys)[0] == 0
    a = json.loads((tmp_path / "pred.csv.totals.json").read_text())
    b = json.loads((ref.parent / "pred.csv.totals.json").read_text())
    for key in ("rows", "energy_kwh", "energy_kwh_interval", "operational_kg_co2eq", "embodied_kg_co2eq"):
        assert a[key] == b[key], key


def test_the_totals_file_may_not_land_on_an_input(tmp_path: Path, capsys) -> None:
    src = tmp_path / "pred.csv.totals.json"
    src.write_text(HEADER + ROWS[0] + "\n")
    before = src.read_bytes()
    code, _, err = run(["predict", "--requests", str(src), "--out", str(tmp_path / "pred.csv")], capsys)
    assert code == 2 and "it is the --requests input" in err and src.read_bytes() == before
