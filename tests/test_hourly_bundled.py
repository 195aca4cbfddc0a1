"""The bundled hourly dataset ``electricitymaps-2023`` (Electricity Maps' published 2023 hourly
intensities of DE, FR, GB and US-CAL-CISO, ODbL 1.0; llmco2/carbon/data/HOURLY_ELECTRICITYMAPS_2023.md):
it loads by name, holds a whole year per zone, its values are plausible, predictions use the hour
of their zone and name the source and licence, and a zone it lacks is refused in one line. No
network: the file ships with the package."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmco2
from llmco2.carbon.hourly import intensity_for, load_intensity
from llmco2.carbon.hourly_datasets import DATASETS, find_dataset
from llmco2.errors import InvalidInputError
from tests.helpers import run_cli

NAME = "electricitymaps-2023"
ZONES = ("DE", "FR", "GB", "US-CAL-CISO")
DIRECT, LCA = "Carbon Intensity gCO₂eq/kWh (direct)", "Carbon Intensity gCO₂eq/kWh (LCA)"
REQUEST = ["--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "1024", "--gen-tokens", "128"]
J_PER_KWH = 3.6e6


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    """The bundled file read independently of llmco2's reader."""
    return pd.read_csv(DATASETS[NAME].path())


def test_the_bundled_file_holds_a_whole_year_of_each_zone(raw: pd.DataFrame) -> None:
    h = load_intensity(NAME)
    assert h.source == NAME and h.format == "electricitymaps" and h.basis == "direct"
    assert h.regions == ZONES == DATASETS[NAME].zones
    assert h.span() == "2023-01-01T00:00Z to 2023-12-31T23:00Z"
    for hours in h.hours:
        assert len(hours) == 8760 == DATASETS[NAME].hours  # 2023 is not a leap year
        assert (np.diff(hours) == 1).all()  # every hour, once
    assert sorted(raw["Zone Id"].unique()) == list(ZONES) and len(raw) == 4 * 8760
    assert DATASETS[NAME].path().stat().st_size < 400_000  # small enough to ship


def test_its_values_are_plausible(raw: pd.DataFrame) -> None:
    """Direct intensities between 0 and 1,000 g/kWh, life-cycle ones at least as high, and the
    known ordering of these grids: nuclear France far below coal-and-gas Germany."""
    assert raw[DIRECT].between(0, 1000).all() and (raw[LCA] >= raw[DIRECT]).all()
    median = raw.groupby("Zone Id")[DIRECT].median()
    assert median["FR"] < 60 < 250 < median["DE"]
    assert median["FR"] < median["GB"] < median["US-CAL-CISO"] < median["DE"]
    h = load_intensity(NAME)
    for zone, values in zip(h.regions, h.values, strict=True):
        np.testing.assert_allclose(np.median(values), median[zone])


def test_a_prediction_in_france_uses_the_french_hour_and_names_the_source(raw: pd.DataFrame) -> None:
    row = raw[(raw["Zone Id"] == "FR") & (raw["Datetime (UTC)"] == "2023-11-16 18:00:00")]
    expected = float(row[DIRECT].iloc[0])
    p = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=1024, gen_tokens=128, intensity=NAME,
                       timestamp="2023-11-16T18:20:00Z", region="FR")
    grid = p.assumptions["grid"]
    assert grid["g_co2eq_per_kwh"] == expected and grid["region"] == "FR" and grid["hour"] == "2023-11-16T18:00Z"
    assert "Electricity Maps" in grid["source"] and "ODbL" in grid["source"] and "ILLUSTRATIVE" not in grid["source"]
    assert grid["dataset"] == NAME and grid["licence"].startswith("ODbL 1.0")
    assert grid["attribution"].startswith("Contains data from Electricity Maps")
    annual = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=1024, gen_tokens=128, carbon_intensity=expected)
    assert p.carbon_g["operational"] == pytest.approx(annual.carbon_g["operational"])
    lifecycle = intensity_for(load_intensity(NAME, basis="lifecycle"), ["2023-11-16T18:20:00Z"], ["france"])[0]
    assert lifecycle == float(row[LCA].iloc[0]) > expected


