"""The inference runner on CPU: a tiny Llama stands in for the GPU model, a fake meter for NVML."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from llmco2.data.schema import COLUMN_NAMES
from llmco2.errors import InvalidInputError
from llmco2.measure.errors import MeasurementError, UnsupportedConfigError
from llmco2.measure.hf_models import (
    build_model,
    check_finite,
    hf_config,
    hf_config_for,
    layer_stack,
    pipeline_device_map,
    torch_dtype,
)
from llmco2.measure.runner import InferenceRunner, PhaseStats, software_versions
from llmco2.measure.store import canonical_rows, check_rows
from llmco2.measure.testing import FakeMeter, tiny_llama_factory
from llmco2.measure.windows import WindowPolicy
from llmco2.specs import ModelArch, Request, get_gpu, get_model, model_catalog

TINY = ModelArch(id="tiny-test", hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                 vocab_size=128)


class CountingFactory:
    """tiny_llama_factory that counts builds and every forward call (with its input length)."""

    def __init__(self) -> None:
        self.builds: list[tuple[str, str, int]] = []
        self.forward_lengths: list[int] = []

    def __call__(self, arch, dtype, devices, **kw):
        built = tiny_llama_factory(arch, dtype, devices, **kw)
        self.builds.append((arch.id, dtype, len(devices)))
        built.model.register_forward_hook(lambda mod, args, kwargs, out: self.forward_lengths.append(kwargs["input_ids"].shape[1]),
                                          with_kwargs=True)
        return built


def runner_with(meter=None, factory=None, **kw) -> InferenceRunner:
    """One pass per window (the mechanics); amortised windows are tested in test_windows.py."""
    kw.setdefault("policy", WindowPolicy.single_pass())
    return InferenceRunner(meter or FakeMeter(), device="cpu", model_factory=factory or tiny_llama_factory, **kw)


# -- prefill and decode ------------------------------------------------------------------------------
def test_prefill_and_decode_are_measured_apart() -> None:
    meter = FakeMeter(power_w=100.0, idle_w=20.0)
    factory = CountingFactory()
    runner = runner_with(meter, factory, repeats=3, warmup=1)
    request = Request(batch_size=2, prompt_tokens=8, generated_tokens=5)
    result = runner.run(get_model("llama3.1-8b"), request)

    assert result.tokens_generated == 5 and result.decode_steps == 4
    # every run: one prefill pass over the 8 prompt tokens, then 4 one-token decode steps
    assert factory.forward_lengths == ([8] + [1] * 4) * (1 + 3)
    assert [w.name for w in meter.windows] == ["prefill", "decode"] * 3  # the warm-up is not measured
    assert not meter.open
    pre, dec = result.prefill, result.decode
    assert dec is not None and result.phases == (pre, dec)
    assert pre.repeats == dec.repeats == 3
    prefill_windows = [w for w in meter.windows if w.name == "prefill"]
    assert pre.energy_j == pytest.approx(sum(w.total_energy_j for w in prefill_windows) / 3)
    assert pre.latency_s == pytest.approx(sum(w.elapsed_s for w in prefill_windows) / 3)
    assert pre.energy_std_j == pytest.approx(torch.tensor(pre.energy_per_repeat_j, dtype=torch.float64).std().item())
    assert pre.energy_above_idle_j == pytest.approx(pre.energy_j * 80 / 100)
    assert pre.sm_clock_mhz == 1980 and pre.temperature_max_c == 40 and pre.method == "nvml_energy"
    assert result.weights == "random" and result.model_type == "llama" and result.gpus == (0,)
    assert factory.builds == [("llama3.1-8b", "fp16", 1)]


def test_one_generated_token_has_no_decode_phase() -> None:
    factory = CountingFactory()
    meter = FakeMeter()
    result = runner_with(meter, factory, repeats=2, warmup=0).run(TINY, Request(batch_size=1, prompt_tokens=6, generated_tokens=1))
    assert result.decode is None and result.decode_steps == 0 and result.tokens_generated == 1
    assert factory.forward_lengths == [6, 6]
    assert [w.name for w in meter.windows] == ["prefill", "prefill"]


def test_model_is_reused_until_the_configuration_changes() -> None:
    factory = CountingFactory()
    runner = runner_with(factory=factory, repeats=1, warmup=0)
    runner.run(TINY, Request(batch_size=1, prompt_tokens=4, generated_tokens=2, weight_dtype="bf16"))
    runner.run(TINY, Request(batch_size=3, prompt_tokens=9, generated_tokens=3, weight_dtype="bf16"))
    assert len(factory.builds) == 1
    runner.run(TINY, Request(batch_size=1, prompt_tokens=4, generated_tokens=2, weight_dtype="fp32"))
    assert factory.builds == [("tiny-test", "bf16", 1), ("tiny-test", "fp32", 1)]
    runner.release()
    assert runner._cached is None


def test_multi_gpu_requests_use_the_first_gpus_and_sum_them() -> None:
    meter = FakeMeter(gpus=(0, 1, 2), power_w=10.0)
    factory = CountingFactory()
    runner = runner_with(meter, factory, gpus=(0, 1, 2), repeats=1, warmup=0)
    result = runner.run(TINY, Request(batch_size=1, prompt_tokens=4, generated_tokens=3, num_gpus=2))
    assert result.gpus == (0, 1) and factory.builds == [("tiny-test", "fp16", 2)]
    window = meter.windows[0]
    assert result.prefill.energy_j == pytest.approx(2 * 10.0 * window.elapsed_s)  # GPUs 0 and 1, not 2
    with pytest.raises(UnsupportedConfigError, match="needs 4 GPUs"):
        runner.run(TINY, Request(batch_size=1, prompt_tokens=4, generated_tokens=3, num_gpus=4))


def test_failure_inside_a_window_cancels_it_and_frees_the_model() -> None:
    meter = FakeMeter()

    def exploding(arch, dtype, devices, **kw):
        built = tiny_llama_factory(arch, dtype, devices, **kw)

        def boom(*a, **k):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        built.model.register_forward_pre_hook(boom)
        return built

    runner = runner_with(meter, exploding, repeats=1, warmup=0)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        runner.run(TINY, Request(batch_size=1, prompt_tokens=4, generated_tokens=2))
    assert meter.cancelled == ["prefill"] and not meter.open
    assert runner._cached is None


def test_zero_energy_is_refused() -> None:
    with pytest.raises(MeasurementError, match="prefill measured 0 J with 1 pass"):
        runner_with(FakeMeter(power_w=0.0), repeats=1, warmup=0).run(TINY, Request(batch_size=1, prompt_tokens=4, generated_tokens=2))


def test_runner_argument_checks() -> None:
    with pytest.raises(UnsupportedConfigError):
        InferenceRunner(FakeMeter(), repeats=0)
    with pytest.raises(UnsupportedConfigError):
        InferenceRunner(FakeMeter(), warmup=-1)
    assert InferenceRunner(FakeMeter(), gpus=(2, 3)).devices_for(2) == [torch.device("cuda", 2), torch.device("cuda", 3)]


def test_environment_lists_versions_and_meter() -> None:
    env = runner_with().environment()
    assert set(env["software"]) >= {"python", "torch", "transformers", "cuda", "llmco2"}
    assert env["software"]["torch"] == torch.__version__
    assert env["meter"]["driver_version"] == "fake"
    assert software_versions()["transformers"] is not None


def test_phase_stats_single_repeat_has_zero_std() -> None:
    from llmco2.measure.meter import Measurement

    s = PhaseStats.from_measurements("prefill", [Measurement("prefill", 0.5, {0: 10.0}, "nvml_power")])
    assert (s.energy_j, s.energy_std_j, s.latency_std_s, s.energy_above_idle_j, s.sm_clock_mhz) == (10.0, 0.0, 0.0, None, None)
    with pytest.raises(ValueError):
        PhaseStats.from_measurements("decode", [])


# -- canonical rows ----------------------------------------------------------------------------------
def test_rows_of_a_run_validate_against_the_canonical_schema() -> None:
    arch = get_model("llama3.1-8b")
    request = Request(batch_size=2, prompt_tokens=8, generated_tokens=4, num_gpus=1, weight_dtype="bf16")
    result = runner_with(repeats=2, warmup=0).run(arch, request)
    rows = canonical_rows(result, arch, request, "h100-sxm", source_file="h100.csv", first_line=7)
    table = check_rows(rows, origin="h100.csv")
    assert list(table.columns) == list(COLUMN_NAMES)
    assert list(table["phase"]) == ["prefill", "decode"] and list(table["source_row"]) == [7, 8]
    first = table.iloc[0]
    assert (first["source"], first["level"], first["engine"], first["measurement"]) == ("llmco2", "request", "hf", "nvml_energy")
    assert (first["attention"], first["window_method"], first["window_passes"], first["sm_clock_mhz"]) == ("sdpa", "single", 1, 1980)
    assert first["idle_power_w"] == 20.0 and pd.isna(first["quantisation_bound"]) and pd.isna(first["power_limit_w"])
    assert (first["device"], first["model"], first["weight_bits"], first["kv_bits"], first["repeats"]) == ("h100-sxm", "llama3.1-8b", 16, 16, 2)
    assert (first["hidden_size"], first["num_kv_heads"], first["vocab_size"], bool(first["kv_cache"])) == (4096, 8, 128256, True)
    assert (first["tensor_parallel"], first["pipeline_parallel"]) == (1, 1)
    assert first["energy_j"] > 0 and first["energy_std_j"] >= 0 and first["latency_s"] > 0
    assert first["flag"] == "random_weights;approximate_architecture"  # the tiny stand-in notes itself
    assert table.iloc[1]["energy_j"] == pytest.approx(result.decode.energy_j)


# -- transformers models from catalog architectures ------------------------------------------------
@pytest.mark.parametrize(("model", "model_type", "approximate"), [
    ("llama3.1-8b", "llama", False), ("qwen2-7b", "llama", False), ("gemma2-9b", "llama", False),
    ("mixtral-8x7b", "mixtral", False), ("bloom-560m", "bloom", False), ("falcon-7b", "falcon", False),
    ("falcon-40b", "falcon", False), ("starcoder2-3b", "starcoder2", False), ("opt-6.7b", "opt", False),
    ("gpt-j-6b", "falcon", True), ("gpt-oss-20b", "mixtral", True),
])
def test_catalog_architectures_map_to_transformers_types(model, model_type, approximate) -> None:
    arch = get_model(model)
    spec = hf_config_for(arch)
    assert spec.model_type == model_type and spec.approximate == approximate
    if model_type == "llama":
        assert (spec.kwargs["num_key_value_heads"], spec.kwargs["head_dim"]) == (arch.num_kv_heads, arch.head_dim)
    if model == "falcon-7b":
        assert spec.kwargs["multi_query"] and not spec.kwargs["new_decoder_architecture"]
    if model == "falcon-40b":
        assert spec.kwargs["new_decoder_architecture"] and spec.kwargs["num_kv_heads"] == 8


def test_every_catalog_model_maps_and_unknown_styles_approximate() -> None:
    for arch in model_catalog():
        hf_config_for(arch)
    odd = TINY.with_overrides(norm_type="layernorm", mlp_gated=False, position_encoding="alibi", intermediate_size=100)
    spec = hf_config_for(odd)
    assert spec.model_type == "llama" and spec.approximate
    assert spec.kwargs["intermediate_size"] == round(2 * 100 / 3)  # ungated -> gated with the same weights
    assert any("approximation" in n for n in spec.notes)


def _tiny(model: str) -> ModelArch:
    a = get_model(model)
    kv = 1 if a.num_kv_heads == 1 else 4 if a.num_kv_heads == a.num_heads else 2
    return a.with_overrides(hidden_size=64, num_heads=4, num_kv_heads=kv, head_dim=16, num_layers=4, vocab_size=96,
                            intermediate_size=256 if a.position_encoding == "alibi" else 96,
                            num_experts=min(a.num_experts, 4), experts_per_token=min(a.experts_per_token, 2))


@pytest.mark.parametrize("model", ["llama3.1-8b", "mixtral-8x7b", "bloom-560m", "falcon-40b", "starcoder2-3b", "opt-6.7b"])
def test_build_model_on_cpu_matches_the_architecture(model) -> None:
    arch = _tiny(model)
    built = build_model(arch, "fp32", ["cpu"], flash_attention=False)
    assert built.weights == "random" and built.input_device == torch.device("cpu") and built.vocab_size == 96
    assert built.param_count == pytest.approx(arch.param_count(), rel=0.02)
    assert next(built.model.parameters()).dtype == torch.float32
    runner = InferenceRunner(FakeMeter(), device="cpu", model_factory=lambda *a, **k: built, repeats=1, warmup=0,
                             policy=WindowPolicy.single_pass())
    result = runner.run(arch, Request(batch_size=2, prompt_tokens=5, generated_tokens=3))
    assert result.tokens_generated == 3 and result.decode is not None


def test_build_model_in_bf16_and_refuses_quantised_dtypes() -> None:
    built = build_model(TINY, "bf16", ["cpu"])
    assert next(built.model.parameters()).dtype == torch.bfloat16
    assert torch_dtype("fp16") == torch.float16
    for dtype in ("int8", "int4", "fp8", "fp4"):
        with pytest.raises(UnsupportedConfigError, match="quantisation"):
            build_model(TINY, dtype, ["cpu"])


def test_layer_wise_split_materialises_random_weights() -> None:
    arch = _tiny("llama3.1-8b")
    split = build_model(arch, "fp32", ["cpu", "cpu"])
    single = build_model(arch, "fp32", ["cpu"])
    assert set(split.device_map) >= {"model.layers.0", "model.layers.3", "model.embed_tokens", "model.norm", "lm_head"}
    check_finite(split.model)
    weight = split.model.model.layers[0].mlp.up_proj.weight
    assert 0.01 < weight.std().item() < 0.04 and not torch.equal(weight, torch.zeros_like(weight))  # the 0.02 init, not garbage
    inv_split = dict(split.model.named_buffers())["model.rotary_emb.inv_freq"]
    inv_single = dict(single.model.named_buffers())["model.rotary_emb.inv_freq"]
    assert torch.allclose(inv_split, inv_single)
    assert split.param_count == single.param_count
    with torch.inference_mode():
        logits = split.model(input_ids=torch.randint(0, 96, (1, 7))).logits
    assert torch.isfinite(logits).all()


def test_pipeline_device_map_splits_layers_contiguously() -> None:
    config, _ = hf_config(_tiny("llama3.1-8b"))
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    gpus = [torch.device("cuda", 0), torch.device("cuda", 1)]
    mapping = pipeline_device_map(model, gpus)
    assert layer_stack(model)[0] == "model.layers"
    assert [mapping[f"model.layers.{i}"].index for i in range(4)] == [0, 0, 1, 1]
    assert mapping["model.embed_tokens"].index == 0 and mapping["model.norm"].index == 1 and mapping["lm_head"].index == 1
    with pytest.raises(UnsupportedConfigError, match="only 4 layers"):
        pipeline_device_map(model, [torch.device("cuda", i) for i in range(5)])
    tied_config, _ = hf_config(_tiny("bloom-560m"))
    with torch.device("meta"):
        tied = AutoModelForCausalLM.from_config(tied_config)
    tied_map = pipeline_device_map(tied, gpus)
    assert tied_map["lm_head"].index == 0  # tied to the input embedding, kept beside it
    assert tied_map["transformer.ln_f"].index == 1


def test_check_finite_names_the_bad_tensor() -> None:
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight[0, 0] = math.nan
    with pytest.raises(MeasurementError, match="parameter weight"):
        check_finite(model)


def test_rows_need_a_catalog_device() -> None:
    arch = TINY
    request = Request(batch_size=1, prompt_tokens=4, generated_tokens=2)
    result = runner_with(repeats=1, warmup=0).run(arch, request)
    rows = canonical_rows(result, arch, request, get_gpu("a100").id, source_file="x.csv", first_line=2)
    assert len(check_rows(rows, origin="x.csv")) == 2  # a non-catalog model id is allowed (HF config path)
    with pytest.raises(InvalidInputError, match="unknown gpu"):
        check_rows(canonical_rows(result, arch, request, "no-such-gpu", source_file="x.csv", first_line=2), origin="x.csv")


# -- static KV cache decode (engine hf-static) ------------------------------------------------------------
def test_static_decode_generates_the_same_tokens_as_eager() -> None:
    """The static cache is reset before every prefill, so back-to-back passes give the same tokens
    (on CPU without torch.compile; tests/gpu compiles it)."""
    from llmco2.measure.passes import Passes

    built = tiny_llama_factory(TINY, "fp32", ["cpu"])
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        eager = Passes(built.model, built.input_device, 2, 7, 5, "eager")
        static = Passes(built.model, built.input_device, 2, 7, 5, "static", compile_decode=False)
        want = eager.decode(*eager.prefill(ids))[0]
        for _ in range(3):
            token, cache = static.prefill(ids)
            assert int(cache.get_seq_length()) == 7
            got, cache, steps = static.decode(token, cache)
            assert torch.equal(got, want) and steps == 5 and int(cache.get_seq_length()) == 12
        assert static.full(ids) == 6 and eager.full(ids) == 6


def test_static_runner_rows_say_hf_static() -> None:
    meter = FakeMeter()
    runner = runner_with(meter, repeats=1, warmup=1, decode_mode="static", compile_decode=False)
    result = runner.run(TINY, Request(batch_size=1, prompt_tokens=5, generated_tokens=4, weight_dtype="fp32"))
    assert result.engine == "hf-static" and result.decode is not None and result.decode.energy_j > 0
    with pytest.raises(UnsupportedConfigError, match="decode mode"):
        runner_with(decode_mode="graphs")


@pytest.mark.parametrize("model, shape", [
    ("bloom-1b7", {"intermediate_size": 256, "num_heads": 4, "num_kv_heads": 4}),
    ("falcon-7b", {"num_heads": 4, "num_kv_heads": 1}),
    ("opt-6.7b", {"num_heads": 4, "num_kv_heads": 4}),
    ("starcoder2-3b", {"num_heads": 4, "num_kv_heads": 2}),
    ("qwen3-30b-a3b", {"num_heads": 4, "num_kv_heads": 2, "num_experts": 4, "experts_per_token": 2}),
])
def test_static_cache_works_for_every_model_type_of_the_plan(model, shape) -> None:
    from llmco2.measure.passes import Passes

    arch = get_model(model).with_overrides(**({"hidden_size": 64, "intermediate_size": 96, "num_layers": 2, "vocab_size": 96,
                                                "head_dim": 16} | shape))
    built = build_model(arch, "fp32", ["cpu"])
    ids = torch.randint(0, 96, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eager = Passes(built.model, built.input_device, 2, 7, 4, "eager")
        static = Passes(built.model, built.input_device, 2, 7, 4, "static", compile_decode=False)
        assert torch.equal(eager.decode(*eager.prefill(ids))[0], static.decode(*static.prefill(ids))[0])
    assert built.model_type == hf_config_for(arch).model_type
