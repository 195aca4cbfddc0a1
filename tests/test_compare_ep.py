"""``llmco2 compare`` on mixture-of-experts models: each split is also offered with expert parallelism
across its replicas (``ep`` = its GPU count) where the layout is valid, as a row of its own."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest

import llmco2
from llmco2.api.compare import ServerOption, compare, server_options
from llmco2.api.options import RequestOptions
from llmco2.errors import InvalidInputError
from llmco2.specs import get_gpu, get_model
from tests.helpers import run_cli

MOE = "qwen3-30b-a3b"  # 128 experts, about 61 GB in bf16: fits one H100
SMALL = dict(gpus=["h100"], max_gpus=2, serving_requests=60)
BF16 = RequestOptions(dtype="bf16")


@pytest.fixture(scope="module")
def moe_table() -> pd.DataFrame:
    return compare(MOE, concurrency=16, **SMALL)


def test_a_moe_model_gets_expert_parallel_rows_beside_the_others(moe_table: pd.DataFrame) -> None:
    assert sorted(moe_table["label"]) == sorted(["h100-sxm x1", "h100-sxm x2", "h100-sxm x2 (tp 1 x dp 2)",
                                                 "h100-sxm x2 (tp 2, ep 2)", "h100-sxm x2 (tp 1 x dp 2, ep 2)"])
    assert moe_table["expert_parallel"].dtype.kind == "i"
    ep = moe_table[moe_table["expert_parallel"] > 1]
    assert (ep["expert_parallel"] == ep["num_gpus"]).all()
    assert (moe_table["num_gpus"] == moe_table["tensor_parallel"] * moe_table["replicas"]).all()
    assert list(moe_table["rank"]) == list(range(1, len(moe_table) + 1))


def test_off_leaves_the_rows_without_expert_parallelism_unchanged_and_only_keeps_the_others(moe_table: pd.DataFrame) -> None:
    off = compare(MOE, concurrency=16, expert_parallel="off", **SMALL)
    plain = moe_table[moe_table["expert_parallel"] == 1].set_index("label")
    assert sorted(off["label"]) == sorted(plain.index) and (off["expert_parallel"] == 1).all()
    for row in off.itertuples(index=False):
        assert row.g_per_output_token == plain.loc[row.label, "g_per_output_token"]
    only = compare(MOE, concurrency=16, expert_parallel="only", **SMALL)
    assert sorted(only["label"]) == sorted(moe_table.loc[moe_table["expert_parallel"] > 1, "label"])


def test_a_dense_model_gets_no_expert_parallel_rows() -> None:
    t = compare("llama3.1-8b", concurrency=8, **SMALL)
    assert len(t) == 3 and (t["expert_parallel"] == 1).all() and t["expert_parallel"].dtype.kind == "i"
    assert not t["label"].str.contains("ep").any()
    with pytest.raises(InvalidInputError, match="dense model") as info:
        compare("llama3.1-8b", concurrency=8, expert_parallel="only", **SMALL)
    assert info.value.field == "expert_parallel"
    with pytest.raises(InvalidInputError, match="must be one of auto, off, only"):
        compare(MOE, concurrency=8, expert_parallel="on", **SMALL)


def test_the_expert_parallel_row_is_a_direct_serve_of_the_whole_server(moe_table: pd.DataFrame) -> None:
    row = moe_table.set_index("label").loc["h100-sxm x2 (tp 1 x dp 2, ep 2)"]
    workload = llmco2.make_workload("conv", n=60, concurrency=16, seed=0)
    direct = llmco2.serve(MOE, "h100", workload, num_gpus=2, tp=1, ep=2, dtype="bf16", scope="server")
    s = direct.summary
    assert direct.assumptions["server"]["expert_parallel"] == 2
    assert row["g_per_output_token"] == pytest.approx(s["g_per_output_token"], rel=1e-12)
    assert row["j_per_output_token"] == pytest.approx(s["j_per_output_token"], rel=1e-12)
    assert row["server_j_per_output_token"] == pytest.approx(s["server_j_per_output_token"], rel=1e-12)
    assert row["power_w"] == pytest.approx(s["average_power_w"], rel=1e-12)  # one server, not dp copies of it
    assert row["server_power_w"] == pytest.approx(s["server_average_power_w"], rel=1e-12)
    assert row["mean_batch"] == pytest.approx(s["mean_batch"], rel=1e-12)


def test_invalid_expert_parallel_layouts_are_omitted() -> None:
    arch = get_model(MOE)
    found, left = server_options(arch, ["h100", "a10"], 8, BF16, 4096, "auto")
    labels = {o.label for o in found}
    # an A10 node has 4 GPUs: tensor parallelism stays within 4, and an all-to-all across nodes is not modelled
    assert "a10 x8 (tp 4 x dp 2)" in labels and "a10 x4 (tp 4, ep 4)" in labels
    assert not any(o.gpu.id == "a10" and o.ep == 8 for o in found)
    assert {o.ep for o in found if o.gpu.id == "h100-sxm"} == {1, 2, 4, 8} and left == []
    six = dataclasses.replace(arch, num_experts=6, experts_per_token=2)  # ep 4 and 8 do not divide six experts
    assert {o.ep for o in server_options(six, ["h100"], 8, BF16, 4096, "auto")[0]} == {1, 2}
    three = dataclasses.replace(arch, num_experts=3, experts_per_token=2)
    found, left = server_options(three, ["h100"], 8, BF16, 4096, "auto")
    assert {o.ep for o in found} == {1}
    assert left == ["h100-sxm: no expert-parallel layout (expert parallel degree 8 must divide the 3 experts of "
                    f"{MOE})"]
    assert server_options(arch, ["h100"], 1, BF16, 4096, "auto") == ([ServerOption(get_gpu("h100"), 1, 1)], [])


def test_memory_fit_counts_the_experts_each_gpu_holds() -> None:
    # Mixtral-8x7B (about 93 GB in bf16) fits no single H100, so no replica of one GPU; spread over two
    # GPUs' experts it fits with attention data-parallel
    found, left = server_options(get_model("mixtral-8x7b"), ["h100"], 2, BF16, 4096, "auto")
    assert sorted(o.label for o in found) == ["h100-sxm x2", "h100-sxm x2 (tp 1 x dp 2, ep 2)", "h100-sxm x2 (tp 2, ep 2)"]
    assert left == []
    only, _ = server_options(get_model("mixtral-8x7b"), ["h100"], 1, BF16, 4096, "only")
    assert only == []


def test_the_json_and_the_table_agree(moe_table: pd.DataFrame, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["compare", "--model", MOE, "--gpus", "h100", "--max-gpus", "2", "--concurrency", "16",
                              "--serving-requests", "60", "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["verdict"] == moe_table.attrs["verdict"]
    for got, want in zip(record["options"], moe_table.to_dict(orient="records"), strict=True):
        assert (got["label"], got["expert_parallel"]) == (want["label"], want["expert_parallel"])
        assert isinstance(got["expert_parallel"], int)
        assert math.isclose(got["g_per_output_token"], want["g_per_output_token"], rel_tol=1e-12)
    code, out, _ = run_cli(["compare", "--model", MOE, "--gpus", "h100", "--max-gpus", "2", "--concurrency", "16",
                            "--serving-requests", "60", "--ep", "off", "--json"], capsys)
    assert code == 0 and all(o["expert_parallel"] == 1 for o in json.loads(out)["options"])


def test_the_printed_table_shows_expert_parallel_labels_whole(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["compare", "--model", MOE, "--gpus", "h100", "--max-gpus", "2", "--concurrency", "16",
                              "--serving-requests", "60"], capsys)
    assert code == 0, err
    assert "h100-sxm x2 (tp 1 x dp 2, ep 2)" in out and "TTFT p90" in out and "…" not in out


def test_ep_only_on_a_dense_model_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", "--model", "llama3.1-8b", "--rate", "2", "--ep", "only"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--ep: llama3.1-8b is a dense model" in err, err
    code, _, err = run_cli(["compare", "--model", MOE, "--rate", "2", "--ep", "sometimes"], capsys)
    assert code == 2 and "--ep" in err


def test_server_option_labels_name_expert_parallelism() -> None:
    h100 = get_gpu("h100")
    assert ServerOption(h100, 2, 4, ep=8).label == "h100-sxm x8 (tp 2 x dp 4, ep 8)"
    assert ServerOption(h100, 8, 1, ep=8).label == "h100-sxm x8 (tp 8, ep 8)"
    assert ServerOption(h100, 8, 1).label == "h100-sxm x8"
    assert (ServerOption(h100, 2, 4, ep=8).simulated_gpus, ServerOption(h100, 2, 4).simulated_gpus) == (8, 2)


def test_the_figure_marks_expert_parallel_options(moe_table: pd.DataFrame, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from llmco2.api.compare_figure import plot_comparison

    out = plot_comparison(moe_table, tmp_path / "ep.png", "test")
    assert out.stat().st_size > 10_000
