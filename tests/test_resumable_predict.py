"""`predict --requests` commits its output in chunks: Ctrl-C / SIGTERM stop it with one line and
exit 130 / 143, the same command resumes, and the result equals an uninterrupted run byte for byte;
what a killed run leaves is reused or removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import llmco2.analytic.request_files as rf
import llmco2.carbon.footprint as footprint
from llmco2.resumable_output import ResumableOutput
from tests.fast_predict_support import REQUEST_CSV, ROOT, train_small_checkpoint
from tests.helpers import run_cli as run

ROWS = REQUEST_CSV.splitlines()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return train_small_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture
def requests_file(tmp_path: Path) -> Path:
    src = tmp_path / "req.csv"
    src.write_text("\n".join([ROWS[0], *ROWS[1:] * 3]) + "\n")  # several chunks of two rows
    return src


def _predict(src: Path, out: Path, checkpoint: Path, capsys, *extra: str) -> tuple[int, str, str]:
    return run(["predict", "--requests", str(src), "--out", str(out), "--checkpoint", str(checkpoint), *extra], capsys)


def _stop_at_call(monkeypatch, call: int, action) -> None:
    """Make the ``call``-th chunk prediction run ``action`` (raise or signal) instead."""
    real = footprint.predict_footprint
    calls = {"n": 0}

    def patched(*a, **kw):
        calls["n"] += 1
        if calls["n"] == call:
            action()
        return real(*a, **kw)

    monkeypatch.setattr(footprint, "predict_footprint", patched)


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _raise_interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_ctrl_c_then_rerun_gives_the_same_bytes(suffix: str, requests_file: Path, checkpoint: Path, tmp_path: Path,
                                                 capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    reference = tmp_path / "ref" / f"pred{suffix}"
    reference.parent.mkdir()
    code, _, err = _predict(requests_file, reference, checkpoint, capsys)
    assert code == 0, err
    out = tmp_path / f"pred{suffix}"
    with monkeypatch.context() as m:
        _stop_at_call(m, 3, _raise_interrupt)
        code, _, err = _predict(requests_file, out, checkpoint, capsys)
    total = len(ROWS[1:]) * 3
    assert code == 130
    assert err == f"llmco2: interrupted after 4 of {total} rows; run the same command again to resume\n"
    assert not out.exists() and _hidden(tmp_path) == [f".pred{suffix}.partial", f".pred{suffix}.partial.json"]
    assert json.loads((tmp_path / f".pred{suffix}.partial.json").read_text())["rows"] == 4
    code, _, err = _predict(requests_file, out, checkpoint, capsys)
    assert code == 0 and f"({4} of them by the interrupted run)" in err, err
    assert out.read_bytes() == reference.read_bytes()
    assert _hidden(tmp_path) == []


def test_sigterm_stops_with_143_and_resumes(requests_file: Path, checkpoint: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    reference = tmp_path / "ref.csv"
    assert _predict(requests_file, reference, checkpoint, capsys)[0] == 0
    out = tmp_path / "pred.csv"
    with monkeypatch.context() as m:
        _stop_at_call(m, 2, lambda: os.kill(os.getpid(), signal.SIGTERM))
        code, _, err = _predict(requests_file, out, checkpoint, capsys)
    assert code == 143 and "interrupted after 2 of" in err and len(err.splitlines()) == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back
    assert _predict(requests_file, out, checkpoint, capsys)[0] == 0
    assert out.read_bytes() == reference.read_bytes()


def test_a_chunk_half_written_when_killed_is_cut_off(requests_file: Path, checkpoint: Path, tmp_path: Path, capsys,
                                                     monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    reference = tmp_path / "ref.csv"
    assert _predict(requests_file, reference, checkpoint, capsys)[0] == 0
    out = tmp_path / "pred.csv"
    with monkeypatch.context() as m:
        _stop_at_call(m, 4, _raise_interrupt)
        assert _predict(requests_file, out, checkpoint, capsys)[0] == 130
    with (tmp_path / ".pred.csv.partial").open("ab") as fh:  # bytes of a chunk whose commit never finished
        fh.write(b"qwen2-0.5b,jetson-orin,1,64,16,0.1,0.2")
    (tmp_path / ".pred.csv.8f3k.tmp").write_bytes(b"left by an older run killed while renaming")
    assert _predict(requests_file, out, checkpoint, capsys)[0] == 0
    assert out.read_bytes() == reference.read_bytes() and _hidden(tmp_path) == []


def test_other_options_discard_the_partial_output(requests_file: Path, checkpoint: Path, tmp_path: Path, capsys,
                                                  monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    reference = tmp_path / "ref.csv"
    assert _predict(requests_file, reference, checkpoint, capsys, "--region", "fra")[0] == 0
    out = tmp_path / "pred.csv"
    with monkeypatch.context() as m:
        _stop_at_call(m, 3, _raise_interrupt)
        assert _predict(requests_file, out, checkpoint, capsys)[0] == 130  # grid: world
    code, _, err = _predict(requests_file, out, checkpoint, capsys, "--region", "fra")
    assert code == 0 and "interrupted run" not in err
    assert out.read_bytes() == reference.read_bytes() and _hidden(tmp_path) == []


def test_interrupt_before_any_chunk_leaves_nothing(requests_file: Path, checkpoint: Path, tmp_path: Path, capsys,
                                                   monkeypatch) -> None:
    out = tmp_path / "pred.csv"
    _stop_at_call(monkeypatch, 1, _raise_interrupt)
    code, _, err = _predict(requests_file, out, checkpoint, capsys)
    assert code == 130 and err.startswith("llmco2: interrupted after 0 of") and "resume" not in err
    assert _hidden(tmp_path) == [] and not out.exists()


def test_bad_row_in_a_later_chunk_removes_the_partial_output(checkpoint: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    src = tmp_path / "req.csv"
    src.write_text("\n".join([*ROWS, "qwen2-0.5b,jetson-orin,1,1,x,16,,"]) + "\n")
    out = tmp_path / "pred.csv"
    code, _, err = _predict(src, out, checkpoint, capsys)
    assert code == 2 and "prompt_tokens" in err and len(err.splitlines()) == 1
    assert _hidden(tmp_path) == [] and not out.exists()


def test_a_second_run_on_the_same_output_is_refused(tmp_path: Path) -> None:
    first = ResumableOutput(tmp_path / "o.csv", {"a": 1}).open()
    try:
        with pytest.raises(Exception, match="another llmco2 run is writing"):
            ResumableOutput(tmp_path / "o.csv", {"a": 1}).open()
    finally:
        first.discard()
    assert _hidden(tmp_path) == []


def test_sigkill_leftovers_are_reused(checkpoint: Path, tmp_path: Path) -> None:
    """A real process killed with SIGKILL while it writes; the rerun finishes the same file."""
    src = tmp_path / "req.csv"
    body = ROWS[1:] * (3 * rf.CHUNK_ROWS // len(ROWS[1:]) + 1)  # a little over three chunks
    src.write_text("\n".join([ROWS[0], *body]) + "\n")
    out = tmp_path / "pred.csv"
    cmd = [sys.executable, "-m", "llmco2.cli", "predict", "--requests", str(src), "--out", str(out), "--checkpoint",
           str(checkpoint)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    manifest = tmp_path / ".pred.csv.partial.json"
    deadline = time.monotonic() + 60
    while not manifest.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    killed_midway = manifest.exists()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if killed_midway:
        assert "by the interrupted run" in done.stderr
    reference = tmp_path / "ref" / "pred.csv"
    reference.parent.mkdir()
    assert subprocess.run([*cmd[:-4], "--out", str(reference), *cmd[-2:]], env=env, timeout=120).returncode == 0
    assert out.read_bytes() == reference.read_bytes() and _hidden(tmp_path) == []


def test_an_input_replaced_by_one_of_the_same_size_and_time_is_not_resumed(requests_file: Path, checkpoint: Path,
                                                                            tmp_path: Path, capsys, monkeypatch) -> None:
    """The fingerprint holds a digest of the input's contents, not its size and time stamp."""
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    out = tmp_path / "pred.csv"
    with monkeypatch.context() as m:
        _stop_at_call(m, 3, _raise_interrupt)
        assert _predict(requests_file, out, checkpoint, capsys)[0] == 130
    before = requests_file.stat()
    lines = requests_file.read_text().splitlines()
    lines[1:] = lines[:0:-1]  # the same rows (and bytes) in another order
    assert lines != requests_file.read_text().splitlines()
    requests_file.write_text("\n".join(lines) + "\n")
    os.utime(requests_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = requests_file.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    code, _, err = _predict(requests_file, out, checkpoint, capsys)
    assert code == 0 and "interrupted run" not in err, err
    reference = tmp_path / "ref" / "pred.csv"
    reference.parent.mkdir()
    assert _predict(requests_file, reference, checkpoint, capsys)[0] == 0
    assert out.read_bytes() == reference.read_bytes() and _hidden(tmp_path) == []
