"""Interrupting ``llmco2 predict --requests`` on a large file: SIGINT, SIGTERM and SIGKILL, then resume.

The command, as a user runs it (``python -m llmco2.cli predict --requests FILE --out OUT``), is
timed once uninterrupted on a request file of ``--rows`` mixed rows (default 1,000,000: the
``llmco2 sample --strategy focused --trace conv --n 20000 --seed 0`` file repeated, as in
``bench_predict.py --million``); its output is the reference. Then, for each signal, the same
command starts on a fresh output, receives the signal (sent to its process group, as Ctrl-C in a
terminal does) after ``--at`` times the reference wall time, and the table records:

* the exit code and the number of lines it wrote on stderr (and the last one);
* the rows kept: what the hidden manifest ``.OUT.partial.json`` records as committed;
* the seconds from the signal to the end of the process;
* the files left in the output folder;
* the rerun of the same command: its exit code and wall time, whether its output is byte for byte
  the reference (SHA-256) and what is left in the folder afterwards (only ``OUT`` should be).

    python experiments/bench_interrupt.py [--rows 1000000] [--at 0.4] [--checkpoint PATH]
        [--markdown experiments/results/interrupt_1m.md]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmco2.data import bench_files
from llmco2.data.bench_files import first_rows, repeated_file

ROOT = Path(__file__).resolve().parents[1]
ENV = bench_files.bench_env()
#: The command line, run from the repository root so that this checkout's package is the one timed.
LLMCO2 = [sys.executable, "-m", "llmco2.cli"]
SIGNALS = (("SIGINT", signal.SIGINT), ("SIGTERM", signal.SIGTERM), ("SIGKILL", signal.SIGKILL))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def start(args: list[str]) -> subprocess.Popen[bytes]:
    """``llmco2 ARGS`` in a session of its own (so that a signal to its group reaches nothing else)."""
    return subprocess.Popen([*LLMCO2, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=ENV,
                            start_new_session=True)


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, list[str], float]:
    """Exit code, non-empty stderr lines and CPU seconds (user + system) of a started process,
    once it ends."""
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, [line for line in err.splitlines() if line.strip()], usage.ru_utime + usage.ru_stime


def run(args: list[str]) -> tuple[int, list[str], float, float]:
    """``(exit code, stderr lines, wall seconds, CPU seconds)`` of ``llmco2 ARGS`` run to its end."""
    t0 = time.perf_counter()
    code, err, cpu = finish(start(args))
    return code, err, time.perf_counter() - t0, cpu


def left_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def committed_rows(out: Path) -> int:
    """Rows the resumable output's manifest records as committed (0 when there is none)."""
    manifest = out.parent / f".{out.name}.partial.json"
    try:
        return int(json.loads(manifest.read_text())["rows"])
    except (OSError, ValueError, KeyError):
        return 0


def interrupted_case(name: str, sig: int, command: list[str], out: Path, delay: float, reference: str) -> dict[str, object]:
    """Start ``command``, send ``sig`` after ``delay`` s, then rerun it to the end and compare."""
    proc = start(command)
    time.sleep(delay)
    if proc.poll() is not None:
        raise SystemExit(f"{name}: the run ended before the signal ({delay:.1f} s); lower --at")
    sent = time.perf_counter()
    os.killpg(proc.pid, sig)
    code, err, _ = finish(proc)
    to_exit = time.perf_counter() - sent
    if code == 0:
        raise SystemExit(f"{name}: the run finished regardless of the signal (was {name} ignored where this started?)")
    kept, left = committed_rows(out), left_in(out.parent)
    code2, err2, resumed, cpu = run(command)
    if code2 != 0:
        raise SystemExit(f"{name}: the rerun failed ({code2}): {' / '.join(err2)}")
    same = out.is_file() and sha256(out) == reference
    return {"signal": name, "code": code, "err_lines": len(err), "last": err[-1] if err else "", "kept": kept,
            "to_exit": to_exit, "left": left, "resumed": resumed, "cpu": cpu, "same": same, "after": left_in(out.parent)}


