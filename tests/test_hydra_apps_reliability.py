"""The Hydra apps under hostile input: the sample app streams as ``llmco2 sample`` does and refuses
a huge ``n`` up front; zero or negative counts and a run folder under a file are one line and exit
2; Ctrl-C or SIGTERM stop training (and sampling, and a sweep) with one line, exit 130 or 143, and
the training state of the last finished epoch, from which the printed command resumes."""

from __future__ import annotations

import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from llmco2.config_checks import MAX_SAMPLE_ROWS, check_experiment_config
from llmco2.data import sample_app
from llmco2.errors import InvalidInputError, Stopped, Terminated
from llmco2.hydra_app import check_command_line
from llmco2.measure import sweep_app
from llmco2.prediction.checkpoint_file import read_checkpoint
from llmco2.training.experiment import CONF_DIR
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _sample_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="sample", overrides=overrides)


# -- the sample app streams, as llmco2 sample does --------------------------------------------------
@pytest.mark.parametrize("n", [120, 300])  # one block, then three blocks of 120 (the last one short)
def test_sample_app_writes_what_llmco2_sample_writes(n: int, tmp_path: Path, capsys, shared_data, monkeypatch) -> None:
    import llmco2.data.sampling.samplers as samplers

    monkeypatch.setattr(samplers, "SAMPLE_BLOCK", 120)
    drawn: list[int] = []
    real = samplers.Sampler.sample

    def spy(self, k: int, seed: int = 0):
        drawn.append(int(k))
        return real(self, k, seed)

    monkeypatch.setattr(samplers.Sampler, "sample", spy)
    cli = tmp_path / "cli.csv"
    code, _, err = run_cli(["sample", "--n", str(n), "--seed", "7", "--out", str(cli)], capsys)
    assert code == 0, err
    app = tmp_path / "sub" / "app.csv"  # the app makes a missing folder
    metrics = sample_app.run(_sample_cfg([f"n={n}", "seed=7", f"out={app}"]))
    assert app.read_bytes() == cli.read_bytes()
    assert max(drawn) <= 120  # never the whole sample at once
    frame = pd.read_csv(app)
    assert metrics["rows"] == n and metrics["models"] == frame["model"].nunique()
    assert metrics["by_gpu"] == {str(k): int(v) for k, v in frame["gpu"].value_counts().sort_index().items()}
    assert metrics["by_num_gpus"] == {str(k): int(v) for k, v in frame["num_gpus"].value_counts().sort_index().items()}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["app.csv", "cli.csv", "sub"]  # no temporary file left


def test_random_samples_are_the_same_with_the_bounds_llmco2_sample_takes_from_the_traces(tmp_path: Path, capsys,
                                                                                         shared_data) -> None:
    from llmco2.data.azure import load_trace

    traces = [load_trace(t) for t in ("code", "conv")]
    bounds = [f"sampler.max_prompt={max(int(t['prompt_tokens'].max()) for t in traces)}",
              f"sampler.max_generated={max(int(t['generated_tokens'].max()) for t in traces)}"]
    cli, app = tmp_path / "cli.csv", tmp_path / "app.csv"
    assert run_cli(["sample", "--strategy", "random", "--n", "200", "--seed", "3", "--out", str(cli)], capsys)[0] == 0
    sample_app.run(_sample_cfg(["sampler=random", "n=200", "seed=3", f"out={app}", *bounds]))
    assert app.read_bytes() == cli.read_bytes()


def test_a_huge_n_is_refused_up_front_by_both(tmp_path: Path, capsys, monkeypatch) -> None:
    import llmco2.data.sampling.samplers as samplers

    def never(*args, **kwargs):
        raise AssertionError("nothing may be drawn")

    monkeypatch.setattr(samplers.Sampler, "sample_blocks", never)
    monkeypatch.setattr(samplers.Sampler, "sample", never)
    huge = MAX_SAMPLE_ROWS + 1
    out = tmp_path / "s.csv"
    with pytest.raises(InvalidInputError, match=f"n: must be an integer from 1 to {MAX_SAMPLE_ROWS:,}"):
        check_command_line([f"n={huge}", f"out={out}"], sample_app.CONF_DIR, "sample", sample_app.check)
    with pytest.raises(InvalidInputError, match="n: must be"):
        sample_app.run(_sample_cfg([f"n={huge}", f"out={out}"]))
    code, _, err = run_cli(["sample", "--n", str(huge), "--out", str(out)], capsys)
    assert code == 2 and err == f"llmco2: error: --n: must be an integer from 1 to {MAX_SAMPLE_ROWS:,}, got {huge}\n"
    assert not any(tmp_path.iterdir())


