"""``llmco2 sample``: draw configurations to measure or predict (convention 5 (docs/reference/conventions.md)).

The sampler's settings live in ``conf/sampler/{focused,random}.yaml``; this command composes that
config (falling back to the classes' defaults when the conf folder is not installed) and applies
the command-line choices on top.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_output_path

TRACES = {"code": ["code"], "conv": ["conv"], "both": ["code", "conv"]}


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("sample", help="draw configurations (model, GPU, batch, prompt, generated tokens) from the priors")
    p.add_argument("--strategy", choices=("focused", "random"), default="focused",
                   help="focused: the paper's priors (Azure traces, catalog architectures and perturbations, GPUs that "
                        "fit the model); random: uniform over the ranges (the paper's baseline)")
    p.add_argument("--trace", choices=tuple(TRACES), default="both",
                   help="Azure trace(s) for prompt/generated tokens (random: their maxima bound the uniform ranges)")
    p.add_argument("--n", type=int, required=True, help="configurations to draw")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output CSV")
    p.add_argument("--gpus", default=None, help="comma-separated GPU ids to draw from (default: the config's)")
    handlers[("sample", None)] = cmd_sample


def _sampler_config(strategy: str) -> dict[str, Any]:
    from llmco2.training.experiment import CONF_DIR

    path = CONF_DIR / "sampler" / f"{strategy}.yaml"
    if not path.is_file():
        return {}
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="sample", overrides=[f"sampler={strategy}", "out=unused"])
    params = OmegaConf.to_container(cfg.sampler, resolve=True)
    assert isinstance(params, dict)
    return {k: v for k, v in params.items() if not str(k).startswith("_")}


def cmd_sample(args: argparse.Namespace) -> int:
    from llmco2.data import sampling

    if args.n < 1:
        raise InvalidInputError(f"must be >= 1, got {args.n}", field="--n")
    out = check_output_path(args.out, "--out", (".csv",))
    params = _sampler_config(args.strategy)
    if args.gpus:
        params["gpus"] = [g.strip() for g in args.gpus.split(",") if g.strip()]
    start = time.perf_counter()
    if args.strategy == "focused":
        params["traces"] = TRACES[args.trace]
        sampler = sampling.FocusedSampler(**params)
    else:
        from llmco2.data.azure import load_trace

        traces = [load_trace(t) for t in TRACES[args.trace]]
        params["max_prompt"] = int(max(t["prompt_tokens"].max() for t in traces))
        params["max_generated"] = int(max(t["generated_tokens"].max() for t in traces))
        sampler = sampling.RandomSampler(**params)
    from llmco2.api.chunks import terminate_as_interrupt

    with terminate_as_interrupt():  # SIGTERM stops like Ctrl-C: exit 143, the temporary file removed
        rows = _write_blocks(sampler.sample_blocks(args.n, seed=args.seed), out)
    report = getattr(sampler, "last_report", None)
    dropped = f"; {report}" if report is not None and str(report) else ""
    sys.stderr.write(f"wrote {rows} {args.strategy} configurations to {out} in {time.perf_counter() - start:.2f} s{dropped}\n")
    return 0


def _write_blocks(frames: Iterator[Any], out: Path) -> int:
    """Write the sample frames one after the other to a temporary file beside ``out``, renamed to
    ``out`` when complete (removed if anything stops it). Returns the rows written."""
    from llmco2.data.sampling import check_samples, to_csv

    tmp = out.with_name(f".{out.name}.sample.tmp")
    rows = 0
    try:
        for frame in frames:
            if rows == 0:
                to_csv(frame, tmp.with_suffix(".csv"))
                os.replace(tmp.with_suffix(".csv"), tmp)
            else:
                check_samples(frame).to_csv(tmp, mode="a", header=False, index=False)
            rows += len(frame)
            del frame
        os.replace(tmp, out)
    finally:
        for leftover in (tmp, tmp.with_suffix(".csv")):
            leftover.unlink(missing_ok=True)
    return rows
