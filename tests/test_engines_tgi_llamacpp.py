"""Golden tests of the catalog entries for Hugging Face Text Generation Inference (``tgi``) and
llama.cpp (``llama-cpp``, Ollama included): ids and aliases resolve, every prior has a source, the
learned network's engine levels (the shipped checkpoint's feature schema) are unchanged, and a
prediction with either engine runs on the shipped checkpoint and says it extrapolates."""

from __future__ import annotations

import json

import pytest

import llmco2
from llmco2.graph.features import ENGINE_LEVELS, GLOBAL_FEATURES
from llmco2.physics.step_physics import catalog_overhead
from llmco2.specs import engine_id, engine_level_index, engine_levels, get_engine
from tests.helpers import run_cli

NEW = ("tgi", "llama-cpp")
NUMERIC = ("launch_overhead_us", "step_overhead_ms", "sequence_overhead_us", "serving_sequence_overhead_us")
#: The network's engine levels the shipped checkpoint was trained with (its one-hot globals).
TRAINED_LEVELS = ["hf", "hf-static", "vllm", "vllm-eager", "tensorrt-llm", "deepspeed", "sglang", "edge", "unknown"]


@pytest.mark.parametrize(("name", "expected"), [
    ("tgi", "tgi"), ("TGI", "tgi"), ("text-generation-inference", "tgi"), ("text_generation_inference", "tgi"),
    ("hf-tgi", "tgi"), ("HuggingFace TGI", "tgi"), ("huggingface-tgi", "tgi"), ("Text Generation Inference", "tgi"),
    ("llama-cpp", "llama-cpp"), ("llama.cpp", "llama-cpp"), ("LlamaCpp", "llama-cpp"), ("llama_cpp", "llama-cpp"),
    ("ollama", "llama-cpp"), ("Ollama", "llama-cpp"), ("llama-server", "llama-cpp"),
])
def test_ids_and_aliases_resolve(name, expected):
    assert get_engine(name).id == expected
    assert engine_id(name) == expected


def test_existing_aliases_keep_their_engines():
    # "huggingface" alone stays transformers; only "huggingface tgi" is TGI
    assert get_engine("huggingface").id == "hf" and get_engine("hf-transformers").id == "hf"


@pytest.mark.parametrize("eid", NEW)
def test_every_prior_has_a_source(eid):
    e = get_engine(eid)
    for key in NUMERIC:
        value = getattr(e, key)
        assert isinstance(value, float) and value > 0, key
        assert len(e.sources.get(key, "")) > 40, f"{eid}.{key} has no source"
        assert "prior only, refitted" in e.sources[key]
    for key in ("cuda_graphs", "continuous_batching", "feature_level"):
        assert len(e.sources.get(key, "")) > 40, f"{eid}.{key} has no source"


def test_golden_priors():
    tgi, lcpp = get_engine("tgi"), get_engine("llama-cpp")
    assert (tgi.cuda_graphs, tgi.continuous_batching) == (True, True)
    assert (tgi.launch_overhead_us, tgi.step_overhead_ms, tgi.sequence_overhead_us, tgi.serving_sequence_overhead_us) \
        == (2.0, 2.0, 50.0, 5.0)
    assert (lcpp.cuda_graphs, lcpp.continuous_batching) == (True, True)
    assert (lcpp.launch_overhead_us, lcpp.step_overhead_ms, lcpp.sequence_overhead_us, lcpp.serving_sequence_overhead_us) \
        == (2.0, 0.6, 200.0, 20.0)
    assert "ollama" in lcpp.sources["feature_level"].lower() or "ollama" in lcpp.name.lower()
    oh = catalog_overhead("ollama")
    assert oh.cuda_graphs and oh.step_s == pytest.approx(0.6e-3) and oh.sequence_s == pytest.approx(200e-6)
    assert oh.serving_sequence_s == pytest.approx(20e-6)


def test_network_levels_unchanged_so_the_shipped_checkpoint_loads():
    assert engine_levels() == TRAINED_LEVELS and list(ENGINE_LEVELS) == TRAINED_LEVELS
    assert not any(f"engine_{e}" in GLOBAL_FEATURES for e in NEW)
    for eid in (*NEW, "ollama"):
        assert get_engine(eid).level == "unknown"
        assert engine_level_index(eid) == TRAINED_LEVELS.index("unknown")


@pytest.mark.parametrize(("engine", "eid"), [("tgi", "tgi"), ("llama-cpp", "llama-cpp"), ("ollama", "llama-cpp")])
def test_predict_with_the_shipped_checkpoint_notes_the_unseen_engine(engine, eid):
    p = llmco2.predict("llama3.1-8b", "h100", batch_size=1, prompt_tokens=512, gen_tokens=64, engine=engine)
    assert p.assumptions["engine"]["id"] == eid
    assert p.energy_j["total"] > 0 and p.latency_s["total"] > 0 and p.carbon_g["total"] > 0
    assert any(n.startswith(f"unseen engine {eid} ") and "extrapolated" in n for n in p.notes)
    base = llmco2.predict("llama3.1-8b", "h100", batch_size=1, prompt_tokens=512, gen_tokens=64, engine="vllm")
    assert 0.5 < p.energy_j["total"] / base.energy_j["total"] < 2.0


@pytest.mark.parametrize("engine", ["tgi", "llama-cpp", "ollama"])
def test_cli_predict_json(engine, capsys):
    code, out, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1",
                              "--prompt-tokens", "512", "--gen-tokens", "64", "--engine", engine, "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    eid = engine_id(engine)
    assert record["assumptions"]["engine"]["id"] == eid and record["extrapolated"] is True
    assert any(n.startswith(f"unseen engine {eid} ") for n in record["notes"])
