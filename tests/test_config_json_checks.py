"""A config.json that says something ambiguous is refused, naming the key: architectures given as
a string, a key given twice, an expert count of 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli as run

BASE = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096}


def _predict(path: Path, capsys) -> tuple[int, str]:
    code, _, err = run(["predict", "--model", str(path), "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "10",
                        "--gen-tokens", "5", "--json"], capsys)
    return code, err


@pytest.mark.parametrize(("text", "mention"), [
    (json.dumps({**BASE, "architectures": "LlamaForCausalLM"}), "architectures must be a list"),
    (json.dumps(BASE)[:-1] + ', "hidden_size": 2048}', "gives the key 'hidden_size' twice"),
    (json.dumps({**BASE, "model_type": "mixtral", "num_local_experts": 0, "num_experts_per_tok": 2}), "at least 1, got 0"),
])
def test_an_ambiguous_config_is_refused(text: str, mention: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    code, err = _predict(path, capsys)
    assert code == 2 and mention in err and len(err.strip().splitlines()) == 1


def test_a_plain_config_still_loads(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "architectures": ["LlamaForCausalLM"]}))
    assert _predict(path, capsys)[0] == 0


# -- the context length: read from any key HF configs use, never invented ------------------------
def _without_context(**extra: object) -> dict[str, object]:
    cfg = {k: v for k, v in BASE.items() if k != "max_position_embeddings"}
    return {**cfg, **extra}


@pytest.mark.parametrize("key", ["max_sequence_length", "seq_length", "n_positions", "n_ctx", "max_seq_len",
                                 "max_seq_length", "model_max_length"])
def test_the_context_is_read_from_other_keys(key: str) -> None:
    from llmco2.specs import arch_from_hf_config

    arch = arch_from_hf_config(_without_context(**{key: 8192, "sliding_window": 512}))
    assert arch.max_context == 8192 and not arch.approximations


def test_a_config_without_a_context_accepts_any_length_and_says_so(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_without_context(sliding_window=1024)))  # a window is not a context
    code, out, err = run(["predict", "--model", str(path), "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "100000",
                          "--gen-tokens", "5", "--json"], capsys)
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("context length unknown: config.json gives no max_position_embeddings") for n in notes), notes


def test_a_stated_context_is_still_enforced(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_without_context(seq_length=8192)))
    code, _, err = run(["predict", "--model", str(path), "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "9000",
                        "--gen-tokens", "5"], capsys)
    assert code == 2 and "exceeds the 8192-token context" in err and "2048" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_no_limit_placeholder_of_model_max_length_is_not_a_context() -> None:
    from llmco2.specs import arch_from_hf_config
    from llmco2.specs.limits import MAX_CONTEXT

    arch = arch_from_hf_config(_without_context(model_max_length=int(1e30)))
    assert arch.max_context == MAX_CONTEXT and arch.approximations[0].startswith("context length unknown")


def test_learned_positions_need_their_table_size(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12, "vocab_size": 50257}))
    code, err = _predict(path, capsys)
    assert code == 2 and "gives no max_position_embeddings" in err and len(err.strip().splitlines()) == 1


def test_serving_a_config_without_a_context(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_without_context()))
    code, out, err = run(["predict", "--model", str(path), "--gpu", "h100", "--serving", "--rate", "2",
                          "--serving-requests", "50", "--prompt-tokens", "500", "--gen-tokens", "50", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)
