"""``llmco2 compare --tp N --dp N --ep N`` / ``llmco2.compare(tp=, dp=, expert_parallel=N)``: the degrees
keep the configurations that have them, the same rows (and numbers) as the unrestricted run, and
refuse values that are not degrees or leave nothing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llmco2.api.compare import compare, server_options
from llmco2.api.options import RequestOptions
from llmco2.errors import InvalidInputError
from llmco2.specs import get_model
from tests.helpers import run_cli

MOE = "qwen3-30b-a3b"  # 128 experts, fits one H100
DENSE = "llama3.1-8b"
LOAD = dict(concurrency=16, serving_requests=40)
NUMBERS = ["g_per_output_token", "g_per_output_token_low", "g_per_output_token_high", "j_per_output_token",
           "power_w", "server_power_w", "mean_batch", "ttft_p90_s", "tpot_p90_s", "meets_slo", "expert_parallel"]


@pytest.fixture(scope="module")
def moe_all() -> pd.DataFrame:
    return compare(MOE, gpus=["h100"], max_gpus=4, **LOAD)


@pytest.fixture(scope="module")
def dense_all() -> pd.DataFrame:
    return compare(DENSE, gpus=["h100", "a100-80gb"], max_gpus=4, **LOAD)


def same_rows(part: pd.DataFrame, whole: pd.DataFrame, keep: pd.Series) -> None:
    """``part`` has exactly the rows of ``whole`` where ``keep`` holds, with the same numbers."""
    want = whole[keep].set_index("label")
    assert sorted(part["label"]) == sorted(want.index) and len(part)
    got = part.set_index("label").loc[want.index]
    pd.testing.assert_frame_equal(got[NUMBERS], want[NUMBERS], check_exact=True)
    assert list(part["rank"]) == list(range(1, len(part) + 1))


@pytest.mark.parametrize("tp,dp", [(1, None), (2, None), (None, 2), (2, 2), (1, 4)])
def test_tp_and_dp_keep_the_configurations_of_those_degrees(dense_all: pd.DataFrame, tp: int | None, dp: int | None) -> None:
    part = compare(DENSE, gpus=["h100", "a100-80gb"], max_gpus=4, tp=tp, dp=dp, **LOAD)
    keep = pd.Series(True, index=dense_all.index)
    if tp is not None:
        keep &= dense_all["tensor_parallel"] == tp
    if dp is not None:
        keep &= dense_all["replicas"] == dp
    same_rows(part, dense_all, keep)
    if tp is not None and dp is not None:
        assert set(part["num_gpus"]) == {tp * dp} and set(part["gpu"]) == {"h100-sxm", "a100-80gb"}
    assert part.attrs["left_out"] == []


@pytest.mark.parametrize("ep", [2, 4])
def test_an_expert_parallel_degree_keeps_the_rows_of_that_degree(moe_all: pd.DataFrame, ep: int) -> None:
    part = compare(MOE, gpus=["h100"], max_gpus=4, expert_parallel=ep, **LOAD)
    same_rows(part, moe_all, moe_all["expert_parallel"] == ep)
    both = compare(MOE, gpus=["h100"], max_gpus=4, expert_parallel=ep, tp=2, **LOAD)
    same_rows(both, moe_all, (moe_all["expert_parallel"] == ep) & (moe_all["tensor_parallel"] == 2))


def test_ep_1_is_ep_off(moe_all: pd.DataFrame, capsys: pytest.CaptureFixture[str]) -> None:
    one = compare(MOE, gpus=["h100"], max_gpus=4, expert_parallel=1, **LOAD)
    off = compare(MOE, gpus=["h100"], max_gpus=4, expert_parallel="off", **LOAD)
    pd.testing.assert_frame_equal(one, off)
    same_rows(one, moe_all, moe_all["expert_parallel"] == 1)
    cli = ["compare", "--model", MOE, "--gpus", "h100", "--max-gpus", "4", "--concurrency", "16",
           "--serving-requests", "40", "--json", "--ep"]
    code, out_one, err = run_cli([*cli, "1"], capsys)
    assert code == 0, err
    code, out_off, err = run_cli([*cli, "off"], capsys)
    assert code == 0, err
    assert json.loads(out_one) == json.loads(out_off)
    dense = compare(DENSE, gpus=["h100"], max_gpus=2, expert_parallel=1, **LOAD)
    assert len(dense) == 3 and (dense["expert_parallel"] == 1).all()


def test_the_command_line_restricts_as_the_library_does(dense_all: pd.DataFrame, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["compare", "--model", DENSE, "--gpus", "h100,a100-80gb", "--max-gpus", "4",
                              "--concurrency", "16", "--serving-requests", "40", "--tp", "2", "--dp", "2", "--json"], capsys)
    assert code == 0, err
    options = json.loads(out)["options"]
    assert sorted(o["label"] for o in options) == ["a100-80gb x4 (tp 2 x dp 2)", "h100-sxm x4 (tp 2 x dp 2)"]
    want = dense_all.set_index("label")
    for o in options:
        assert o["g_per_output_token"] == want.loc[o["label"], "g_per_output_token"]


def test_a_gpu_type_the_degrees_leave_nothing_of_is_left_out_with_the_reason() -> None:
    t = compare("llama3.1-70b", gpus=["h100", "l4"], max_gpus=8, tp=2, dp=2, **LOAD)  # L4s hold it only as tp 8
    assert set(t["label"]) == {"h100-sxm x4 (tp 2 x dp 2)"}
    (line,) = t.attrs["left_out"]
    assert line.startswith("l4: no configuration with tp 2 x dp 2 (the weights of llama3.1-70b take") and "2 x l4" in line
    found, left = server_options(get_model(MOE), ["h100", "a10"], 8, RequestOptions(dtype="bf16"), 4096, 8)
    assert {o.label for o in found} == {"h100-sxm x8 (tp 1 x dp 8, ep 8)", "h100-sxm x8 (tp 2 x dp 4, ep 8)",
                                        "h100-sxm x8 (tp 4 x dp 2, ep 8)", "h100-sxm x8 (tp 8, ep 8)"}
    assert left and left[0].startswith("a10: ")  # an A10 node has 4 GPUs: no ep 8


@pytest.mark.parametrize("kwargs,field,text", [
    (dict(tp=0), "tp", "must be a whole number from 1, got 0"),
    (dict(dp=-2), "dp", "must be a whole number from 1, got -2"),
    (dict(tp=1.5), "tp", "got 1.5"),
    (dict(dp=True), "dp", "got True"),
    (dict(tp="2"), "tp", "got '2'"),
    (dict(expert_parallel=0), "expert_parallel", "got 0"),
    (dict(expert_parallel=-1), "expert_parallel", "got -1"),
    (dict(expert_parallel=2.0), "expert_parallel", "got 2.0"),
    (dict(tp=3), "tp", "`tp=3` matches no configuration tried: 1, 2, 4 GPUs (up to `max_gpus=4`)"),
    (dict(tp=4, dp=2), "tp", "`tp=4` with `dp=2` matches no configuration"),
    (dict(dp=2, expert_parallel=8), "dp", "`dp=2` with `expert_parallel=8` matches no configuration"),
    (dict(tp=1, dp=1, model="llama3.1-70b"), "tp", "`tp=1` with `dp=1` leaves no configuration of llama3.1-70b"),
    (dict(expert_parallel=2, model=DENSE), "expert_parallel", "llama3.1-8b is a dense model"),
])
def test_invalid_degrees_are_refused_naming_the_parameter(kwargs: dict, field: str, text: str) -> None:
    model = kwargs.pop("model", MOE)
    with pytest.raises(InvalidInputError) as info:
        compare(model, gpus=["h100"], max_gpus=4, **LOAD, **kwargs)
    assert info.value.field == field and text in str(info.value), str(info.value)
    assert not any(flag in str(info.value) for flag in ("--tp", "--dp", "--ep", "--max-gpus"))  # parameters, not flags


@pytest.mark.parametrize("args,flag", [
    (["--tp", "0"], "--tp: must be a whole number from 1, got 0"),
    (["--tp", "1.5"], "argument --tp: invalid int value: '1.5'"),
    (["--dp", "-1"], "--dp: must be a whole number from 1, got -1"),
    (["--dp", "two"], "argument --dp: invalid int value: 'two'"),
    (["--ep", "0"], "--ep: must be one of auto, off, only, or a whole number"),
    (["--ep", "1.5"], "--ep: must be one of auto, off, only"),
    (["--tp", "16"], "--tp 16 matches no configuration tried: 1, 2, 4, 8 GPUs (up to --max-gpus 8)"),
    (["--tp", "4", "--dp", "4"], "--tp 4 with --dp 4 matches no configuration"),
    (["--ep", "3", "--model", MOE], "--ep 3 matches no configuration"),
    (["--ep", "2"], "--ep: llama3.1-8b is a dense model"),
    (["--tp", "1", "--model", "llama3.1-70b"], "--tp 1 leaves no configuration of llama3.1-70b on up to 8 GPUs: h100-sxm: "),
])
def test_invalid_degrees_exit_2_with_one_line_naming_the_flag(args: list[str], flag: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--model", DENSE, "--gpus", "h100", "--concurrency", "4", "--serving-requests", "20", *args]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and flag in err, err
    assert "`" not in err and "expert_parallel" not in err
