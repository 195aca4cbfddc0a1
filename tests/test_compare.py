"""``llmco2 compare`` / ``llmco2.compare``: server configurations of a model at one load, ranked by
carbon per output token, with latency targets, stability, intervals and the figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmco2
from llmco2.api.compare import Load, ServerOption, compare, rank, server_options, verdict
from llmco2.api.compare_figure import pareto_front
from llmco2.api.options import RequestOptions
from llmco2.errors import InvalidInputError
from llmco2.specs import get_gpu, get_model
from tests.helpers import run_cli

SMALL = dict(gpus=["h100", "a100-80gb"], max_gpus=2, serving_requests=60)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return compare("llama3.1-8b", concurrency=16, **SMALL)


def test_every_configuration_that_holds_the_model_is_ranked(table: pd.DataFrame) -> None:
    # 8B in bf16 fits one H100 and one A100-80GB: 1 GPU, 2 GPUs as tp 2, 2 GPUs as 2 replicas
    assert sorted(table["label"]) == sorted(["h100-sxm x1", "h100-sxm x2", "h100-sxm x2 (tp 1 x dp 2)", "a100-80gb x1",
                                             "a100-80gb x2", "a100-80gb x2 (tp 1 x dp 2)"])
    assert list(table["rank"]) == list(range(1, len(table) + 1))
    ok = table[table["meets_slo"]]
    assert ok["g_per_output_token"].is_monotonic_increasing
    assert (table["g_per_output_token_low"] <= table["g_per_output_token"]).all()
    assert (table["g_per_output_token"] <= table["g_per_output_token_high"]).all()
    assert (table["num_gpus"] == table["tensor_parallel"] * table["replicas"]).all()
    assert table.attrs["verdict"].startswith("best: " + table["label"].iloc[0])


def test_a_replica_serves_its_share_of_the_load() -> None:
    load = Load(rate=4.0, background="fixed", prompt_tokens=100, generated_tokens=20, serving_requests=200)
    one, two = load.per_replica(1), load.per_replica(2)
    assert len(one) == len(two) == 200
    assert two.arrival_s[-1] / one.arrival_s[-1] == pytest.approx(2.0, rel=0.25)  # half the rate: twice the span
    closed = Load(concurrency=9, serving_requests=50)
    assert closed.per_replica(2).concurrency == 5


def test_a_model_too_large_is_left_out_with_the_reason() -> None:
    found, left = server_options(get_model("llama3.1-70b"), ["l4", "h100"], 2, RequestOptions(dtype="bf16"), 4096)
    assert {o.gpu.id for o in found} == {"h100-sxm"} and all(o.num_gpus == 2 for o in found)
    assert left == ["l4: llama3.1-70b does not fit on up to 2 of them"]


def test_an_overloaded_server_falls_behind_and_ranks_after_those_that_keep_up() -> None:
    t = compare("llama3.1-8b", gpus=["l4", "h100"], rate=30.0, background="fixed", prompt_tokens=1000, generated_tokens=200,
                max_gpus=1, serving_requests=240)
    l4 = t[t["gpu"] == "l4"].iloc[0]
    assert not l4["stable"] and not l4["meets_slo"]
    assert t.iloc[0]["gpu"] == "h100-sxm" and t.iloc[0]["stable"]


def test_latency_targets_decide_which_configurations_meet_them(table: pd.DataFrame) -> None:
    strict = compare("llama3.1-8b", concurrency=16, slo_tpot_s=float(table["tpot_p90_s"].median()), **SMALL)
    met = strict[strict["meets_slo"]]
    assert 0 < len(met) < len(strict)
    assert (met["tpot_p90_s"] <= float(table["tpot_p90_s"].median())).all()


def test_verdict_says_when_the_best_cannot_be_told_apart() -> None:
    frame = pd.DataFrame({"label": ["a", "b", "c"], "meets_slo": [True, True, True], "g_per_output_token": [1.0, 1.2, 3.0],
                          "g_per_output_token_low": [0.8, 0.9, 2.5], "g_per_output_token_high": [1.1, 1.5, 3.5]})
    ranked = rank(frame)
    assert list(ranked["tied_with_best"]) == [False, True, False]
    assert verdict(ranked) == "best: a at 1 g CO2eq per output token; cannot be told apart from b (overlapping 10-90% intervals)"
    apart = rank(frame.assign(g_per_output_token_low=[0.8, 1.15, 2.5]))
    assert verdict(apart).endswith("its interval overlaps no other option's, so it is best")


def test_pareto_front_on_a_tiny_plane() -> None:
    carbon = np.array([1.0, 2.0, 0.5, 3.0])
    tpot = np.array([10.0, 5.0, 20.0, 4.0])
    assert list(pareto_front(carbon, tpot)) == [True, True, True, True]
    assert list(pareto_front(np.array([1.0, 2.0]), np.array([1.0, 2.0]))) == [True, False]


def test_server_option_label() -> None:
    assert ServerOption(get_gpu("h100"), 4, 2).label == "h100-sxm x8 (tp 4 x dp 2)"
    assert ServerOption(get_gpu("h100"), 2, 1).label == "h100-sxm x2"


def test_the_command_prints_the_api_numbers(table: pd.DataFrame, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["compare", "--model", "llama3.1-8b", "--gpus", "h100,a100-80gb", "--max-gpus", "2",
                              "--concurrency", "16", "--serving-requests", "60", "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["verdict"] == table.attrs["verdict"]
    for got, want in zip(record["options"], table.to_dict(orient="records"), strict=True):
        assert got["label"] == want["label"]
        assert math.isclose(got["g_per_output_token"], want["g_per_output_token"], rel_tol=1e-12)
    assert llmco2.compare is compare


@pytest.mark.parametrize("argv, mention", [
    (["--model", "llama3.1-8b"], "one of the arguments --rate --concurrency is required"),
    (["--model", "llama3.1-8b", "--rate", "2", "--prompt-tokens", "100"], "--background: --prompt-tokens and --gen-tokens apply"),
    (["--model", "llama3.1-8b", "--rate", "-1"], "--rate: must be a positive number"),
    (["--model", "llama3.1-8b", "--rate", "2", "--gpus", "h1000"], "--gpus"),
    (["--model", "llama3.1-8b", "--rate", "2", "--background", "fixed"], "--background: fixed lengths need"),
    (["--model", "llama3.1-8b", "--rate", "2", "--slo-percentile", "100"], "--slo-percentile"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], mention: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", *argv], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and mention in err, err


def test_the_figure_is_written(table: pd.DataFrame, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from llmco2.api.compare_figure import plot_comparison

    out = plot_comparison(table, tmp_path / "c.png", "test", slo_tpot_s=0.05)
    assert out.stat().st_size > 10_000


def test_unknown_option_names_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown option"):
        compare("llama3.1-8b", concurrency=4, colour="red", **SMALL)


def test_a_simulation_too_large_is_refused_before_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", "--model", "llama3.1-8b", "--rate", "2", "--serving-requests", "1000000000"], capsys)
    assert code == 2 and "--serving-requests: must be a whole number from 1 to 1,000,000" in err
    code, _, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--prompt-tokens", "10", "--gen-tokens", "5",
                            "--serving", "--concurrency", "4", "--serving-requests", "1000000000"], capsys)
    assert code == 2 and "--serving-requests: must be from 1 to 1,000,000" in err, err


def test_an_engine_without_fitted_constants_is_an_extrapolation() -> None:
    vllm = compare("llama3.1-8b", gpus=["h100"], concurrency=4, max_gpus=1, serving_requests=40)
    tgi = compare("llama3.1-8b", gpus=["h100"], concurrency=4, max_gpus=1, serving_requests=40, engine="tgi")
    assert not vllm["extrapolated"].iloc[0] and tgi["extrapolated"].iloc[0]
