"""No command writes over one of its own inputs, and `sample` stopped by SIGTERM leaves nothing.

An output path that names an input (the same file, a link to it, another spelling of its path)
is refused with exit 2 and one line before anything is read or written; the input is unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmco2.carbon.hourly_files import sample_intensity_path
from tests.helpers import run_cli as run

REQUESTS = "model,gpu,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,h100,1,100,10\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "ok.csv").write_text(REQUESTS)
    (tmp_path / "my.safetensors").write_bytes(b"not read: refused first")
    (tmp_path / "hours.csv").write_bytes(sample_intensity_path().read_bytes())
    (tmp_path / "link.csv").symlink_to(tmp_path / "ok.csv")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("argv", "victim", "option"), [
    (["predict", "--requests", "ok.csv", "--checkpoint", "my.safetensors", "--out", "my.safetensors"], "my.safetensors",
     "--checkpoint"),
    (["predict", "--requests", "ok.csv", "--out", "./sub/../ok.csv"], "ok.csv", "--requests"),
    (["predict", "--requests", "ok.csv", "--out", "link.csv"], "ok.csv", "--requests"),
    (["predict", "--requests", "ok.csv", "--intensity-file", "hours.csv", "--region", "FR", "--out", "hours.csv"],
     "hours.csv", "--intensity-file"),
    (["analyze", "batch", "--requests", "ok.csv", "--out", "ok.csv"], "ok.csv", "--requests"),
    (["data", "import", "canonical", "ok.csv", "-o", "ok.csv"], "ok.csv", "source"),
])
def test_an_output_that_is_an_input_is_refused(folder: Path, argv, victim, option, capsys) -> None:
    before = (folder / victim).read_bytes()
    code, out, err = run(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"it is the {option} input" in err
    assert (folder / victim).read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["hours.csv", "link.csv", "my.safetensors", "ok.csv", "sub"]


def test_an_output_folder_holding_an_input_is_refused(folder: Path, capsys) -> None:
    (folder / "sub" / "req.csv").write_text(REQUESTS)
    code, _, err = run(["report", "trace", "--intensity-file", "sub/req.csv", "-o", "sub"], capsys)
    assert code == 2 and "holds the --intensity-file input" in err


def test_a_bundled_dataset_named_as_the_intensity_file_is_an_input_too(folder: Path, capsys) -> None:
    from llmco2.carbon.hourly_datasets import find_dataset

    bundled = find_dataset("electricitymaps-2023")
    assert bundled is not None
    before = bundled.path().read_bytes()
    code, _, err = run(["predict", "--requests", "ok.csv", "--intensity-file", "electricitymaps-2023", "--region", "FR",
                        "--out", str(bundled.path())], capsys)
    assert code == 2 and "it is the --intensity-file input" in err
    assert bundled.path().read_bytes() == before


def test_sigterm_during_sample_exits_143_and_leaves_no_file(tmp_path: Path, shared_data) -> None:
    out = tmp_path / "s.csv"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "llmco2.cli", "sample", "--strategy", "focused", "--trace", "conv",
                             "--n", "5000000", "--seed", "0", "--out", str(out)], stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while not any(tmp_path.iterdir()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)  # wait until it has started writing
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.decode().strip() == "llmco2: interrupted"
    assert list(tmp_path.iterdir()) == []


def test_the_api_refuses_an_output_that_is_a_file_job_input(folder: Path) -> None:
    """``llmco2.predict_file`` refuses as the command line does: the checkpoint, the intensity file and
    the bundled dataset named instead of one are inputs too (and so are the totals written beside)."""
    import llmco2
    from llmco2.api.options import Assumptions, FileJob, RequestOptions
    from llmco2.carbon.hourly_datasets import find_dataset
    from llmco2.errors import InvalidInputError

    bundled = find_dataset("electricitymaps-2023")
    assert bundled is not None
    jobs = [(FileJob("ok.csv", "my.safetensors", options=RequestOptions(checkpoint="my.safetensors")), folder / "my.safetensors"),
            (FileJob("ok.csv", "hours.csv", assumptions=Assumptions(intensity="hours.csv", region="FR")), folder / "hours.csv"),
            (FileJob("ok.csv", str(bundled.path()), assumptions=Assumptions(intensity="electricitymaps-2023", region="FR")),
             bundled.path())]
    for job, victim in jobs:
        before = victim.read_bytes()
        with pytest.raises(InvalidInputError, match="input, which this command reads"):
            llmco2.predict_file(job)
        assert victim.read_bytes() == before
    (folder / "out.csv.totals.json").write_bytes((folder / "hours.csv").read_bytes())  # an input where the totals go
    with pytest.raises(InvalidInputError, match="it is the `intensity` input"):
        llmco2.predict_file(FileJob("ok.csv", "out.csv", assumptions=Assumptions(intensity="out.csv.totals.json", region="FR")))
    assert not (folder / "out.csv").exists()