# -- counts and run folders: one line, exit 2 ---------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["data=datacentre_lodo", "data.sources.0.max_rows=-1"], "data.sources.0.max_rows: must be an integer from 1"),
    (["data=datacentre_lodo", "data.sources.0.max_rows=0"], "data.sources.0.max_rows: must be an integer from 1"),
    (["+data.sources.0.max_rows=-5"], "data.sources.0.max_rows: must be an integer from 1"),
    (["model=gbt", "model.predictor.max_iter=0"], "model.predictor.max_iter: must be an integer from 1"),
    (["model=deepen", "model.predictor.n_estimators=-1"], "model.predictor.n_estimators: must be an integer from 1"),
])
def test_bad_train_counts_name_their_key(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_command_line(argv, CONF_DIR, "train", check_experiment_config)


@pytest.mark.parametrize("argv, message", [
    (["sampler.max_rounds=0"], "sampler.max_rounds: must be an integer from 1"),
    (["sampler.variants_per_model=-1"], "sampler.variants_per_model: must be >= 0, got -1"),
    (["sampler=random", "sampler.max_batch=-1"], "sampler.max_batch: must be >= 1, got -1"),
    (["+experiment=focused_loop", "loop.max_rounds=-1"], "loop.max_rounds: must be an integer from 0"),
    (["+experiment=focused_loop", "loop.b=0"], "loop.b: must be an integer from 1"),
])
def test_bad_sample_counts_name_their_key(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        check_command_line([*argv, f"out={tmp_path / 's.csv'}"], sample_app.CONF_DIR, "sample", sample_app.check)
    assert "\n" not in str(info.value)


def test_a_run_folder_or_output_under_a_file_is_refused(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    message = f"hydra.run.dir: cannot write {afile}/sub: {afile} is a file, not a folder"
    with pytest.raises(InvalidInputError, match=message):
        check_command_line([f"hydra.run.dir={afile}/sub"], CONF_DIR, "train", check_experiment_config)
    with pytest.raises(InvalidInputError, match="hydra.sweep.dir: cannot write"):
        check_command_line(["-m", "seed=1,2", f"hydra.sweep.dir={afile}/multi"], CONF_DIR, "train", check_experiment_config)
    with pytest.raises(InvalidInputError, match="out: cannot write"):
        check_command_line([f"out={afile}/s.csv"], sample_app.CONF_DIR, "sample", sample_app.check)


def test_the_app_as_a_user_runs_it_refuses_a_run_folder_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "llmco2.data.sample_app", "n=10", f"out={tmp_path / 's.csv'}",
                           f"hydra.run.dir={tmp_path / 'afile' / 'sub'}"], capture_output=True, text=True, cwd=tmp_path,
                          env=ENV, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"llmco2: error: hydra.run.dir: cannot write {tmp_path}/afile/sub: {tmp_path}/afile is a file, "
                           "not a folder\n")


# -- interrupts ---------------------------------------------------------------------------------------
def _default_sigint() -> None:
    """Give the child Ctrl-C's default action, as a terminal does: a test run started in the background
    by a shell without job control inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(module: str, args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=ENV, start_new_session=True, preexec_fn=_default_sigint)


def _wait_for(path_found, proc: subprocess.Popen[str], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path_found() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()


def test_ctrl_c_during_training_keeps_the_last_epoch_and_the_printed_command_resumes(tmp_path: Path, shared_data) -> None:
    """Interrupted after its first epoch, a run keeps that epoch and prints the command that resumes
    it; the printed command continues the same history (interrupted again once it has gone further).
    The epoch limit is far out of reach, so no machine is fast enough to finish before the signal."""
    rows = tmp_path / "train_trace.csv"  # 300 CO2-Meter rows (the file has no header): the run is mostly torch starting
    lines = (shared_data / "co2meter" / "train_trace.csv").read_text().splitlines(keepends=True)
    rows.write_text("".join(random.Random(0).sample(lines, 300)))
    run = tmp_path / "run"
    args = ["+experiment=quick", f"data.sources=[{{format: co2meter, path: '{rows}'}}]", "model.predictor.config.hidden=8",
            "trainer.batch_size=64", "trainer.max_epochs=1000000", "trainer.patience=1000000", f"hydra.run.dir={run}"]
    last = run / "checkpoints" / "last.safetensors"
    proc = _start("llmco2.training.experiment", args, tmp_path)
    _wait_for(last.is_file, proc)  # the first epoch is done
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    _, meta = read_checkpoint(last)
    done = meta["training"]["epoch"] + 1
    assert done >= 1 and len(meta["history"]["train_loss"]) == done
    prefix = f"llmco2: interrupted; the training state after {done} epoch{'s' if done > 1 else ''} is kept in {last}; resume with: "
    assert err.startswith(prefix), err
    command = shlex.split(err[len(prefix):])
    assert command[:3] == ["python", "-m", "llmco2.training.experiment"]
    assert command[3:] == [*args[:-1], f"hydra.run.dir={run}", "resume=true"]

    def further() -> bool:  # the resumed run has written an epoch beyond the interrupted one
        try:
            return read_checkpoint(last)[1]["training"]["epoch"] + 1 > done
        except Exception:  # noqa: BLE001 - the file is being replaced
            return False

    resumed = _start("llmco2.training.experiment", command[3:], tmp_path)  # the printed command
    _wait_for(further, resumed)
    resumed.send_signal(signal.SIGINT)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 130, err
    assert f"resuming training from {last} after epoch {done - 1}" in out + err + "".join(
        f.read_text() for f in run.glob("*.log"))
    _, final = read_checkpoint(last)
    losses = final["history"]["train_loss"]
    assert len(losses) > done and losses[:done] == meta["history"]["train_loss"]  # continued, not restarted


def test_an_interrupt_before_the_first_epoch_says_nothing_is_kept(tmp_path: Path) -> None:
    from llmco2.training.experiment import interrupted_message

    text = interrupted_message(tmp_path, ["model=llmco2"], resume=False, started=time.time())
    assert text.startswith("interrupted before the first epoch finished") and "\n" not in text


def test_sigterm_during_the_sample_app_exits_143_and_leaves_no_file(tmp_path: Path, shared_data) -> None:
    out = tmp_path / "s.csv"
    proc = _start("llmco2.data.sample_app", ["n=5000000", f"out={out}", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    _wait_for(lambda: any(p.name.endswith(".tmp") for p in tmp_path.iterdir()), proc)  # it has started writing
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err == "llmco2: interrupted\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_interrupted_sweep_says_where_its_rows_are(tmp_path: Path, monkeypatch) -> None:
    def stopped(options):
        raise Terminated()

    monkeypatch.setattr(sweep_app, "_run", stopped)
    cfg = {"configs": str(tmp_path / "c.csv"), "out": str(tmp_path / "m.csv")}
    with pytest.raises(Stopped) as info:
        sweep_app.run_sweep(cfg)
    assert info.value.exit_code == 143
    assert str(info.value) == f"interrupted; finished configurations are in {tmp_path / 'm.csv'}; run the same command again to resume"


def test_llmco2_measure_stops_on_sigterm_with_143(tmp_path: Path, capsys, monkeypatch) -> None:
    import llmco2.measure.sweep as sweep

    def stopped(options):
        raise Terminated()

    monkeypatch.setattr(sweep, "run_sweep", stopped)
    (tmp_path / "c.csv").write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\n")
    code, _, err = run_cli(["measure", "--configs", str(tmp_path / "c.csv"), "--out", str(tmp_path / "m.csv")], capsys)
    assert code == 143 and err.startswith("llmco2: interrupted; finished configurations are in") and err.count("\n") == 1


@pytest.mark.parametrize("gpus", [[], [-1]])
def test_the_sweep_app_refuses_an_empty_or_negative_gpu_list(gpus: list[int], tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"gpus: must be a list of GPU indices like \[0,1\]"):
        sweep_app.options_from_cfg({"configs": str(tmp_path / "c.csv"), "out": str(tmp_path / "m.csv"), "gpus": gpus})
