"""The serving calibration's fit (:mod:`llmco2.serving.calibration_fit`): least squares of the
log ratio of measured to simulated J per token and inter-token latency, on the v3 H100 rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from llmco2.serving.calibration_fit import (
    FORM,
    LATENCY_FORM,
    features,
    fit_calibration,
    fit_correction,
    fit_latency,
    write_calibration,
)


def _rows(n: int = 40, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame({
        "release": ["v3"] * n + ["v2"] * 5, "device": ["h100-sxm"] * n + ["a100-40gb"] * 5,
        "sim_mean_batch": rng.uniform(4, 400, n + 5), "num_devices": rng.choice([1, 2, 4, 8], n + 5),
        "generated_tokens": rng.uniform(100, 2000, n + 5), "sim_j_per_token": rng.uniform(0.05, 2.0, n + 5),
        "sim_itl_s": rng.uniform(0.01, 0.1, n + 5), "avg_tpot_s": np.nan,
    })
    energy, latency = np.array([0.1, -0.2, 0.5, -0.1, 0.05]), np.array([-0.4, 0.1, 0.3, -0.05])
    rows["j_per_output_token"] = rows["sim_j_per_token"] * np.exp(features(rows, FORM) @ energy)
    rows["median_itl_ms"] = 1000 * rows["sim_itl_s"] * np.exp(features(rows, LATENCY_FORM) @ latency)
    return rows, energy, latency


def test_fits_recover_the_log_ratio_coefficients() -> None:
    rows, energy, latency = _rows()
    v3 = rows[rows["release"] == "v3"]
    np.testing.assert_allclose(fit_correction(v3), energy, atol=1e-9)
    np.testing.assert_allclose(fit_latency(v3), latency, atol=1e-9)


def test_calibration_is_fitted_on_the_v3_h100_rows_and_written_as_json(tmp_path) -> None:
    rows, energy, latency = _rows()
    cal = fit_calibration(rows, "abc123")
    v3 = rows[rows["release"] == "v3"]
    assert cal.rows == len(v3) and cal.checkpoint == "abc123"
    assert cal.batch_range == (round(v3["sim_mean_batch"].min(), 2), round(v3["sim_mean_batch"].max(), 2))
    np.testing.assert_allclose(cal.coef, energy, atol=1e-6)
    np.testing.assert_allclose(cal.latency_coef, latency, atol=1e-6)
    path = write_calibration(cal, tmp_path / "calibration.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(cal.to_dict()))
