"""Checkpoints cannot carry code: pickle payloads are never run, damaged files are exit 2 with one
line, old-format files are converted only on --trust, baselines load only their allowed types."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from llmco2.errors import InvalidInputError
from llmco2.prediction.checkpoint_file import convert_legacy, read_checkpoint, write_checkpoint
from llmco2.prediction.inference import load_inference
from llmco2.training.train import GNNPredictor
from tests.fast_predict_support import assert_same, mixed_items, train_small_checkpoint
from tests.helpers import run_cli


class Payload:
    """Unpickling this creates the folder ``marker``: proof that the file's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return train_small_checkpoint(tmp_path_factory.mktemp("safe"))


def _commands(path: Path, data: Path) -> list[list[str]]:
    single = ["--model", "qwen2-0.5b", "--gpu", "a100-40gb", "--batch-size", "1", "--prompt-tokens", "64", "--gen-tokens", "8"]
    return [
        ["predict", *single, "--checkpoint", str(path)],
        ["predict", *single, "--checkpoint", str(path), "--json"],
        ["predict", "--requests", str(data), "--out", str(data.with_name("out.csv")), "--checkpoint", str(path)],
        ["evaluate", "--data", str(data), "--format", "canonical", "--checkpoint", str(path)],
        ["report", "compare", *single[:2], *single[4:], "--gpus", "a100-40gb", "-o", str(data.with_name("c.png")),
         "--checkpoint", str(path)],
        ["checkpoint", "inspect", str(path)],
    ]


def _requests_file(folder: Path) -> Path:
    path = folder / "requests.csv"
    path.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\nqwen2-0.5b,a100-40gb,1,1,64,8\n")
    return path


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_pickle_payload_never_runs(how: str, tmp_path: Path, capsys) -> None:
    marker = tmp_path / "ran"
    bad = tmp_path / "evil.pt"
    state = {"kind": "llmco2-gnn", "feature_schema_version": 2, "payload": Payload(marker)}
    if how == "pickle":
        bad.write_bytes(pickle.dumps(state))
    else:
        torch.save(state, bad)
    data = _requests_file(tmp_path)
    for args in _commands(bad, data):
        load_inference.cache_clear()
        code, out, err = run_cli(args, capsys)
        assert code == 2, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and "pickle-based checkpoint" in err and "--trust" in err
        assert not marker.exists(), f"the payload ran under {args[0]}"
    with pytest.raises(InvalidInputError, match="pickle-based"):
        GNNPredictor.load(bad)
    assert not marker.exists()


def test_conversion_needs_trust_and_keeps_predictions(checkpoint: Path, tmp_path: Path, capsys) -> None:
    tensors, meta = read_checkpoint(checkpoint)
    old = tmp_path / "old.pt"
    meta = {**meta, "format": 1, "state_dict": {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}}
    torch.save(meta, old)
    code, _, err = run_cli(["checkpoint", "convert", str(old)], capsys)
    assert code == 2 and "--trust" in err and not old.with_suffix(".safetensors").exists()
    code, out, _ = run_cli(["checkpoint", "convert", str(old), "--trust"], capsys)
    new = old.with_suffix(".safetensors")
    assert code == 0 and new.is_file() and str(new) in out
    assert read_checkpoint(new)[1]["format"] == 2
    items = mixed_items()
    assert_same(load_inference(new).predict(items), load_inference(checkpoint).predict(items))
    with pytest.raises(InvalidInputError, match="overwrite"):
        convert_legacy(old, old, trust=True)


def _data_offset(path: Path) -> int:
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


def test_corrupted_weights_are_refused_not_nan(checkpoint: Path, tmp_path: Path, capsys) -> None:
    blob = bytearray(checkpoint.read_bytes())
    start = _data_offset(checkpoint)
    blob[start + 100:start + 4196] = os.urandom(4096)  # a few KB of garbage in the tensor data
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(blob))
    for args in _commands(bad, _requests_file(tmp_path)):
        load_inference.cache_clear()
        code, out, err = run_cli(args, capsys)
        assert code == 2 and "corrupted" in err and len(err.strip().splitlines()) == 1, (args, err)
        assert "nan" not in out.lower()


def test_edited_metadata_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    blob = checkpoint.read_bytes()
    i = blob.index(b"llmco2-gnn")
    bad = tmp_path / "meta.safetensors"
    bad.write_bytes(blob[:i] + b"llmco2-gnX" + blob[i + 10:])  # same length, header still JSON
    with pytest.raises(InvalidInputError, match="corrupted"):
        read_checkpoint(bad)


def test_non_finite_weights_with_a_valid_digest_are_refused(checkpoint: Path, tmp_path: Path) -> None:
    tensors, meta = read_checkpoint(checkpoint)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].copy()
    tensors[name].flat[0] = np.nan
    bad = write_checkpoint(tmp_path / "nan.safetensors", tensors, meta)
    with pytest.raises(InvalidInputError, match="not finite"):
        read_checkpoint(bad)


@pytest.mark.parametrize("content", [b"", b"abc", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}", b"\xff" * 64])
def test_other_files_are_one_line_errors(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(content)
    with pytest.raises(InvalidInputError, match="not an llmco2 checkpoint"):
        read_checkpoint(path)


def test_directory_and_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="is a directory"):
        read_checkpoint(tmp_path)
    with pytest.raises(InvalidInputError, match="no such checkpoint"):
        read_checkpoint(tmp_path / "none.safetensors")


def test_training_writes_the_safe_format(checkpoint: Path) -> None:
    blob = checkpoint.read_bytes()
    assert checkpoint.suffix == ".safetensors" and blob[8:9] == b"{" and b"llmco2-gnn" in blob[:8 + int.from_bytes(blob[:8], "little")]
    assert b"torch" not in blob and not blob.startswith(b"PK")  # no pickle, no zip archive
    assert GNNPredictor.load(checkpoint).net is not None


def test_baseline_checkpoints_refuse_pickles_and_foreign_types(tmp_path: Path) -> None:
    import skops.io as sio

    from llmco2.training.baselines import BASELINES

    marker = tmp_path / "ran"
    bad = tmp_path / "gbt.skops"
    bad.write_bytes(pickle.dumps({"kind": "gbt", "params": {}, "model": Payload(marker)}))
    with pytest.raises(InvalidInputError, match="not a gbt checkpoint"):
        BASELINES["gbt"].load(bad)
    foreign = tmp_path / "foreign.skops"
    from sklearn.ensemble import RandomForestRegressor

    forest = RandomForestRegressor(n_estimators=2).fit(np.random.default_rng(0).random((20, 3)), np.arange(20.0))
    sio.dump({"kind": "gbt", "params": {}, "model": forest}, foreign)  # a forest's Tree is not a gbt type
    with pytest.raises(InvalidInputError, match="never contains"):
        BASELINES["gbt"].load(foreign)
    assert not marker.exists()


def test_converting_a_missing_checkpoint_names_the_path_it_was_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``convert_legacy``'s missing source names its parameter ``src``; ``llmco2 checkpoint convert`` has no
    --checkpoint flag, so the command line names its positional ``path``."""
    from llmco2.cli import main
    from llmco2.prediction.checkpoint_file import convert_legacy

    with pytest.raises(InvalidInputError, match="no such checkpoint") as info:
        convert_legacy(tmp_path / "old.pt", trust=True)
    assert info.value.field == "src"
    try:
        code = main(["checkpoint", "convert", str(tmp_path / "old.pt")])
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("llmco2: error: path: no such checkpoint") and "--checkpoint" not in err[0]
