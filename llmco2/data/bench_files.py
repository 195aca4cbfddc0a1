"""Request files for benchmarks: a trace-sampled file of mixed requests, its first rows, and a
file of any length made by repeating one (``experiments/bench_predict.py``, ``bench_interrupt.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def bench_env() -> dict[str, str]:
    """The environment of a timed ``llmco2`` subprocess: bytecode cached outside the checkout, so
    that a run never times its own compilation into the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "llmco2-bench-pycache")
    return env


def first_rows(src: Path, dest: Path, n: int) -> Path:
    """``dest``: the header and the first ``n`` rows of the CSV file ``src``."""
    with src.open() as fh, dest.open("w") as out:
        for i, line in enumerate(fh):
            if i > n:
                break
            out.write(line)
    return dest


def mixed_file(dest: Path, n: int, seed: int = 0, command: list[str] | None = None, cwd: Path | None = None) -> Path:
    """``n`` mixed requests: ``llmco2 sample --strategy focused --trace conv --n N --seed SEED``
    (``command``: how to run llmco2, default this interpreter's ``-m llmco2.cli``)."""
    cmd = command or [sys.executable, "-m", "llmco2.cli"]
    subprocess.run([*cmd, "sample", "--strategy", "focused", "--trace", "conv", "--n", str(n), "--seed", str(seed),
                    "--out", str(dest)], check=True, cwd=cwd, capture_output=True, env=bench_env())
    return dest


def repeated_file(src: Path, dest: Path, rows: int) -> Path:
    """A request file of ``rows`` rows: the header and rows of ``src``, repeated as often as needed."""
    lines = src.read_text().splitlines(keepends=True)
    with dest.open("w") as fh:
        fh.write(lines[0])
        written = 0
        while written < rows:
            take = lines[1:1 + min(len(lines) - 1, rows - written)]
            fh.writelines(take)
            written += len(take)
    return dest