def table(rows: list[dict[str, object]], total: int, reference: tuple[float, float, list[str], int], delay: float) -> str:
    lines = [f"| signal (after {delay:.1f} s) | exit code | stderr | rows kept (of {total:,}) | exit after the signal (s) "
             "| left in the folder | rerun wall (s) | rerun CPU (s) | rerun output = reference | left after the rerun |",
             "|---|---:|---|---:|---:|---|---:|---:|---|---|"]
    wall, cpu, names, err_lines = reference
    left = ", ".join(f"`{n}`" for n in names)
    lines.append(f"| none (the reference run) | 0 | {err_lines} line{'s' if err_lines != 1 else ''} (the summary) | {total:,} | - | {left} | {wall:.2f} | {cpu:.2f} | - "
                 f"| {left} |")
    for r in rows:
        code = int(r["code"])  # type: ignore[call-overload]
        shown = f"{code} (killed)" if code < 0 else str(code)
        err = f"{r['err_lines']} line: `{r['last']}`" if r["err_lines"] == 1 else (
            "nothing" if not r["err_lines"] else f"{r['err_lines']} lines, last `{r['last']}`")
        left = ", ".join(f"`{n}`" for n in r["left"]) or "nothing"  # type: ignore[attr-defined]
        after = ", ".join(f"`{n}`" for n in r["after"]) or "nothing"  # type: ignore[attr-defined]
        lines.append(f"| {r['signal']} | {shown} | {err} | {int(r['kept']):,} | {float(r['to_exit']):.2f} | {left} "  # type: ignore[call-overload,arg-type]
                     f"| {float(r['resumed']):.2f} | {float(r['cpu']):.2f} | {'yes (SHA-256)' if r['same'] else '**no**'} | {after} |")  # type: ignore[arg-type]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the request file (default 1000000)")
    parser.add_argument("--at", type=float, default=0.4, help="signal after this share of the reference wall time")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--markdown", default=None, help="also write the report to this Markdown file")
    args = parser.parse_args()
    # Ctrl-C semantics for the children even when this script was started in the background, where
    # the shell ignores SIGINT and an ignored signal stays ignored across exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ckpt = ["--checkpoint", args.checkpoint] if args.checkpoint else []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        requests = repeated_file(bench_files.mixed_file(tmp / "mixed.csv", 20_000, command=LLMCO2, cwd=ROOT), tmp / "requests.csv", args.rows)
        warm = tmp / "warm"
        warm.mkdir()
        run(["predict", "--requests", str(first_rows(requests, warm / "r.csv", 10)), "--out", str(warm / "o.csv"), *ckpt])
        ref_out = tmp / "reference" / "out.csv"
        ref_out.parent.mkdir()
        code, err, reference_s, reference_cpu = run(["predict", "--requests", str(requests), "--out", str(ref_out), *ckpt])
        if code != 0:
            raise SystemExit(f"the reference run failed ({code}): {' / '.join(err)}")
        reference, size, reference_left = sha256(ref_out), ref_out.stat().st_size, left_in(ref_out.parent)
        ref_out.unlink()
        delay = args.at * reference_s
        rows = []
        for name, sig in SIGNALS:
            out = tmp / name.lower() / "out.csv"
            out.parent.mkdir()
            command = ["predict", "--requests", str(requests), "--out", str(out), *ckpt]
            rows.append(interrupted_case(name, sig, command, out, delay, reference))
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(out.parent)
    text = "\n".join([
        f"# Interrupting `predict --requests` on {args.rows:,} rows",
        "",
        f"`python experiments/bench_interrupt.py --rows {args.rows} --at {args.at}`: the command "
        "`python -m llmco2.cli predict --requests requests.csv --out out.csv` on "
        f"{args.rows:,} mixed rows (the 20,000-row `llmco2 sample --strategy focused --trace conv --seed 0` file "
        f"repeated), {os.cpu_count()} CPUs, load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} after "
        "(other work shared the machine). The reference run writes "
        f"{size / 1e6:,.0f} MB (SHA-256 `{reference[:16]}...`). Each signal goes to the command's process "
        f"group {delay:.1f} s after its start ({args.at:.0%} of the reference wall time); then the same command "
        "runs again on the same `--out`. Wall times vary with the other work; CPU times (user + system) are steadier.",
        "",
        table(rows, args.rows, (reference_s, reference_cpu, reference_left, len(err)), delay),
        "",
    ])
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
