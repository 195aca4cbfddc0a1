"""Benchmark of ``llmco2 predict`` as a user runs it: whole processes, wall time and peak memory.

For each case the command runs ``--runs`` times in a fresh process; the table gives the median
wall time and the median peak resident memory of the process (``ru_maxrss`` from ``wait4``).

* ``--help``: start-up of the command line.
* one request (``--json``): cold start of a prediction (imports, checkpoint, one request).
* every case also reports the median CPU time (user + system, all threads) of its processes,
  steadier than wall time on a shared machine.
* request files, **mixed** (``llmco2 sample --strategy focused --trace conv --n N --seed 0``: many
  models, architecture variants and GPUs) and **single-model** (the Azure conversation trace on one
  model and GPU): wall time, and requests per second excluding start-up, where start-up is the
  wall time of the same command on the file's first row alone.
* ``--million``: a 1,000,000-row file of distinct mixed requests (``llmco2 sample --strategy
  focused --trace conv --n 1000000 --seed 0``, so that nothing repeats), once: wall time and peak memory,
  through the single process and through a local Dask cluster of ``--cluster-workers`` worker
  processes (``--cluster local``, default 2; 0 leaves it out). The peak memory of the cluster run
  is the client's (the workers are processes of their own); its CPU time counts the workers too.
* ``--million-only``: only the 1,000,000-row cases (and the start-up they are measured against).

Child processes keep compiled bytecode, as an installed package does (``PYTHONPYCACHEPREFIX`` in
the temporary folder).

    python experiments/bench_predict.py [--runs 5] [--n 20000] [--million] [--million-only] [--cluster-workers 2]
        [--checkpoint PATH] [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmco2.data import bench_files
from llmco2.data.bench_files import first_rows

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).parent / "llmco2"
LLMCO2 = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "llmco2.cli"]  # as a user runs it
SINGLE = ["predict", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--batch-size", "1", "--prompt-tokens", "1024",
          "--gen-tokens", "128", "--json"]


#: Child processes keep compiled bytecode (in a private folder), as an installed package does,
#: even where the environment sets PYTHONDONTWRITEBYTECODE.
ENV = bench_files.bench_env()


def timed_process(args: list[str]) -> tuple[float, float]:
    """``(wall seconds, peak resident MB)`` of one process running ``llmco2 ARGS``; its CPU
    seconds (user + system, all threads, and the child processes it waited for: Dask workers) are
    added to :data:`CPU_SECONDS` under ``ARGS``."""
    start = time.perf_counter()
    proc = subprocess.Popen([*LLMCO2, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=ENV,
                            start_new_session=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"llmco2 {' '.join(args)} failed ({proc.returncode}): {err.strip()}")
    CPU_SECONDS.setdefault(tuple(args), []).append(usage.ru_utime + usage.ru_stime)
    return wall, usage.ru_maxrss / 1024.0  # Linux: kilobytes


#: CPU seconds of every timed process, by command line (the machine may be shared: CPU time is
#: steadier than wall time under load).
CPU_SECONDS: dict[tuple[str, ...], list[float]] = {}


def median_run(args: list[str], runs: int) -> tuple[float, float]:
    walls, peaks = zip(*(timed_process(args) for _ in range(runs)), strict=True)
    return statistics.median(walls), statistics.median(peaks)


def median_cpu(args: list[str]) -> float:
    """Median CPU seconds of the processes run with ``args`` so far."""
    return statistics.median(CPU_SECONDS[tuple(args)])


def mixed_file(dest: Path, n: int, seed: int = 0) -> Path:
    """``n`` mixed requests, sampled by this checkout's command line."""
    return bench_files.mixed_file(dest, n, seed, LLMCO2, ROOT)


def single_model_file(dest: Path, model: str, gpu: str) -> Path:
    """The Azure conversation trace as a request file on one model and GPU."""
    from llmco2.data.azure import load_trace

    trace = load_trace("conv")
    with dest.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "gpu", "batch_size", "prompt_tokens", "generated_tokens"])
        for p, o in zip(trace["prompt_tokens"], trace["generated_tokens"], strict=True):
            w.writerow([model, gpu, 1, int(p), max(int(o), 1)])
    return dest


def file_case(name: str, path: Path, rows: int, runs: int, ckpt: list[str], tmp: Path) -> dict[str, object]:
    out = tmp / "out.csv"
    command = ["predict", "--requests", str(path), "--out", str(out), *ckpt]
    wall, peak = median_run(command, runs)
    startup, _ = median_run(["predict", "--requests", str(first_rows(path, tmp / "one.csv", 1)), "--out", str(out), *ckpt],
                            runs)
    rate = rows / max(wall - startup, 1e-9)
    return {"case": f"`predict --requests`, {name} ({rows:,} requests)", "wall_s": wall, "peak_mb": peak, "per_s": rate,
            "startup_s": startup, "cpu_s": median_cpu(command)}


