"""Training writes `last` and `best` after every epoch, and resume continues an interrupted run
to exactly the weights, losses and predictions of an uninterrupted one with the same seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import llmco2.training.train as train_module
from llmco2.data.dataset import energy_data
from llmco2.errors import InvalidInputError
from llmco2.prediction.checkpoint_file import read_checkpoint
from llmco2.prediction.inference import load_inference
from llmco2.training.train import GNNPredictor, TrainConfig
from tests.test_gnn import synthetic_table

CONFIG = dict(hidden=16, max_epochs=6, batch_size=64, patience=100, lr=3e-3, seed=3, dropout=0.1)


@pytest.fixture(scope="module")
def parts():
    data = energy_data(synthetic_table(40))
    n = len(data.energy_j)
    return data.rows(np.arange(0, int(n * 0.8))), data.rows(np.arange(int(n * 0.8), n))


@pytest.fixture(scope="module")
def uninterrupted(parts, tmp_path_factory) -> tuple[GNNPredictor, Path]:
    folder = tmp_path_factory.mktemp("whole")
    model = GNNPredictor(TrainConfig(**CONFIG))
    model.fit(*parts, checkpoint_dir=folder)
    return model, folder


def _stop_after_epoch(monkeypatch, stop: int) -> None:
    real = train_module.save_epoch

    def patched(folder, predictor, opt, rng, epoch, *args, **kwargs):
        real(folder, predictor, opt, rng, epoch, *args, **kwargs)
        if epoch == stop:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "save_epoch", patched)


def test_every_epoch_writes_last_and_best(uninterrupted, parts) -> None:
    model, folder = uninterrupted
    assert sorted(p.name for p in folder.iterdir()) == ["best.safetensors", "last.safetensors"]
    last = GNNPredictor.load(folder / "last.safetensors")
    best = GNNPredictor.load(folder / "best.safetensors")
    _, meta = read_checkpoint(folder / "last.safetensors")
    assert meta["history"]["train_loss"] == model.history.train_loss  # written after the final epoch
    assert meta["training"]["epoch"] == CONFIG["max_epochs"] - 1
    val = parts[1]
    for ckpt in (last, best):
        assert np.all(np.isfinite(ckpt.predict_rows(val)))
    assert np.all(np.isfinite(load_inference(folder / "last.safetensors").predict(val.items).energy_j))


@pytest.mark.parametrize("stop", [0, 3])
def test_resume_reaches_the_uninterrupted_result(stop: int, uninterrupted, parts, tmp_path: Path, monkeypatch) -> None:
    reference, _ = uninterrupted
    with monkeypatch.context() as m:
        _stop_after_epoch(m, stop)
        with pytest.raises(KeyboardInterrupt):
            GNNPredictor(TrainConfig(**CONFIG)).fit(*parts, checkpoint_dir=tmp_path)
    resumed = GNNPredictor(TrainConfig(**CONFIG))
    resumed.fit(*parts, checkpoint_dir=tmp_path, resume=True)
    for name, value in reference.net.state_dict().items():
        assert torch.equal(value, resumed.net.state_dict()[name]), name
    assert resumed.history.train_loss == reference.history.train_loss
    assert resumed.history.val_loss == reference.history.val_loss
    assert resumed.history.best_epoch == reference.history.best_epoch
    np.testing.assert_array_equal(resumed.predict_rows(parts[1]), reference.predict_rows(parts[1]))


def test_resume_refuses_other_settings_or_a_missing_checkpoint(uninterrupted, parts, tmp_path: Path) -> None:
    _, folder = uninterrupted
    with pytest.raises(InvalidInputError, match="other settings or data"):
        GNNPredictor(TrainConfig(**{**CONFIG, "lr": 1e-3})).fit(*parts, checkpoint_dir=folder, resume=True)
    with pytest.raises(InvalidInputError, match="no .*last.safetensors to resume from"):
        GNNPredictor(TrainConfig(**CONFIG)).fit(*parts, checkpoint_dir=tmp_path / "empty", resume=True)
