"""Metrics against hand-computed values."""

from __future__ import annotations

import pandas as pd
import pytest

from llmco2.training.metrics import grouped_scores, scores


def test_scores_hand_computed() -> None:
    measured = [100.0, 100.0, 200.0, 50.0, 0.0, -1.0]
    predicted = [104.0, 90.0, 260.0, 50.0, 3.0, 1.0]
    # APEs of the four valid rows: 0.04, 0.10, 0.30, 0.0
    s = scores(predicted, measured)
    assert s["n"] == 4 and s["excluded"] == 2
    assert s["mape"] == pytest.approx((0.04 + 0.10 + 0.30 + 0.0) / 4)
    assert s["median_ape"] == pytest.approx((0.04 + 0.10) / 2)
    assert s["eba_5"] == pytest.approx(2 / 4)
    assert s["eba_10"] == pytest.approx(3 / 4)
    assert s["eba_30"] == pytest.approx(4 / 4)


def test_grouped_scores() -> None:
    frame = pd.DataFrame({"phase": ["prefill", "prefill", "decode"], "energy_j": [10.0, 20.0, 5.0],
                          "predicted_j": [11.0, 20.0, 10.0]})
    g = grouped_scores(frame, "phase")
    assert g["prefill"]["mape"] == pytest.approx(0.05) and g["decode"]["mape"] == pytest.approx(1.0)


def test_no_valid_rows() -> None:
    s = scores([1.0], [0.0])
    assert s["n"] == 0 and s["mape"] is None


def test_interval_coverage_counts_measurements_inside_the_bounds() -> None:
    from llmco2.training.metrics import coverage

    out = coverage([1.0, 1.0, 2.0, 1.0, 1.0], [3.0, 3.0, 4.0, 2.0, 2.0], [2.0, 3.0, 1.0, 5.0, 0.0])
    assert out["n"] == 4  # the zero measurement is left out
    assert out["coverage"] == 0.5 and out["below"] == 0.25 and out["above"] == 0.25
    assert out["median_width"] == 2.5
    assert coverage([], [], [])["coverage"] is None