def test_the_command_line_takes_the_name_and_refuses_a_zone_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["predict", *REQUEST, "--intensity-file", NAME, "--region", "de", "--timestamp",
                              "2023-07-01T12:00:00Z", "--json"], capsys)
    assert code == 0, err
    grid = json.loads(out)["assumptions"]["grid"]
    assert grid["intensity_file"] == NAME and "Electricity Maps" in grid["source"]
    for region in ("SE", "Narnia"):
        code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", NAME, "--region", region, "--timestamp",
                                "2023-07-01T12:00:00Z"], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1
        assert f"region {region!r} is not in {NAME} (its regions: DE, FR, GB, US-CAL-CISO)" in lines[0]
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", NAME, "--timestamp", "2023-07-01T12:00:00Z"], capsys)
    assert code == 2 and "no region" in err and "DE, FR, GB, US-CAL-CISO" in err
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", NAME, "--region", "FR", "--timestamp",
                            "2024-01-01T00:00:00Z"], capsys)
    assert code == 2 and "outside the hours" in err and "2023-12-31T23:00Z" in err


def test_a_missing_file_names_the_bundled_datasets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["predict", *REQUEST, "--intensity-file", str(tmp_path / "nope.csv"), "--region", "FR",
                            "--timestamp", "2023-07-01T12:00:00Z"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no such file" in err and f"{NAME} (DE, FR, GB, US-CAL-CISO)" in err


def test_a_file_that_exists_is_read_as_a_path_even_with_the_dataset_name(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path(NAME).write_text("timestamp,g_co2eq_per_kwh\n2023-07-01T12:00:00Z,123\n")
    h = load_intensity(NAME)
    assert h.dataset is None and h.format == "llmco2" and intensity_for(h, ["2023-07-01T12:30:00Z"])[0] == 123
    assert find_dataset(" ElectricityMaps-2023 ") is DATASETS[NAME] and find_dataset("electricitymaps") is None


def test_a_request_file_names_the_source_in_its_totals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "log.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,timestamp,region\n"
                   "llama3.1-8b,h100,1,512,64,2023-11-16T03:10:00Z,FR\nllama3.1-8b,h100,1,512,64,2023-11-16T03:10:00Z,GB\n")
    out = tmp_path / "out.csv"
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(out), "--intensity-file", NAME], capsys)
    assert code == 0, err
    grid = json.loads((tmp_path / "out.csv.totals.json").read_text())["assumptions"]["grid"]
    assert grid["dataset"] == NAME and "ODbL" in grid["licence"] and "Electricity Maps" in grid["attribution"]
    h = load_intensity(NAME)
    fr, gb = intensity_for(h, ["2023-11-16T03:10:00Z"] * 2, ["FR", "GB"])
    per_kwh = pd.read_csv(out)["operational_g"].to_numpy()
    np.testing.assert_allclose(per_kwh[1] / per_kwh[0], gb / fr, rtol=1e-4)  # same request, each at its zone's hour
    src.write_text(src.read_text().replace("GB\n", "NO\n"))
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "o2.csv"), "--intensity-file", NAME],
                           capsys)
    assert code == 2 and "line 3" in err and "'NO' is not in" in err and not (tmp_path / "o2.csv").exists()


def test_a_gzip_intensity_file_is_read_and_a_damaged_one_refused(tmp_path: Path) -> None:
    good = tmp_path / "hours.csv.gz"
    good.write_bytes(gzip.compress(b"timestamp,g_co2eq_per_kwh\n2024-03-01T00:00:00Z,100\n"))
    assert intensity_for(load_intensity(good), ["2024-03-01T00:10:00Z"])[0] == 100
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(good.read_bytes()[:-6])
    with pytest.raises(InvalidInputError, match="not a readable gzip file") as caught:
        load_intensity(bad)
    assert caught.value.field == "intensity"


def test_the_readme_names_source_licence_and_the_files_digest() -> None:
    dataset = DATASETS[NAME]
    readme = (dataset.path().parent / dataset.readme).read_text(encoding="utf-8")
    for text in ("Electricity Maps", "ODbL", "opendatacommons.org/licenses/odbl/1-0", "westkath/ichnos",
                 "52b81f4469d05dfd5d702e8107b9dcfd9c17f9a2", "experiments/bundle_hourly_intensity.py", *ZONES):
        assert text in readme
    digest = re.search(r"sha256 `([0-9a-f]{64})`", readme)
    assert digest and digest.group(1) == hashlib.sha256(dataset.path().read_bytes()).hexdigest()
