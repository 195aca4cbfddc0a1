"""Reports: case studies, trace footprint, GPU comparison (tiny checkpoint; figures written)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmco2.carbon.reports import (
    carbon_per_gpu_second,
    compare_hardware,
    plot_case_studies,
    scaling_study,
    trace_footprint,
    trace_summary,
)
from llmco2.cli import main
from llmco2.training.train import GNNPredictor
from tests.test_cli_predict import checkpoint  # noqa: F401 - fixture


@pytest.fixture(scope="module")
def predictor(checkpoint: Path) -> GNNPredictor:  # noqa: F811
    return GNNPredictor.load(checkpoint)


def test_case_studies(tmp_path: Path, predictor: GNNPredictor) -> None:
    fig9 = carbon_per_gpu_second(predictor=predictor, carbon_intensity=400.0, pue_value=1.0)
    training = fig9.iloc[0]
    # a GPU at its 400 W TDP for one second: 400 J = 1/9000 kWh x 400 g/kWh
    assert training["operational_g_per_gpu_s"] == pytest.approx(400 / 3.6e6 * 400)
    assert len(fig9) == 1 + 2 * 4 and (fig9["operational_g_per_gpu_s"] > 0).all()
    scaling = scaling_study(predictor=predictor)
    assert len(scaling) == 3 * 3 * 3
    assert np.allclose(scaling["operational_g_per_gpu"] * scaling["num_gpus"], scaling["operational_g"])
    paths = plot_case_studies(fig9, scaling, tmp_path)
    assert [p.name for p in paths] == ["fig9_carbon_per_gpu_second.png", "fig10_operational_per_gpu.png", "fig11_total_carbon.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_compare_hardware_sorted_and_fitting(predictor: GNNPredictor) -> None:
    frame = compare_hardware("llama3.1-70b", 1, 512, 64, gpus=("a100-80gb", "h100-sxm", "t4"), predictor=predictor)
    assert list(frame["total_g"]) == sorted(frame["total_g"])
    assert "t4" not in set(frame["gpu"]) or frame[frame["gpu"] == "t4"]["num_gpus"].min() >= 8
    assert frame[frame["gpu"] == "a100-80gb"]["num_gpus"].min() >= 2  # 141 GB of weights need two 80 GB GPUs


def test_trace_footprint(predictor: GNNPredictor, shared_data) -> None:
    frame, fp = trace_footprint("code", "qwen2-1.5b", "a100-80gb", predictor=predictor, carbon_intensity=100.0, pue_value=1.0)
    assert len(frame) == 8_819
    summary = trace_summary(frame, fp.assumptions)
    c = summary["carbon_kg"]
    assert c["total"] == pytest.approx(c["operational_prefill"] + c["operational_decode"] + c["embodied"], rel=1e-9)
    assert summary["energy_kwh"]["prefill"] == pytest.approx(frame["prefill_j"].sum() / 3.6e6)


def test_report_cli(tmp_path: Path, checkpoint: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "cmp.png"
    assert main(["report", "compare", "--model", "qwen2-7b", "--batch-size", "1", "--prompt-tokens", "256", "--gen-tokens", "32",
                 "--gpus", "l4,a100-80gb", "-o", str(out), "--checkpoint", str(checkpoint)]) == 0
    assert out.stat().st_size > 5_000 and "least carbon" in capsys.readouterr().err
    assert main(["report", "compare", "--model", "qwen2-7b", "--batch-size", "1", "--prompt-tokens", "256", "--gen-tokens", "32",
                 "-o", str(tmp_path / "x.gif"), "--checkpoint", str(checkpoint)]) == 2
    assert "gif" in capsys.readouterr().err
