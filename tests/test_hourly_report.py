"""``llmco2 report trace --intensity-file``: each trace request at the hour of its timestamp, and
carbon per hour beside the load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmco2.carbon.accounting import J_PER_KWH
from llmco2.carbon.reports import hourly_trace, plot_trace, trace_footprint, trace_summary
from llmco2.prediction.loading import load_predictor
from tests.helpers import run_cli

HOURS = "timestamp,g_co2eq_per_kwh\n2023-11-16T18:00:00Z,100\n2023-11-16T19:00:00Z,400\n"


def test_trace_carbon_per_hour(tmp_path: Path, shared_data: Path) -> None:
    path = tmp_path / "hours.csv"
    path.write_text(HOURS)
    frame, fp = trace_footprint("code", "qwen2-1.5b", "a100-80gb", predictor=load_predictor(), pue_value=1.0)
    frame, fp = hourly_trace(frame, fp, "code", str(path))
    per_kwh = frame["operational_g"] / frame["total_j"] * J_PER_KWH
    expected = np.where(frame["hour"].dt.hour == 18, 100.0, 400.0)
    assert np.allclose(per_kwh, expected, rtol=1e-9)
    summary = trace_summary(frame, fp.assumptions)
    hours = summary["per_hour"]
    assert [h["hour"] for h in hours] == ["2023-11-16T18:00Z", "2023-11-16T19:00Z"]
    assert sum(h["requests"] for h in hours) == len(frame)
    assert sum(h["carbon_kg"] for h in hours) == pytest.approx(summary["carbon_kg"]["total"], rel=1e-9)
    c = summary["carbon_kg"]
    assert c["operational_prefill"] + c["operational_decode"] == pytest.approx(frame["operational_g"].sum() / 1000, rel=1e-9)
    out = plot_trace(summary, frame, tmp_path / "trace.png", "hourly")
    assert out.stat().st_size > 10_000


def test_trace_outside_the_hours(tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hours.csv"
    path.write_text(HOURS.rsplit("2023-11-16T19", 1)[0])
    code, _, err = run_cli(["report", "trace", "--trace", "code", "-o", str(tmp_path / "t.png"), "--intensity-file", str(path)],
                           capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "requests fall outside the hours" in err and "AzureLLMInferenceTrace_code.csv" in err and "2023-11-16 19:" in err
    assert not (tmp_path / "t.png").exists()
