"""Architecture families and the wider interval of a family the training rows lack."""

from __future__ import annotations

import pytest

from llmco2.analytic.table import RequestTable
from llmco2.prediction.domain_notes import domain_families, domain_note_lists, domain_notes
from llmco2.specs import Request, get_gpu, model_catalog
from llmco2.specs.families import architecture_family


@pytest.mark.parametrize("model, family", [
    ("llama3.1-8b", "gqa/gated/rope"), ("bloom-7b1", "mha/plain/alibi"), ("falcon-7b", "mqa/plain/rope/parallel"),
    ("deepseek-v3", "mla/moe/rope"), ("nemotron-nano-12b-v2", "gqa+mamba/plain/rope"), ("qwen3-next-80b-a3b", "gqa+linear/moe/rope"),
])
def test_family_names_attention_mlp_and_position(model, family):
    assert architecture_family(model_catalog().get(model)) == family


def _items(models):
    gpu = get_gpu("h100-sxm")
    return [(model_catalog().get(m), Request(batch_size=1, prompt_tokens=100, generated_tokens=10, engine="hf"), gpu) for m in models]


def test_unseen_family_is_noted_on_both_paths_and_seen_one_is_not():
    domain = {"models": ["llama3-8b", "mistral-7b"]}  # a checkpoint without "families": derived from its models
    assert domain_families(domain) == {"gqa/gated/rope", "gqa+window/gated/rope"}
    items = _items(["llama3.1-8b", "falcon-7b", "llama3.1-8b", "bloom-7b1"])
    lists = domain_note_lists(domain, items)
    assert lists == domain_note_lists(domain, RequestTable.from_items(items))
    assert lists[0] == [] and lists[2] == []
    assert "unseen architecture family mqa/plain/rope/parallel" in lists[1][0]
    assert "unseen architecture family mha/plain/alibi" in lists[3][0]
    assert domain_notes(domain, items[1]) == lists[1]
    assert domain_notes({"families": ["mqa/plain/rope/parallel"]}, items[1]) == []


def test_shipped_checkpoint_widens_the_interval_of_an_unseen_family():
    from llmco2.carbon.footprint import predict_footprint

    fp = predict_footprint(_items(["llama3.1-8b", "gpt-j-6b"]))  # GPT-J (parallel attention and MLP, MHA): no training row
    rec = [fp.record(i) for i in range(2)]
    width = [r["energy_j_interval"]["total"][1] / r["energy_j_interval"]["total"][0] for r in rec]
    assert not rec[0]["notes"] and any("unseen architecture family" in n for n in rec[1]["notes"])
    assert width[1] > width[0]
