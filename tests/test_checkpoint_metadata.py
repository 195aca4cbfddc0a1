"""A checkpoint whose metadata was edited and re-hashed (so its digests match) is refused on
loading with one line, never a traceback, NaN or Infinity: the metadata's depth and types, the
feature scaler and a prediction of ordinary requests are checked; ``checkpoint inspect`` says so."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmco2.errors import InvalidInputError
from llmco2.file_checks import json_depth
from llmco2.prediction.checkpoint_file import read_checkpoint, write_checkpoint
from llmco2.prediction.inference import InferenceModel
from llmco2.prediction.loading import default_checkpoint_path
from tests.helpers import run_cli

SHIPPED = read_checkpoint(default_checkpoint_path())


def _deep(meta: dict[str, Any]) -> None:
    nested: list[Any] = []
    for _ in range(200):
        nested = [nested]
    meta["history"] = nested


def _scale(value: float) -> Callable[[dict[str, Any]], None]:
    def edit(meta: dict[str, Any]) -> None:
        meta["scaler"]["node_std"][0] = value
    return edit


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "scaler as text": lambda m: m.update(scaler="a string"),
    "deep array": _deep,
    "feature view as code": lambda m: m["config"].update(feature_view="__import__('os').system('true')"),
    "zero scale": _scale(0.0),
    "NaN scale": _scale(float("nan")),
    "head as a list": lambda m: m.update(head=[1, 2, 3]),
    "bias cut to one value": lambda m: m["head"]["target"].update(mean=[0.0]),
}


def _tampered(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    tensors, meta = SHIPPED
    meta = copy.deepcopy(meta)
    edit(meta)
    return write_checkpoint(tmp_path / "edited.safetensors", tensors, meta)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_edited_metadata_is_refused_on_loading(name: str, tmp_path: Path) -> None:
    path = _tampered(tmp_path, EDITS[name])
    with pytest.raises(InvalidInputError) as caught:
        InferenceModel.from_checkpoint(*read_checkpoint(path), path)
    assert "\n" not in str(caught.value) and caught.value.field == "checkpoint"


@pytest.mark.parametrize("name", ["NaN scale", "feature view as code", "deep array"])
def test_the_commands_refuse_it_with_one_line(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tampered(tmp_path, EDITS[name])
    code, out, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "64",
                              "--gen-tokens", "8", "--checkpoint", str(path), "--json"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--checkpoint" in err, err
    code, out, err = run_cli(["checkpoint", "inspect", str(path)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, (out, err)


def test_the_shipped_checkpoint_passes_and_inspect_says_it_predicts(capsys: pytest.CaptureFixture[str]) -> None:
    InferenceModel.from_checkpoint(*SHIPPED)
    code, out, _ = run_cli(["checkpoint", "inspect", str(default_checkpoint_path()), "--json"], capsys)
    assert code == 0 and json.loads(out)["predicts"] == "ok"


def test_json_depth() -> None:
    assert json_depth(1) == 0 and json_depth([]) == 1 and json_depth({"a": [1, {"b": 2}]}) == 3
