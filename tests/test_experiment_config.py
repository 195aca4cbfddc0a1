"""The Hydra configs compose, every model instantiates, and experiment override files resolve."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from llmco2.training.experiment import CONF_DIR

MODELS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))


@pytest.mark.parametrize("model", MODELS)
def test_every_model_config_instantiates(model: str) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"model={model}", "trainer.max_epochs=1"])
    predictor = instantiate(cfg.model.predictor)
    assert hasattr(predictor, "fit") and hasattr(predictor, "predict_rows")
    assert cfg.model.name == model
    if hasattr(predictor, "config"):
        assert predictor.config.max_epochs == 1 and predictor.config.lr == pytest.approx(1e-3)


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_experiment_files_compose(experiment: str) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"+experiment={experiment}", "split.holdout=x"]
                      if "transfer" in experiment else [f"+experiment={experiment}"])
    assert cfg.data.sources and cfg.split.kind


def test_data_paths_resolve_to_the_shared_folder(shared_data: Path) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["data=all"])
    for src in cfg.data.sources:
        assert Path(src.path).is_file() and str(shared_data) in src.path
