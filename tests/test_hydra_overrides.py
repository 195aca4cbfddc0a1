"""Bad Hydra overrides get exit code 2 and one line naming the override and what is valid there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmco2.config_checks import check_experiment_config
from llmco2.data import sample_app
from llmco2.errors import InvalidInputError
from llmco2.hydra_app import check_command_line
from llmco2.measure import sweep_app
from llmco2.training.experiment import CONF_DIR

ROOT = Path(__file__).resolve().parents[1]
TRAINER = "the top level has data, split, model, trainer, name, seed, out_dir, resume"


def _train(argv: list[str]) -> None:
    check_command_line(argv, CONF_DIR, "train", check_experiment_config)


@pytest.mark.parametrize("argv, message", [
    (["foo=1"], f"foo=1: no key foo to set; {TRAINER} (+foo=1 adds it)"),
    (["trainer.nonexistent=3"], "trainer.nonexistent=3: no key trainer.nonexistent to set; trainer has lr, batch_size, "
                                "max_epochs, patience, threads (+trainer.nonexistent=3 adds it)"),
    (["trainer.max_epoch=3"], "did you mean trainer.max_epochs=3?"),
    (["lr=-1"], f"lr=-1: no key lr to set; did you mean trainer.lr=-1? ({TRAINER})"),
    (["lr="], "lr=: no key lr to set; did you mean trainer.lr?"),
    (["sed=1"], "did you mean seed=1?"),
    (["trainer.lr="], "trainer.lr: must be a number from 1e-12 to 10, got ''"),
    (["trainer.max_epochs=five"], "trainer.max_epochs: must be an integer"),
    (["trainer=gpux"], "trainer=gpux: trainer has no config 'gpux'; choose one of default"),
    (["model=gbtt"], "model=gbtt: model has no config 'gbtt'; did you mean model=gbt? (one of deepen, gbt, llmcarbon,"),
    (["+experiment=nope"], "+experiment=nope: experiment has no config 'nope'; choose one of focused_loop, leave_engine_out"),
    (["experiment=nope"], "experiment=nope: the defaults have no experiment to replace; add one with +experiment=NAME, "
                          "one of focused_loop,"),
    (["experiment=quick"], "experiment=quick: the defaults have no experiment to replace; add one with +experiment=quick"),
    (["n==3"], "'n==3' is not an override: one '=' between key and value (n=3)"),
    (["seed"], "'seed' is not an override: write KEY=VALUE"),
    (["model=[gbt"], "'model=[gbt' is not an override Hydra can read"),
    (["+seed=1"], "+seed=1: seed exists already; write seed=1 to change it"),
    (["~sed"], "~sed: no key sed to delete; did you mean ~seed?"),
    (["model=gbt,llmcarbon"], "model=gbt,llmcarbon: a sweep runs with --multirun (-m); for a list write model=[gbt,llmcarbon]"),
    (["-m", "model=gbt,gbtx"], "model=gbtx: model has no config 'gbtx'; did you mean model=gbt?"),
    (["-m", "trainer.lr=0.1,-1"], "trainer.lr: must be a number"),
    (["-m", "hydra.run.dir=a,b"], "hydra.run.dir=a,b: Hydra's own settings (hydra.*) cannot be swept"),
    (["hydra.run.dirr=x"], "did you mean hydra.run.dir=x?"),
    (["verbose=true"], "did you mean hydra.verbose=true?"),
    (["hydra/launcher=submitit_slurm"], "hydra/launcher has no config 'submitit_slurm'; choose one of basic (a Hydra plugin's"),
    (["+experiment=table3_co2meter", "model=gbtx"], "did you mean model=gbt?"),
])
def test_bad_train_overrides_are_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        _train(argv)
    text = str(info.value)
    assert message in text and "\n" not in text


@pytest.mark.parametrize("argv", [
    [], ["model=gbt", "trainer.lr=0.01"], ["+new_key=1"], ["++seed=3"], ["+trainer.warmup=5"], ["~resume"],
    ["+experiment=quick"], ["+experiment=table3_co2meter"], ["+experiment=table3_co2meter", "model=gbt,llmcarbon"],
    ["-m", "model=gbt,llmcarbon", "trainer.lr=0.1,0.01"], ["-m", "seed=range(0,3)"], ["hydra.run.dir=/tmp/x"],
    ["hydra/job_logging=disabled"], ["--cfg", "job", "model=gbt"], ["--help"], ["model=gbt", "trainer.lr=0.001", "name=x y"],
])
def test_valid_train_command_lines_pass(argv: list[str]) -> None:
    _train(argv)


def test_hydra_full_error_leaves_the_command_line_to_hydra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    _train(["foo=1"])


def test_other_apps(tmp_path: Path) -> None:
    ok = [f"out={tmp_path / 's.csv'}"]
    check_command_line(["sampler=random", "n=10", *ok], sample_app.CONF_DIR, "sample", sample_app.check)
    check_command_line(["+experiment=focused_loop", "loop.max_rounds=5"], sample_app.CONF_DIR, "sample", sample_app.check)
    for argv, message in ((["sampler=rando", *ok], "did you mean sampler=random?"), (["task=nope", *ok], "unknown task 'nope'"),
                          (["n=3.5", *ok], "n: must be an integer"), (["loop.max_rounds=5"], "no key loop.max_rounds")):
        with pytest.raises(InvalidInputError, match=message.replace("?", r"\?")):
            check_command_line(argv, sample_app.CONF_DIR, "sample", sample_app.check)
    conf = ROOT / "conf"
    check_command_line(["-m", "shard=range(0,2)", "num_shards=2", "configs=c.csv", "out=o.csv"], conf, "measure")
    for argv, message in ((["repeat=3"], "did you mean repeats=3?"),
                          (["repeats=five"], "repeats=five: Value 'five' of type 'str' could not be converted to Integer")):
        with pytest.raises(InvalidInputError, match=message):
            check_command_line(argv, conf, "measure")
    with pytest.raises(InvalidInputError, match="no key foo"):  # the schema alone, as installed without conf/
        check_command_line(["foo=1"], None, "measure_schema")


def test_entry_point_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for main, argv in ((sample_app.main, ["sampler=randm", "out=s.csv"]), (sweep_app.main, ["foo=1"])):
        monkeypatch.setattr(sys, "argv", ["app", *argv])
        with pytest.raises(SystemExit) as info:
            main()
        err = capsys.readouterr().err
        assert info.value.code == 2 and err.count("\n") == 1 and err.startswith("llmco2: error: "), err
    assert not list(tmp_path.iterdir())  # Hydra never started: no run folder


def test_experiment_command_as_a_user_runs_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "llmco2.training.experiment", "trainer.max_epoch=3"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("llmco2: error: trainer.max_epoch=3: no key trainer.max_epoch to set; did you mean "
                           "trainer.max_epochs=3? (trainer has lr, batch_size, max_epochs, patience, threads)\n")
    assert not list(tmp_path.iterdir())
