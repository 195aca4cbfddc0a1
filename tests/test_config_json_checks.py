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
