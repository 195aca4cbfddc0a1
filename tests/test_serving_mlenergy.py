"""ML.ENERGY rows as serving measurements (``serving_rows``): the batch cap, task and J per output
token travel with every imported row (real files; skipped when the shared data is absent)."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.data.importers.mlenergy_v2 import import_mlenergy_v2
from llmco2.data.importers.mlenergy_v2 import serving_rows as v2_rows
from llmco2.data.importers.mlenergy_v3 import import_mlenergy_v3
from llmco2.data.importers.mlenergy_v3 import serving_rows as v3_rows
from llmco2.serving.mlenergy import TASK_PROMPT_TOKENS, lengths


@pytest.mark.parametrize("name, rows_fn, import_fn", [
    ("mlenergy_v2_2024.csv", v2_rows, import_mlenergy_v2),
    ("mlenergy_v3_2025.csv", v3_rows, import_mlenergy_v3),
])
def test_serving_rows_keep_the_batch_cap_task_and_energy_per_token(shared_data, name, rows_fn, import_fn):
    path = shared_data / "datacenter" / name
    if not path.is_file():
        pytest.skip(f"{path} is not in this copy of the shared data")
    rows, dropped = rows_fn(path)
    plain = import_fn(path)
    assert len(rows) == len(plain.table) and dropped == plain.dropped
    assert (rows["source_row"].to_numpy() == plain.table["source_row"].to_numpy()).all()
    # the running batch never exceeds the configured cap; the per-token energy is energy / output tokens
    assert (rows["batch_size"].to_numpy(float) <= rows["max_batch"].to_numpy(float) + 1e-6).all()
    per_token = rows["energy_j"].to_numpy(float) / rows["generated_tokens"].to_numpy(float)
    assert np.allclose(per_token, rows["j_per_output_token"].to_numpy(float), rtol=0.05)
    assert rows["task"].notna().all()
    assert not rows["task"].isin(["image-chat", "video-chat"]).any()


def test_v2_rows_carry_the_average_power_and_round_time_their_totals_imply(shared_data, tmp_path):
    """v2 publishes no power: J per output token x output tokens per s is the run's average power of
    all its GPUs, and mean batch / output tokens per s its time per decode round. Checked on a
    hand-made row and on the real file (power between idle and the limits)."""
    import pandas as pd

    path = shared_data / "datacenter" / "mlenergy_v2_2024.csv"
    if not path.is_file():
        pytest.skip(f"{path} is not in this copy of the shared data")
    raw = pd.read_csv(path).iloc[:1].copy()
    raw["energy_per_output_token_J"], raw["Token tput (tok/s)"] = 0.5, 1000.0
    one = tmp_path / "one.csv"
    raw.to_csv(one, index=False)
    assert v2_rows(one)[0]["implied_power_w"].iloc[0] == pytest.approx(500.0)
    # the mean time per decode round: every running request gets one token a round
    assert v2_rows(one)[0]["round_time_s"].iloc[0] == pytest.approx(float(raw["Avg BS (reqs)"].iloc[0]) / 1000.0)
    rows, _ = v2_rows(path)
    per_gpu = rows["implied_power_w"].to_numpy(float) / rows["num_devices"].to_numpy(float)
    limit = np.where(rows["device"].to_numpy() == "a100-40gb", 400.0, 700.0)
    assert np.all(per_gpu > 40.0) and np.all(per_gpu < limit)


@pytest.mark.parametrize("task", sorted(TASK_PROMPT_TOKENS))
def test_tasks_with_public_prompt_sets_get_their_mean_prompt(task):
    prompt, output = lengths(task, 300.0, 2000, 7, 100_000)
    assert prompt.mean() == pytest.approx(TASK_PROMPT_TOKENS[task], rel=0.01)
    assert output.mean() == pytest.approx(300.0, rel=0.01)


def test_a_task_without_public_prompt_lengths_keeps_the_trace_prompts():
    from llmco2.serving.workload import trace_lengths

    prompt, _ = lengths("sourcegraph-fim", 300.0, 2000, 7, 100_000)
    assert np.array_equal(prompt, np.minimum(trace_lengths("code", 2000, 7)[0], 50_000))


def test_v3_expert_parallel_rows_are_simulated_as_they_ran(shared_data):
    """ML.ENERGY v3's MoE rows ran vLLM with --enable-expert-parallel over all GPUs (EP = TP): the server
    holds each expert whole on one GPU, and the dense rows keep plain tensor parallelism."""
    path = shared_data / "datacenter" / "mlenergy_v3_2025.csv"
    if not path.exists():
        pytest.skip(f"{path} is not in this copy of the shared data")
    from llmco2.serving.mlenergy import load_rows, server_case

    rows, _ = load_rows()
    v3 = rows[rows["release"] == "v3"]
    moe = v3[v3["expert_parallel"] > 1].iloc[0]
    case = server_case(moe)
    assert case.request.expert_parallel == case.request.num_gpus == int(moe["num_devices"]) > 1
    assert case.request.tensor_parallel == case.request.num_gpus
    dense = v3[(v3["expert_parallel"] == 1) & (v3["num_devices"] > 1)].iloc[0]
    assert server_case(dense).request.expert_parallel == 1
