"""The focused measurement plan: coverage of architectures, lengths from the traces, memory fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmco2.errors import InvalidInputError
from llmco2.measure.plan import MODELS, attention_kind, describe, focused_plan, memory_bytes
from llmco2.specs import get_gpu, get_model


@pytest.fixture
def traces() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(1)
    code = pd.DataFrame({"prompt_tokens": rng.integers(1, 8000, 3000), "generated_tokens": rng.integers(1, 60, 3000)})
    conv = pd.DataFrame({"prompt_tokens": rng.integers(1, 3000, 3000), "generated_tokens": rng.integers(1, 1000, 3000)})
    return {"code": code, "conv": conv}


def test_plan_covers_the_architectures_and_settings(traces) -> None:
    plan = focused_plan(480, traces=traces, seed=0)
    info = describe(plan)
    assert info["configurations"] == 480 and info["models"] == len(MODELS) >= 12
    assert all(info["attention"][k] for k in ("MHA", "MQA", "GQA")) and info["moe"] == ["qwen3-30b-a3b"]
    assert set(plan["dtype"]) == {"fp16", "bf16"} and set(plan["engine"]) == {"hf", "hf-static"}
    assert set(plan["batch_size"]) == {1, 2, 4, 8, 16} and set(plan["trace"]) == {"code", "conv"}
    assert (plan["prompt_tokens"] <= 4096).all() and (plan["generated_tokens"] <= 256).all()
    budget = 0.85 * get_gpu("h100-sxm").memory_size_gb * 1e9
    for row in plan.itertuples():
        assert row.prompt_tokens + row.generated_tokens <= get_model(row.model).max_context
        assert memory_bytes(row.model, row.batch_size, row.prompt_tokens + row.generated_tokens, row.dtype) <= budget
    dense = [m for m in MODELS if not get_model(m).is_moe]
    assert all(0.4e9 < get_model(m).param_count() < 15e9 for m in dense)
    # the lengths are pairs of one trace request, not independent draws
    pairs = {(t, p, g) for t, f in traces.items() for p, g in zip(f["prompt_tokens"], f["generated_tokens"], strict=True)}
    assert all((r.trace, r.prompt_tokens, r.generated_tokens) in pairs for r in plan.itertuples())
    assert plan.equals(focused_plan(480, traces=traces, seed=0)) and not plan.equals(focused_plan(480, traces=traces, seed=1))


def test_plan_argument_checks(traces) -> None:
    assert attention_kind("falcon-7b") == "MQA" and attention_kind("llama2-13b") == "MHA" and attention_kind("mistral-7b") == "GQA"
    with pytest.raises(InvalidInputError):
        focused_plan(0, traces=traces)
    with pytest.raises(InvalidInputError, match="does not fit"):
        focused_plan(4, traces=traces, gpu="l4", models=["llama2-13b"])


def test_summary_figure_leaves_out_quantised_rows(tmp_path) -> None:
    """The figure of a small hand-made canonical table (not measurements: two models, three rows each)."""
    from llmco2.data.schema import validate
    from llmco2.measure.figures import main, per_token, plot_summary

    rows = []
    for i, (model, engine, batch, flag) in enumerate([("qwen2-0.5b", "hf", 1, None), ("qwen2-0.5b", "hf-static", 4, None),
                                                      ("llama3.1-8b", "hf", 2, "counter_quantised")]):
        for j, (phase, energy) in enumerate((("prefill", 5.0 * batch), ("decode", 40.0 * batch))):
            rows.append({"source": "llmco2", "source_row": 2 * i + j + 2, "device": "h100-sxm", "num_devices": 1,
                         "engine": engine, "model": model, "batch_size": batch, "prompt_tokens": 100, "generated_tokens": 11,
                         "phase": phase, "level": "request", "energy_j": energy, "flag": flag if phase == "prefill" else None})
    table, _ = validate(pd.DataFrame(rows))
    decode, prefill, left_out = per_token(table)
    assert left_out == 1 and len(decode) == 3 and len(prefill) == 2
    assert decode["j_per_token"].iloc[0] == pytest.approx(40.0 / (1 * 10))
    assert plot_summary(table, tmp_path / "fig.png").stat().st_size > 1000
    table.to_csv(tmp_path / "h100.csv", index=False)
    assert main([str(tmp_path), "--out", str(tmp_path / "fig2.png")]) == 0 and (tmp_path / "fig2.png").exists()
    assert main([str(tmp_path), "--out", str(tmp_path / "fig.txt")]) == 2
    with pytest.raises(InvalidInputError, match="no usable"):
        plot_summary(table.iloc[:0], tmp_path / "empty.png")
