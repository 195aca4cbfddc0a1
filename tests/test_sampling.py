"""Samplers (random baseline, focused priors), Algorithm 1's fine-grained sampling and loop, the
Hydra configs."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.data import azure, sampling
from llmco2.data.azure import load_trace
from llmco2.data.sample_app import CONF_DIR, run_focused_loop, run_sample
from llmco2.data.sampling import (
    ARCH_COLUMNS,
    DTYPES,
    SAMPLE_COLUMNS,
    TARGET,
    FocusedSampler,
    RandomSampler,
    analytic_measure,
    fine_grained_sample,
    focused_loop,
    lookup_measure,
    memory_need_bytes,
    read_samples,
    rows_to_items,
    sklearn_callables,
    to_csv,
)
from llmco2.errors import InvalidInputError
from llmco2.specs import get_gpu, get_model
from llmco2.specs.models import validate_arch


def ks_distance(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / len(a)
    fb = np.searchsorted(b, x, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, str]:
    """Small synthetic traces in the Azure format (tests that do not need the real distributions)."""
    folder = tmp_path_factory.mktemp("traces")
    rng = np.random.default_rng(7)
    paths = {}
    for name, (pm, gm) in {"code": (7.0, 2.5), "conv": (6.7, 4.6)}.items():
        n = 400
        stamps = pd.date_range("2023-11-16 18:00", periods=n, freq="250ms").strftime("%Y-%m-%d %H:%M:%S.%f")
        df = pd.DataFrame({"TIMESTAMP": stamps,
                           "ContextTokens": np.clip(rng.lognormal(pm, 0.8, n), 1, 9000).astype(int),
                           "GeneratedTokens": np.clip(rng.lognormal(gm, 1.0, n), 1, 1200).astype(int)})
        path = folder / f"{name}.csv"
        df.to_csv(path, index=False)
        paths[name] = str(path)
    return paths


def focused(paths, **kw) -> FocusedSampler:
    return FocusedSampler(trace_paths=paths, **kw)


def engine_fits(df: pd.DataFrame) -> np.ndarray:
    items = rows_to_items(df)
    return model_totals(analyze_layers(LayerBatch.from_items(items, validate=False))).fits_in_memory


# -- the focused draw --------------------------------------------------------------------------
def test_focused_follows_azure_distributions(shared_data) -> None:
    df = FocusedSampler().sample(20_000, seed=0)
    assert len(df) == 20_000 and set(df["trace"]) == {"code", "conv"}
    for which in ("code", "conv"):
        trace, part = load_trace(which), df[df["trace"] == which]
        assert len(part) > 8000
        for col in ("prompt_tokens", "generated_tokens"):
            assert ks_distance(part[col], trace[col]) < 0.1, (which, col)
    # and the joint pairs are trace rows, not independent marginals
    code = load_trace("code")
    pairs = set(zip(code["prompt_tokens"], np.maximum(code["generated_tokens"], 1), strict=True))
    drawn = df[df["trace"] == "code"]
    assert all(p in pairs for p in zip(drawn["prompt_tokens"], drawn["generated_tokens"], strict=True))


def test_50k_focused_samples_take_seconds(shared_data) -> None:
    sampler = FocusedSampler()
    start = time.perf_counter()
    df = sampler.sample(50_000, seed=3)
    assert time.perf_counter() - start < 30
    assert len(df) == 50_000 and sampler.last_report.requested == 50_000


def test_focused_sample_columns_and_priors(traces) -> None:
    df = focused(traces).sample(3000, seed=1)
    assert tuple(df.columns) == SAMPLE_COLUMNS and len(df) == 3000
    assert set(df["dtype"]) <= set(DTYPES) and set(df["trace"]) <= {"code", "conv"}
    assert set(df["gpu"]) <= {"t4", "l4", "a100-80gb", "h100-sxm"}
    assert df["num_gpus"].between(1, 4).all()
    share_small = df["batch_size"].le(2).mean()
    assert 0.8 < share_small < 0.97 and df["batch_size"].max() <= 8
    assert set(df["model"]) == set(sampling.PAPER_MODELS) | set(sampling.EDGE_MODELS)
    for col in ("num_gpus", "batch_size", "prompt_tokens", *ARCH_COLUMNS):
        assert df[col].dtype == np.int64


def test_reads_each_trace_once_per_process(traces, monkeypatch) -> None:
    azure.clear_cache()
    sampling.trace_length_pairs.cache_clear()
    calls = []
    real = pd.read_csv

    def spy(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(azure.pd, "read_csv", spy)
    for seed in (0, 1):
        focused(traces).sample(200, seed=seed)
        focused(traces, traces=["conv"]).sample(100, seed=seed)
    assert sorted(Path(c).name for c in calls) == ["code.csv", "conv.csv"]


def test_reproducible_for_a_seed(traces) -> None:
    for sampler in (focused(traces), focused(traces, variants_per_model=0), RandomSampler()):
        a, b, c = sampler.sample(500, seed=11), sampler.sample(500, seed=11), sampler.sample(500, seed=12)
        pd.testing.assert_frame_equal(a, b)
        assert not a.equals(c)
    # a fresh instance with the same config draws the same rows
    pd.testing.assert_frame_equal(focused(traces).sample(300, seed=5), focused(traces).sample(300, seed=5))


def test_perturbed_architectures_are_valid(traces) -> None:
    sampler = focused(traces, perturb_probability=0.8, perturb_field_probability=0.6)
    df = sampler.sample(2000, seed=2)
    base = np.array([[getattr(get_model(m), c) for c in ARCH_COLUMNS] for m in df["model"]])
    perturbed = (df[list(ARCH_COLUMNS)].to_numpy() != base).any(axis=1)
    assert perturbed.mean() > 0.5
    for col in ("num_layers", "num_heads", "hidden_size", "intermediate_size"):
        assert (df[col].to_numpy() != base[:, ARCH_COLUMNS.index(col)]).any(), col
    items = rows_to_items(df)  # validate_request on every row: TP splits, node size, dtype, context
    for arch, req, gpu in items:
        validate_arch(arch)
        assert arch.num_heads % arch.num_kv_heads == 0 and arch.num_heads % req.tensor_parallel == 0
        assert req.prompt_tokens + req.generated_tokens <= arch.max_context
        assert gpu.supports(req.compute_dtype)
    for (arch, req, gpu), row in zip(items, df.itertuples(index=False), strict=True):
        assert [getattr(arch, c) for c in ARCH_COLUMNS] == [getattr(row, c) for c in ARCH_COLUMNS]
        assert (req.batch_size, req.prompt_tokens, req.generated_tokens, req.num_gpus, req.weight_dtype, gpu.id) == (
            row.batch_size, row.prompt_tokens, row.generated_tokens, row.num_gpus, row.dtype, row.gpu)
        b = get_model(row.model)
        if b.hidden_size == b.num_heads * b.head_dim:  # built as heads x head_dim: stays that way
            assert arch.hidden_size == arch.num_heads * arch.head_dim
        assert arch.head_dim == b.head_dim and arch.vocab_size == b.vocab_size and arch.num_experts == b.num_experts
        if b.num_kv_heads == 1:
            assert arch.num_kv_heads == 1
        elif b.num_kv_heads == b.num_heads:
            assert arch.num_kv_heads == arch.num_heads
    assert engine_fits(df).all()
    arch_set = sampler.architectures(seed=2)
    assert len(arch_set) == 20 * (1 + 16)


def test_drops_configurations_that_do_not_fit(traces) -> None:
    # 70B at 16 bits (~141 GB) can never fit in 4 x 24 GB: nothing can be placed
    sampler = focused(traces, models=["llama3.1-70b"], edge_models=[], gpus=["l4", "a10"], dtypes=["fp16"],
                      perturb_probability=0.0, max_rounds=3)
    with pytest.raises(InvalidInputError, match="could be placed"):
        sampler.sample(50, seed=0)
    assert sampler.last_report.dropped["placement"] == sampler.last_report.drawn > 0
    # with int4 it fits on enough 24 GB GPUs (never one): 16-bit draws are dropped and counted
    sampler = focused(traces, models=["llama3.1-70b"], edge_models=[], gpus=["l4", "a10"], dtypes=["fp16", "int4"],
                      dtype_weights=[0.5, 0.5], perturb_probability=0.0)
    df = sampler.sample(300, seed=0)
    assert set(df["dtype"]) == {"int4"} and df["num_gpus"].min() >= 2
    assert sampler.last_report.dropped["placement"] > 100
    need = memory_need_bytes(df)
    cap = df["gpu"].map(lambda g: get_gpu(g).memory_bytes).to_numpy()
    assert np.all(need <= 0.9 * cap * df["num_gpus"].to_numpy())
    assert engine_fits(df).all()
    # the random baseline rejects them too
    rnd = RandomSampler(models=["llama3.1-70b"], gpus=["l4"], dtypes=["fp16", "int4"], max_prompt=512, max_generated=64)
    assert set(rnd.sample(100, seed=0)["dtype"]) == {"int4"}


def test_num_gpus_from_the_minimum_that_fits(traces) -> None:
    kw = {"models": ["qwen2-72b", "llama3.1-8b"], "edge_models": [], "gpus": ["a100-80gb"], "dtypes": ["fp16"],
          "perturb_probability": 0.0, "memory_fraction": 1.0}
    minimum = focused(traces, num_gpus_policy="minimum", **kw).sample(400, seed=0)
    assert set(minimum.loc[minimum["model"] == "llama3.1-8b", "num_gpus"]) == {1}
    assert set(minimum.loc[minimum["model"] == "qwen2-72b", "num_gpus"]) == {2}  # 145 GB: two 80 GB GPUs
    uniform = focused(traces, **kw).sample(400, seed=0)
    assert set(uniform.loc[uniform["model"] == "llama3.1-8b", "num_gpus"]) == {1, 2, 4}  # 3 does not split 32 heads
    assert set(uniform.loc[uniform["model"] == "qwen2-72b", "num_gpus"]) == {2, 4}


def test_random_sampler_is_uniform_over_ranges() -> None:
    df = RandomSampler(max_prompt=300, max_generated=40, max_batch=4).sample(4000, seed=0)
    assert tuple(df.columns) == SAMPLE_COLUMNS and set(df["trace"]) == {"uniform"}
    assert df["prompt_tokens"].between(1, 300).all() and df["generated_tokens"].between(1, 40).all()
    assert set(df["batch_size"]) == {1, 2, 3, 4} and set(df["num_gpus"]) <= {1, 2, 3, 4}
    assert abs(df["prompt_tokens"].mean() - 150.5) < 10
    assert ks_distance(df["generated_tokens"], np.arange(1, 41)) < 0.05
    rows_to_items(df)
    assert engine_fits(df).all()


def test_sampler_arguments_are_checked(traces) -> None:
    with pytest.raises(InvalidInputError, match="traces"):
        FocusedSampler(traces=["chat"])
    with pytest.raises(InvalidInputError, match="fp8"):
        FocusedSampler(dtypes=["fp16", "fp8"])
    with pytest.raises(InvalidInputError, match="batch_size_probs"):
        FocusedSampler(batch_size_probs=[0.8, 0.5])
    with pytest.raises(InvalidInputError, match="unknown model"):
        FocusedSampler(extra_models=["no-such-model"])
    with pytest.raises(InvalidInputError, match="n"):
        focused(traces).sample(-1)


def test_csv_round_trip(traces, tmp_path) -> None:
    df = focused(traces).sample(100, seed=0)
    path = to_csv(df, tmp_path / "sub" / "s.csv")
    pd.testing.assert_frame_equal(read_samples(path), df)
    with pytest.raises(InvalidInputError, match="missing columns"):
        rows_to_items(df.drop(columns=["head_dim"]))
    with pytest.raises(InvalidInputError, match="dtype"):
        rows_to_items(df.assign(dtype="fp8"))


# -- Algorithm 1 -------------------------------------------------------------------------------
def test_fine_grained_sample_stays_within_c(traces) -> None:
    points = focused(traces, perturb_probability=0.5).sample(25, seed=4)
    ranges = {"prompt_tokens": 10, "generated_tokens": 1, "num_layers": 1}
    total = 0
    for i in range(len(points)):
        point = points.iloc[[i]]
        near = fine_grained_sample(point, b=40, ranges=ranges, seed=i)
        total += len(near)
        assert len(near) + near.attrs["dropped"] == 40
        p = point.iloc[0]
        assert (near["prompt_tokens"] - p["prompt_tokens"]).abs().le(10).all()
        assert (near["generated_tokens"] - p["generated_tokens"]).abs().le(1).all()
        assert (near["num_layers"] - p["num_layers"]).abs().le(1).all()
        for col in ("model", "gpu", "num_gpus", "batch_size", "dtype", "trace", "hidden_size", "num_heads",
                    "num_kv_heads", "intermediate_size", "head_dim"):
            assert (near[col] == p[col]).all(), col
        assert near[["prompt_tokens", "generated_tokens", "num_layers"]].ge(1).all().all()
    assert total > 25 * 30
    near = fine_grained_sample(points, b=20, ranges=ranges, seed=0)
    assert len(near) > 0 and engine_fits(near).all()  # rows_to_items validates every request too
    # the ±C draw actually spreads
    assert near["prompt_tokens"].nunique() > 20


def test_fine_grained_heads_and_gpus_stay_valid(traces) -> None:
    points = focused(traces, perturb_probability=0.0).sample(30, seed=8)
    near = fine_grained_sample(points, b=20, ranges={"num_heads": 8, "num_gpus": 1, "hidden_size": 0}, seed=1)
    assert (near["num_heads"] % near["num_kv_heads"] == 0).all()
    assert near["num_gpus"].between(1, 4).all()
    assert (near["num_heads"] % near["num_gpus"] == 0).all()
    rows_to_items(near)
    assert engine_fits(near).all()
    with pytest.raises(InvalidInputError, match="cannot perturb"):
        fine_grained_sample(points, b=2, ranges={"vocab_size": 3})
    # a point that only just fits: larger batches or more layers no longer fit and are dropped
    tight = points.iloc[[0]].assign(model="llama3.1-70b", gpu="a100-80gb", num_gpus=2, dtype="fp16", batch_size=1,
                                    prompt_tokens=100, generated_tokens=10,
                                    **{c: getattr(get_model("llama3.1-70b"), c) for c in ARCH_COLUMNS})
    near = fine_grained_sample(tight, b=50, ranges={"batch_size": 0, "num_layers": 3}, seed=0)
    assert near.attrs["dropped"] > 0 and near["num_layers"].max() < 83
    assert engine_fits(near).all()


def test_focused_loop_stops_at_max_rounds(traces) -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    initial = focused(traces, gpus=["l4", "a100-80gb", "h100-sxm"]).sample(150, seed=0)
    fit, predict = sklearn_callables(GradientBoostingRegressor(n_estimators=30, max_depth=2, random_state=0))
    result = focused_loop(initial, fit, predict, analytic_measure, top_k=4, b=10, error_threshold=0.0, max_rounds=2, seed=0)
    assert result.rounds == 2 and not result.converged
    assert len(result.mape_history) == 3 and all(np.isfinite(result.mape_history))
    assert result.mape_history[-1] <= result.mape_history[0] * 1.5
    assert len(result.train) + len(result.test) == 150 + sum(result.added)
    assert len(result.test) == 30 + sum(round(0.2 * a) for a in result.added)
    assert (result.train[TARGET] > 0).all() and tuple(result.test.columns) == (*SAMPLE_COLUMNS, TARGET)
    assert result.metrics()["rounds"] == 2
    # deterministic
    again = focused_loop(initial, fit, predict, analytic_measure, top_k=4, b=10, error_threshold=0.0, max_rounds=2, seed=0)
    assert again.mape_history == result.mape_history
    # an easy threshold: no refinement round
    done = focused_loop(initial, fit, predict, analytic_measure, top_k=4, b=10, error_threshold=1e9, max_rounds=5, seed=0)
    assert done.rounds == 0 and done.converged and done.added == []


def test_focused_loop_with_any_callables_and_table_lookup(traces) -> None:
    initial = focused(traces).sample(120, seed=1)
    energy = analytic_measure(initial)
    table = initial.assign(energy_j=energy)
    measure = lookup_measure(table)
    assert np.allclose(measure(initial), energy)
    # a mean predictor; the lookup knows only the initial points, so new ones are unmeasured
    result = focused_loop(initial, lambda X, y: float(np.mean(y)), lambda m, X: np.full(len(X), m), measure,
                          top_k=3, b=5, error_threshold=0.0, max_rounds=1, seed=0)
    assert result.rounds == 1 and result.unmeasured > 0
    assert len(result.train) + len(result.test) == 120 + result.added[0]


def test_analytic_measure_is_a_deterministic_positive_stand_in(traces) -> None:
    df = focused(traces).sample(200, seed=0)
    e = analytic_measure(df)
    assert e.shape == (200,) and np.all(e > 0) and np.array_equal(e, analytic_measure(df))
    assert np.allclose(analytic_measure(df, power_w=600.0), 2 * e)
    one = df.iloc[[0]]
    longer = one.assign(generated_tokens=one["generated_tokens"] + 50)
    assert analytic_measure(longer)[0] > analytic_measure(one)[0]


# -- Hydra -------------------------------------------------------------------------------------
def test_sample_config_composes_and_runs(traces, tmp_path) -> None:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("sample", overrides=["n=64", "seed=3", f"out={tmp_path / 'focused.csv'}"])
        cfg.sampler.trace_paths = traces
        assert cfg.task == "sample" and cfg.sampler._target_.endswith("FocusedSampler")
        sampler = instantiate(cfg.sampler)
        assert isinstance(sampler, FocusedSampler) and len(sampler.models.archs) == 20
        df = sampler.sample(cfg.n, seed=cfg.seed)
        assert len(df) == 64
        metrics = run_sample(cfg)
        assert metrics["rows"] == 64 and Path(metrics["out"]).is_file()
        pd.testing.assert_frame_equal(read_samples(metrics["out"]), df)

        rnd = compose("sample", overrides=["sampler=random", "n=32", "sampler.max_prompt=256", f"out={tmp_path / 'r.csv'}"])
        sampler = instantiate(rnd.sampler)
        assert isinstance(sampler, RandomSampler) and sampler.max_prompt == 256
        assert run_sample(rnd)["rows"] == 32

        missing = compose("sample", overrides=["n=8"])
        missing.sampler.trace_paths = traces
        assert OmegaConf.is_missing(missing, "out")
        with pytest.raises(InvalidInputError, match="out="):
            run_sample(missing)


def test_focused_loop_experiment_composes_and_runs(traces, tmp_path) -> None:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("sample", overrides=["+experiment=focused_loop", "n=120", "loop.max_rounds=1", "loop.b=5",
                                           "loop.top_k=3", "loop.regressor.n_estimators=20", f"out={tmp_path / 'loop'}"])
        cfg.sampler.trace_paths = traces
        assert cfg.task == "focused_loop" and cfg.loop.measure._target_.endswith("analytic_measure")
        assert cfg.loop.regressor._target_ == "sklearn.ensemble.GradientBoostingRegressor"
        assert cfg.loop.regressor.random_state == cfg.seed
        metrics = run_focused_loop(cfg)
        assert metrics["rounds"] <= 1 and len(metrics["mape_history"]) == metrics["rounds"] + 1
        assert (tmp_path / "loop" / "metrics.json").is_file() and (tmp_path / "loop" / "train.csv").is_file()
