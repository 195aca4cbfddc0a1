"""Regenerate the figures of the docs that ``llmco2`` commands draw, with one command.

    python docs/make_figures.py                 # every figure into docs/figures (minutes)
    python docs/make_figures.py --small --out DIR   # the same commands on small inputs (seconds; the tests run this)

Each figure is one ``llmco2`` command (listed in :data:`FIGURES`, with the arguments that make it
small). Figures of the experiments are written by their scripts (:data:`EXPERIMENT_FIGURES`), which
take from minutes to an hour: run those by hand.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    """One figure: its file (or, for ``report case-studies``, its folder and files), the command
    that writes it (``{out}`` is the path), the arguments added on small inputs, and whether it
    reads the shared data folder."""

    name: str
    command: tuple[str, ...]
    small: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    needs_shared: bool = False
    folder: bool = field(default=False)

    def files(self) -> tuple[str, ...]:
        return self.writes or (self.name,)


FIGURES = (
    Figure("trace_conv_llama3.1-8b_a100.png", ("report", "trace", "--model", "llama3.1-8b", "--gpu", "a100-80gb", "--region",
                                                "usa", "-o", "{out}"), small=("--trace", "code")),
    Figure("compare_llama3.1-70b.png", ("report", "compare", "--model", "llama3.1-70b", "--batch-size", "1", "--prompt-tokens",
                                        "1024", "--gen-tokens", "128", "-o", "{out}"), small=("--gpus", "h100,h200")),
    Figure("compare_served_llama3.1-70b.png", ("compare", "--model", "llama3.1-70b", "--gpus", "h100,a100-80gb,h200,l40s",
                                               "--rate", "2", "--slo-tpot", "0.1", "--serving-requests", "300", "-o", "{out}"),
           small=("--max-gpus", "2", "--serving-requests", "40")),
    Figure("case-studies", ("report", "case-studies", "-o", "{out}"), folder=True,
           writes=("fig9_carbon_per_gpu_second.png", "fig10_operational_per_gpu.png", "fig11_total_carbon.png")),
    Figure("azure_fig6.png", ("data", "azure-figure", "-o", "{out}"), needs_shared=True),
    Figure("serving_load_llama3.1-8b.png", ("report", "trace", "--serving", "--model", "llama3.1-8b", "--gpu", "h100",
                                            "--sweep-gpus", "h100,a100-80gb,l4,h100:2", "--sweep-engines",
                                            "vllm,tensorrt-llm,sglang", "-o", "{out}"),
           small=("--sweep-gpus", "h100", "--sweep-engines", "vllm", "--sweep-requests", "40"), needs_shared=True),
)

#: Figures written by experiment scripts, and the script.
EXPERIMENT_FIGURES = {"lodo_datacentre.png": "bash experiments/reproduce.sh",
                      "serving_case_study.png": "python experiments/serving_case_study.py",
                      "serving_mlenergy.png": "python experiments/serving_mlenergy.py",
                      "ui.png": "LLMCO2_UPDATE_FIGURES=1 python -m pytest tests/test_ui_browser.py"}


def command_of(fig: Figure, out: Path, small: bool) -> list[str]:
    """The command line that writes ``fig`` under ``out``."""
    target = out if fig.folder else out / fig.name
    argv = [a.replace("{out}", str(target)) for a in fig.command]
    if small:
        argv += list(fig.small)
    return [sys.executable, "-m", "llmco2.cli", *argv]


def make(out: Path, small: bool, skip_shared: bool = False) -> list[Path]:
    """Write every figure of :data:`FIGURES` under ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for fig in FIGURES:
        if fig.needs_shared and skip_shared:
            continue
        start = time.perf_counter()
        done = subprocess.run(command_of(fig, out, small), cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"{fig.name}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        written += [out / f for f in fig.files()]
        print(f"{fig.name} ({time.perf_counter() - start:.1f} s)")
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    ap.add_argument("--small", action="store_true", help="small inputs (seconds); for checking the commands")
    ap.add_argument("--skip-shared", action="store_true", help="leave out the figures that read the shared data folder")
    args = ap.parse_args()
    if args.small and args.out.resolve() == (ROOT / "docs" / "figures").resolve():
        raise SystemExit("--small writes figures from small inputs: give --out a scratch folder, not docs/figures")
    make(args.out, args.small, args.skip_shared)
    for name, script in EXPERIMENT_FIGURES.items():
        print(f"not regenerated here: {name} (run: {script})")


if __name__ == "__main__":
    main()
