"""A region column in a request log charges each row at its own region's grid intensity (file,
Python API and cluster worker), and an unknown region is refused before anything is written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import llmco2
from llmco2.carbon.accounting import region
from llmco2.carbon.region_rows import ChunkRegions, row_intensities
from tests.helpers import run_cli as run

HEADER = "model,gpu,batch_size,prompt_tokens,generated_tokens,region\n"
ROW = "llama3.1-8b,h100,1,100,10,{}\n"


def _file(tmp_path: Path, regions: list[str]) -> Path:
    src = tmp_path / "log.csv"
    src.write_text(HEADER + "".join(ROW.format(r) for r in regions))
    return src


def test_each_row_is_charged_at_its_own_region(tmp_path: Path, capsys) -> None:
    src = _file(tmp_path, ["FR", "DE", "", "aws:us-east-1"])
    code, _, err = run(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"), "--region", "usa"], capsys)
    assert code == 0, err
    out = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    g = [region(r).g_co2eq_per_kwh for r in ("fra", "deu", "usa", "aws:us-east-1")]
    # same energy on every row: operational carbon in proportion to the rows' intensities
    np.testing.assert_allclose(out["operational_g"] / out["operational_g"][0], np.array(g) / g[0], rtol=1e-6)
    assert out["total_j"].nunique() <= 2  # float noise only
    assert "per row (region column)" in err


def test_an_unknown_region_is_refused_with_its_line_before_anything_is_written(tmp_path: Path, capsys) -> None:
    src = _file(tmp_path, ["FR", "FR", "Narnia"])
    code, _, err = run(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "line 4" in err and "Narnia" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv"]


def test_a_carbon_intensity_overrides_the_region_column(tmp_path: Path, capsys) -> None:
    src = _file(tmp_path, ["FR", "DE"])
    code, _, err = run(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"), "--carbon-intensity", "100"],
                       capsys)
    assert code == 0, err
    out = pd.read_csv(tmp_path / "out.csv")
    assert out["operational_g"].nunique() == 1


def test_predict_frame_honours_the_region_column() -> None:
    df = pd.DataFrame({"model": ["llama3.1-8b"] * 3, "gpu": ["h100"] * 3, "batch_size": [1] * 3, "prompt_tokens": [100] * 3,
                       "generated_tokens": [10] * 3, "region": ["FR", "DE", None]})
    out = llmco2.predict_frame(df, region="usa")
    g = np.array([region(r).g_co2eq_per_kwh for r in ("fra", "deu", "usa")])
    np.testing.assert_allclose(out["operational_g"] / out["operational_g"][0], g / g[0], rtol=1e-6)
    with pytest.raises(llmco2.InvalidInputError, match="line 3"):
        llmco2.predict_frame(df.assign(region=["FR", "Narnia", "DE"]))


@dataclass
class _Footprint:
    """What a footprint's operational carbon depends on: energy (J) and PUE."""

    total_j: np.ndarray
    assumptions: dict
    operational_g: np.ndarray | None = None

    @property
    def scope_j(self) -> np.ndarray:
        """The energy carbon is computed on (no scope named: the GPUs')."""
        return self.total_j


def test_a_cluster_worker_applies_each_chunks_regions() -> None:
    batch = pa.RecordBatch.from_pydict({"model": ["x", "x"], "region": ["FR", ""]})
    chunk = SimpleNamespace(batch=batch, first_line=10)
    fp = _Footprint(np.array([3.6e6, 3.6e6]), {"pue": {"value": 1.0}})  # 1 kWh each
    out = ChunkRegions("log.csv", "deu").apply(fp, chunk)
    np.testing.assert_allclose(out.operational_g, [region("fra").g_co2eq_per_kwh, region("deu").g_co2eq_per_kwh])
    with pytest.raises(llmco2.InvalidInputError, match="log.csv, line 11"):
        row_intensities(["FR", "Narnia"], None, "log.csv", first_line=10)


def test_an_hourly_file_of_one_region_refuses_requests_for_another(tmp_path: Path, capsys) -> None:
    """A file that holds only DE answers for DE, not for FR or an unknown name."""
    from llmco2.carbon.hourly_files import sample_intensity_path

    sample = pd.read_csv(sample_intensity_path())
    de_only = tmp_path / "de.csv"
    sample[sample["Zone Id"] == "DE"].to_csv(de_only, index=False)
    base = ["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "100",
            "--gen-tokens", "10", "--intensity-file", str(de_only), "--timestamp", "2023-11-16T18:20:00Z", "--json"]
    for name in ("FR", "Narnia"):
        code, _, err = run([*base, "--region", name], capsys)
        assert code == 2 and f"region {name!r} is not in" in err and "holds only DE" in err
    for name in ("DE", "germany"):
        assert run([*base, "--region", name], capsys)[0] == 0
    log = tmp_path / "log.csv"
    log.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,timestamp,region\n"
                   "llama3.1-8b,h100,1,100,10,2023-11-16T18:20:00Z,DE\nllama3.1-8b,h100,1,100,10,2023-11-16T18:20:00Z,FR\n")
    code, _, err = run(["predict", "--requests", str(log), "--out", str(tmp_path / "out.csv"), "--intensity-file", str(de_only)],
                       capsys)
    assert code == 2 and "line 3" in err and not (tmp_path / "out.csv").exists()


def test_the_shipped_hourly_sample_says_it_is_illustrative_wherever_it_is_used() -> None:
    from llmco2.carbon.hourly_files import sample_intensity_path

    p = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=10, gen_tokens=10, intensity=sample_intensity_path(),
                       timestamp="2023-11-16T18:20:00Z", region="FR")
    assert "ILLUSTRATIVE VALUES, NOT MEASUREMENTS" in p.assumptions["grid"]["source"]
