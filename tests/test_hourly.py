"""Hourly grid intensity (convention 11 (docs/reference/conventions.md)): reading intensity files (llmco2 and Electricity
Maps layouts), looking requests up by hour and region, and ``--intensity-file`` on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmco2.carbon.hourly import intensity_for, load_intensity
from llmco2.carbon.hourly_files import sample_intensity_path
from llmco2.errors import InvalidInputError
from tests.helpers import run_cli

REQUEST = ["--model", "llama3.1-8b", "--gpu", "a100-80gb", "--batch-size", "1", "--prompt-tokens", "256", "--gen-tokens", "32"]
EM_HEADER = ("Datetime (UTC),Country,Zone Name,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA),"
             "Low Carbon Percentage,Renewable Percentage,Data Source,Data Estimated,Data Estimation Method")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def two_hours(tmp_path: Path) -> Path:
    return write(tmp_path / "hours.csv", "timestamp,g_co2eq_per_kwh\n2024-03-01T00:00:00Z,100\n2024-03-01T01:00:00Z,400\n")


@pytest.fixture
def regions(tmp_path: Path) -> Path:
    return write(tmp_path / "regions.csv", "timestamp,g_co2eq_per_kwh,region\n2024-03-01T00:00:00Z,100,FR\n"
                                          "2024-03-01T01:00:00Z,200,FR\n2024-03-01T00:00:00Z,300,DE\n"
                                          "2024-03-01T01:00:00Z,500,DE\n")


def requests_csv(path: Path, stamps: list[str], regions: list[str] | None = None) -> Path:
    head = "model,gpu,batch_size,prompt_tokens,generated_tokens,timestamp" + (",region" if regions else "")
    rows = [f"llama3.1-8b,a100-80gb,1,256,32,{t}" + (f",{regions[i]}" if regions else "") for i, t in enumerate(stamps)]
    return write(path, "\n".join([head, *rows]) + "\n")


def test_hour_lookup_and_formats(two_hours: Path) -> None:
    h = load_intensity(two_hours)
    assert h.format == "llmco2" and h.regions == ("",)
    got = intensity_for(h, ["2024-03-01T00:00:00Z", "2024-03-01 00:59:59", "2024-03-01T02:30:00+01:00",
                            "2024-03-01T01:59:59.9999999"])
    assert got.tolist() == [100.0, 100.0, 400.0, 400.0]
    stamps = pd.Series(pd.to_datetime(["2024-03-01T01:15:00Z"]))
    assert intensity_for(h, stamps).tolist() == [400.0]
    frame = pd.DataFrame({"timestamp": ["2024-03-01T00:00:00Z"], "g_co2eq_per_kwh": [123.0]})
    assert intensity_for(load_intensity(frame), ["2024-03-01T00:30:00Z"]).tolist() == [123.0]


def test_two_requests_an_hour_apart_differ_by_the_intensity_ratio(two_hours: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = requests_csv(tmp_path / "req.csv", ["2024-03-01T00:10:00Z", "2024-03-01T01:10:00Z"])
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"),
                            "--intensity-file", str(two_hours)], capsys)
    assert code == 0, err
    out = pd.read_csv(tmp_path / "out.csv")
    assert out["total_j"][0] == out["total_j"][1]
    assert out["operational_g"][1] / out["operational_g"][0] == pytest.approx(4.0, rel=1e-9)
    single = []
    for stamp in ("2024-03-01T00:10:00Z", "2024-03-01T01:10:00Z"):
        code, text, err = run_cli(["predict", *REQUEST, "--intensity-file", str(two_hours), "--timestamp", stamp, "--json"], capsys)
        assert code == 0, err
        single.append(json.loads(text))
    assert single[1]["carbon_g"]["operational"] / single[0]["carbon_g"]["operational"] == pytest.approx(4.0, rel=1e-9)
    assert single[0]["carbon_g"]["operational"] == pytest.approx(out["operational_g"][0], rel=1e-6)
    assert single[1]["assumptions"]["grid"]["hour"] == "2024-03-01T01:00Z"


def test_requests_outside_the_hours(two_hours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = requests_csv(tmp_path / "req.csv", ["2024-03-01T00:10:00Z", "2024-03-01T03:00:00Z", "2024-02-29T23:59:59Z"])
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"),
                            "--intensity-file", str(two_hours)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "2 requests fall outside the hours" in err and "line 3" in err and "2024-03-01T03:00:00Z" in err
    assert not (tmp_path / "out.csv").exists()
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", str(two_hours), "--timestamp", "2024-03-02T00:00Z"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "outside the hours" in err


def test_a_gap_inside_the_file_is_called_a_gap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gappy = write(tmp_path / "gappy.csv", "timestamp,g_co2eq_per_kwh\n2024-03-01T00:00:00Z,100\n"
                                          "2024-03-01T01:00:00Z,200\n2024-03-01T03:00:00Z,300\n")
    src = requests_csv(tmp_path / "req.csv", ["2024-03-01T00:10:00Z", "2024-03-01T02:30:00Z"])
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"),
                            "--intensity-file", str(gappy)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "outside the hours" not in err and "no row for hour 2024-03-01T02:00Z" in err and "line 3" in err
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", str(gappy), "--timestamp", "2024-03-01T02:59Z"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "outside the hours" not in err and "no row for hour 2024-03-01T02:00Z" in err and "--timestamp" in err
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", str(gappy), "--timestamp", "2024-03-01T04:00Z"], capsys)
    assert code == 2 and "outside the hours" in err  # after the last hour: outside, not a gap


def test_region_selection(regions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h = load_intensity(regions)
    stamps = ["2024-03-01T00:30Z", "2024-03-01T01:30Z", "2024-03-01T00:30Z", "2024-03-01T01:30Z"]
    assert intensity_for(h, stamps, ["FR", "fra", "DE", ""], default_region="germany").tolist() == [100, 200, 300, 500]
    with pytest.raises(InvalidInputError, match="no region"):
        intensity_for(h, stamps[:1])
    with pytest.raises(InvalidInputError, match="region 'US' is not in"):
        intensity_for(h, stamps[:1], ["US"])
    src = requests_csv(tmp_path / "req.csv", stamps[:2], ["DE", ""])
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"),
                            "--intensity-file", str(regions), "--region", "FR"], capsys)
    assert code == 0, err
    out = pd.read_csv(tmp_path / "out.csv")
    per_kwh = out["operational_g"] / out["total_j"]
    assert per_kwh[1] / per_kwh[0] == pytest.approx(200 / 300, rel=1e-9)


def test_electricity_maps_export(tmp_path: Path) -> None:
    h = load_intensity(sample_intensity_path())
    assert h.format == "electricitymaps" and h.regions == ("FR", "DE")
    assert [len(x) for x in h.hours] == [48, 48] and h.span() == "2023-11-16T00:00Z to 2023-11-17T23:00Z"
    raw = pd.read_csv(sample_intensity_path())
    de = raw[raw["Zone Id"] == "DE"].iloc[5]
    got = intensity_for(h, [de["Datetime (UTC)"]], ["de"])[0]
    assert got == de["Carbon Intensity gCO₂eq/kWh (direct)"]
    lca = intensity_for(load_intensity(sample_intensity_path(), basis="lifecycle"), [de["Datetime (UTC)"]], ["de"])[0]
    assert lca == de["Carbon Intensity gCO₂eq/kWh (LCA)"]
    newer = write(tmp_path / "em.csv", "Datetime (UTC),Country,Zone name,Zone id,Carbon intensity gCO₂eq/kWh (direct),"
                                       "Carbon intensity gCO₂eq/kWh (Life cycle),Carbon-free energy percentage (CFE%)\n"
                                       "2024-01-01 00:00:00,Sweden,Sweden,SE,12.5,35.1,99\n")
    assert intensity_for(load_intensity(newer, basis="lifecycle"), ["2024-01-01T00:20:00Z"]).tolist() == [35.1]
    assert intensity_for(load_intensity(newer), ["2024-01-01T00:20:00Z"]).tolist() == [12.5]
    assert EM_HEADER == raw.columns.str.cat(sep=",")


@pytest.mark.parametrize(("text", "expected"), [
    ("time,value\n2024-03-01T00:00Z,100\n", "line 1: not an hourly intensity file"),
    ("timestamp,g_co2eq_per_kwh\n2024-03-01T00:00Z,100\nyesterday,200\n", "line 3: timestamp: 'yesterday'"),
    ("timestamp,g_co2eq_per_kwh\n2024-03-01T00:00Z,-5\n", "line 2: g_co2eq_per_kwh: must be a number from 0"),
    ("timestamp,g_co2eq_per_kwh\n2024-03-01T00:00Z,100\n2024-03-01T00:30Z,200\n", "line 3: a second row for hour"),
    ("timestamp,g_co2eq_per_kwh\n", "has a header but no hours"),
])
def test_bad_intensity_files(tmp_path: Path, text: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "bad.csv", text)
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", str(path), "--timestamp", "2024-03-01T00:00Z"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(path) in err and expected in err


def test_option_combinations(two_hours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [[*REQUEST, "--timestamp", "2024-03-01T00:00Z"], [*REQUEST, "--intensity-file", str(two_hours)],
             [*REQUEST, "--intensity-file", str(two_hours), "--timestamp", "2024-03-01T00:00Z", "--carbon-intensity", "5"],
             [*REQUEST, "--intensity-file", str(tmp_path / "missing.csv"), "--timestamp", "2024-03-01T00:00Z"]]
    for args in cases:
        code, _, err = run_cli(["predict", *args], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, (args, err)
    src = write(tmp_path / "req.csv", "model,gpu,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,a100-80gb,1,8,8\n")
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "o.csv"), "--intensity-file",
                            str(two_hours)], capsys)
    assert code == 2 and "has no timestamp column" in err
    assert np.isfinite(load_intensity(two_hours).values[0]).all()


def test_parquet_requests_with_timestamp_type(two_hours: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame = pd.DataFrame({"model": ["llama3.1-8b"] * 2, "gpu": ["h100"] * 2, "batch_size": [1, 1], "prompt_tokens": [64, 64],
                          "generated_tokens": [8, 8], "timestamp": pd.to_datetime(["2024-03-01T00:10:00Z", "2024-03-01T01:10:00Z"])})
    frame.to_parquet(tmp_path / "req.parquet")
    code, _, err = run_cli(["predict", "--requests", str(tmp_path / "req.parquet"), "--out", str(tmp_path / "out.parquet"),
                            "--intensity-file", str(two_hours)], capsys)
    assert code == 0, err
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert out["operational_g"][1] / out["operational_g"][0] == pytest.approx(4.0, rel=1e-9)