def small_cases(args: argparse.Namespace, ckpt: list[str], tmp: Path, mixed: Path) -> list[dict[str, object]]:
    """``--help``, one request, the mixed file and the single-model file."""
    rows: list[dict[str, object]] = []
    wall, peak = median_run(["--help"], args.runs)
    rows.append({"case": "`llmco2 --help`", "wall_s": wall, "peak_mb": peak, "cpu_s": median_cpu(["--help"])})
    wall, peak = median_run([*SINGLE, *ckpt], args.runs)
    rows.append({"case": "`predict` one request `--json` (cold)", "wall_s": wall, "peak_mb": peak,
                 "cpu_s": median_cpu([*SINGLE, *ckpt])})
    rows.append(file_case("mixed models and GPUs", mixed, args.n, args.runs, ckpt, tmp))
    single = single_model_file(tmp / "single.csv", args.model, args.gpu)
    n_single = sum(1 for _ in single.open()) - 1
    rows.append(file_case(f"one model ({args.model} on {args.gpu}, Azure conv trace)", single, n_single, args.runs,
                          ckpt, tmp))
    return rows


def million_cases(args: argparse.Namespace, ckpt: list[str], tmp: Path, mixed: Path, startup: float) -> list[dict[str, object]]:
    """1,000,000 distinct mixed rows: single process, then a local Dask cluster."""
    big = mixed_file(tmp / "million.csv", 1_000_000)
    rows: list[dict[str, object]] = []
    command = ["predict", "--requests", str(big), "--out", str(tmp / "out.csv"), *ckpt]
    wall, peak = timed_process(command)
    rows.append({"case": "`predict --requests`, 1,000,000 mixed requests, single process (1 run)", "wall_s": wall,
                 "peak_mb": peak, "per_s": 1_000_000 / max(wall - startup, 1e-9), "cpu_s": median_cpu(command)})
    if args.cluster_workers > 0:
        command = ["predict", "--requests", str(big), "--out", str(tmp / "parts"), "--cluster", "local", "--workers",
                   str(args.cluster_workers), *ckpt]
        wall, peak = timed_process(command)
        rows.append({"case": f"same, `--cluster local --workers {args.cluster_workers}` (1 run; start-up includes the "
                             "cluster's)", "wall_s": wall, "peak_mb": peak, "per_s": 1_000_000 / max(wall - startup, 1e-9),
                     "cpu_s": median_cpu(command)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n", type=int, default=20_000, help="mixed requests (default 20000)")
    parser.add_argument("--million", action="store_true", help="also a 1,000,000-row file (once)")
    parser.add_argument("--million-only", action="store_true", help="only the 1,000,000-row cases")
    parser.add_argument("--cluster-workers", type=int, default=2, help="workers of the local Dask cluster (0: no cluster run)")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--model", default="llama3.1-8b")
    parser.add_argument("--gpu", default="a100-80gb")
    parser.add_argument("--markdown", default=None, help="also write the table to this Markdown file")
    args = parser.parse_args()
    ckpt = ["--checkpoint", args.checkpoint] if args.checkpoint else []
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        timed_process([*SINGLE, *ckpt])  # writes the inference sidecar if it is missing (not timed)
        mixed = mixed_file(tmp / "mixed.csv", args.n)
        if not args.million_only:
            rows += small_cases(args, ckpt, tmp, mixed)
            startup = float(rows[2]["startup_s"])  # type: ignore[arg-type]
        else:
            startup, _ = median_run(["predict", "--requests", str(first_rows(mixed, tmp / "one.csv", 1)), "--out",
                                     str(tmp / "one-out.csv"), *ckpt], args.runs)
        if args.million or args.million_only:
            rows += million_cases(args, ckpt, tmp, mixed, startup)
    lines = ["| case | wall time (s) | CPU time (s) | peak memory (MB) | requests/s excl. start-up |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        rate = f"{r['per_s']:,.0f}" if "per_s" in r else "-"
        cpu = f"{r['cpu_s']:.2f}" if "cpu_s" in r else "-"
        lines.append(f"| {r['case']} | {r['wall_s']:.2f} | {cpu} | {r['peak_mb']:.0f} | {rate} |")
    text = "\n".join(lines)
    where = f"median of {args.runs} runs per case, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    print(where + "\n")
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(where + "\n\n" + text + "\n")


if __name__ == "__main__":
    main()
