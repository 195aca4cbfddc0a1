"""Ranking metrics (``llmco2.training.ranking``) on tiny hand-made groups (hermetic)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmco2.training.ranking import PairCounts, gpu_pairs, kendall_tau, pair_counts, share_right


def test_the_same_order_is_tau_one_and_every_pair_right() -> None:
    assert kendall_tau([1.0, 2.0, 3.0], [10.0, 20.0, 40.0]) == 1.0
    assert share_right([1.0, 2.0, 3.0], [10.0, 20.0, 40.0]) == 1.0


def test_the_reversed_order_is_tau_minus_one_and_no_pair_right() -> None:
    assert kendall_tau([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == -1.0
    assert share_right([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == 0.0


def test_one_swap_of_three_is_tau_one_third() -> None:
    counts = pair_counts([1.0, 2.0, 3.0], [1.0, 3.0, 2.0])
    assert counts == PairCounts(concordant=2, discordant=1)
    assert counts.tau == pytest.approx(1 / 3)
    assert counts.share_right == pytest.approx(2 / 3)


def test_measurements_within_two_percent_are_a_tie_and_skipped() -> None:
    counts = pair_counts([1.0, 1.015, 2.0], [2.0, 1.0, 3.0])
    assert counts.measured_ties == 1
    assert counts.pairs == 2 and counts.tau == 1.0
    # just beyond 2% the pair counts (and is wrong here)
    assert pair_counts([1.0, 1.03], [2.0, 1.0]) == PairCounts(discordant=1)
    # a looser tolerance makes it a tie
    assert pair_counts([1.0, 1.03], [2.0, 1.0], tie_tolerance=0.05) == PairCounts(measured_ties=1)


def test_equal_predictions_count_half_right_and_zero_in_tau() -> None:
    counts = pair_counts([1.0, 2.0], [5.0, 5.0])
    assert counts == PairCounts(predicted_ties=1)
    assert counts.tau == 0.0 and counts.share_right == 0.5


def test_a_group_of_ties_only_has_no_pairs() -> None:
    counts = pair_counts([1.0, 1.01], [1.0, 2.0])
    assert counts.pairs == 0 and math.isnan(counts.tau) and math.isnan(counts.share_right)


def test_summed_counts_weight_each_groups_tau_by_its_pairs() -> None:
    a = pair_counts([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])  # 3 pairs, tau 1
    b = pair_counts([1.0, 2.0], [2.0, 1.0])  # 1 pair, tau -1
    total = a + b
    assert total.pairs == 4
    assert total.tau == pytest.approx((3 * 1.0 + 1 * -1.0) / 4)
    assert total.share_right == pytest.approx(3 / 4)


def test_only_comparable_pairs_are_counted() -> None:
    comparable = np.array([[False, True, False], [True, False, False], [False, False, False]])
    assert pair_counts([1.0, 2.0, 3.0], [1.0, 2.0, 0.5], comparable) == PairCounts(concordant=1)


def test_gpu_pairs_compare_different_gpus_on_a_shared_engine_else_across_engines() -> None:
    devices = ["a100", "a100", "h100", "h100", "gaudi2"]
    engines = ["vllm", "trt", "vllm", "trt", "habana"]
    ok = gpu_pairs(devices, engines)
    assert not ok[0, 1] and not ok[2, 3]  # the same GPU is never a pair
    assert ok[0, 2] and ok[1, 3]  # A100 and H100 share engines: same-engine pairs only
    assert not ok[0, 3] and not ok[1, 2]
    assert ok[4, 0] and ok[4, 1] and ok[4, 2] and ok[4, 3]  # Gaudi2 shares none: every engine
    assert (ok == ok.T).all()


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        pair_counts([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        pair_counts([1.0, 0.0], [1.0, 2.0])
