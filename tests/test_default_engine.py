"""With default flags a catalog model on a GPU the fit has seen is not an extrapolation: the default
engine (vllm) is predicted on data-centre GPUs by the step physics with constants fitted for it, so
no "unseen engine" note is written and the interval is the in-domain one. An engine the step
physics has no constants for, and a GPU the fit has not seen, are still marked."""

from __future__ import annotations

import llmco2
from llmco2.prediction.loading import load_predictor

ARGS = {"prompt_tokens": 512, "generated_tokens": 64}


def test_default_engine_on_a_seen_gpu_is_not_an_extrapolation() -> None:
    head = load_predictor().head
    assert "vllm" not in head.domain["engines"] and "vllm" in head.step.params.engines  # the premise
    p = llmco2.predict("llama3.1-8b", "a100-80gb", **ARGS)
    assert p.notes == () and p.record["extrapolated"] is False


def test_the_in_domain_interval_is_narrower_than_the_extrapolated_one() -> None:
    seen = llmco2.predict("llama3.1-8b", "h100", **ARGS)
    unseen_engine = llmco2.predict("llama3.1-8b", "h100", **ARGS, engine="tgi")
    width = {name: p.interval["total"][1] / p.interval["total"][0] for name, p in (("seen", seen), ("tgi", unseen_engine))}
    assert width["seen"] < width["tgi"]


def test_unfitted_engines_and_unseen_gpus_are_still_marked() -> None:
    assert any("unseen engine tgi" in n for n in llmco2.predict("llama3.1-8b", "h100", **ARGS, engine="tgi").notes)
    notes = llmco2.predict("llama3.1-8b", "b200", **ARGS).notes
    assert any("unseen GPU b200" in n for n in notes) and not any("unseen engine" in n for n in notes)
