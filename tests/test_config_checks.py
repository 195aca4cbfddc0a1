"""Hydra configs and training settings are checked, with one line, before any data loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from llmco2.config_checks import check_experiment_config
from llmco2.data.sample_app import run as run_sample_app
from llmco2.errors import InvalidInputError
from llmco2.training.experiment import CONF_DIR, train
from llmco2.training.train import TrainConfig


def _compose(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


@pytest.mark.parametrize("override, mention", [
    ("trainer.max_epochs=five", "trainer.max_epochs: must be an integer"),
    ("trainer.max_epochs=2.5", "trainer.max_epochs"),
    ("trainer.lr=-1", "trainer.lr: must be a number"),
    ("trainer.lr=nan", "trainer.lr"),
    ("trainer.batch_size=true", "trainer.batch_size"),
    ("seed=1.5", "seed"),
    ("model.predictor.config.dropout=1.5", "model.predictor.config.dropout"),
])
def test_bad_experiment_settings_fail_before_data_loads(override: str, mention: str, tmp_path: Path) -> None:
    cfg = _compose("train", [override])
    out = tmp_path / "run"
    with pytest.raises(InvalidInputError, match=mention.replace(".", r"\.")):
        train(cfg, out)
    assert not out.exists()  # nothing written, no data read


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_shipped_experiment_configs_pass(experiment: str) -> None:
    overrides = [f"+experiment={experiment}"] + (["split.holdout=x"] if "transfer" in experiment else [])
    check_experiment_config(_compose("train", overrides))


@pytest.mark.parametrize("override", ["n=3.5", "n=0", "n=five", "seed=-1"])
def test_bad_sample_settings(override: str, tmp_path: Path) -> None:
    cfg = _compose("sample", [override, f"out={tmp_path / 's.csv'}"])
    with pytest.raises(InvalidInputError, match=override.split("=")[0]):
        run_sample_app(cfg)
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("kwargs", [{"max_epochs": "five"}, {"lr": -1.0}, {"hidden": 2.5}, {"patience": True},
                                    {"batch_size": 0}])
def test_train_config_refuses_wrong_types_and_ranges(kwargs: dict) -> None:
    with pytest.raises(InvalidInputError, match=next(iter(kwargs))):
        TrainConfig(**kwargs)


def test_a_held_out_device_without_a_usable_energy_is_one_line(tmp_path: Path) -> None:
    """Leave one device out where the held-out device's rows carry no energy: exit with the reason, not a traceback
    in the metrics."""
    import pandas as pd

    from llmco2.data.schema import conform, write_table

    rows = [{"source": "llmco2", "source_row": i + 1, "device": device, "num_devices": 1, "engine": "vllm",
             "model": "llama3.1-8b", "batch_size": 1, "prompt_tokens": 128 * (i + 1), "generated_tokens": 64,
             "phase": "total", "level": "request", "energy_j": energy, "latency_s": 1.0}
            for i, (device, energy) in enumerate([("a40", 100.0)] * 6 + [("h100-sxm", None)] * 3)]
    path = tmp_path / "rows.csv"
    write_table(conform(pd.DataFrame(rows)), path)
    cfg = _compose("train", ["split=leave_device", "split.holdout=h100-sxm", "data.sources=[{format:canonical,path:'" + str(path) + "'}]"])
    with pytest.raises(InvalidInputError, match="leaves no test row with a usable energy.*no positive measured energy"):
        train(cfg, tmp_path / "run")
