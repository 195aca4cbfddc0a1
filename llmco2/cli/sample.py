"""``llmco2 sample``: draw configurations to measure or predict (convention 5 (docs/reference/conventions.md)).

The sampler's settings live in ``conf/sampler/{focused,random}.yaml``; this command composes that
config (falling back to the classes' defaults when the conf folder is not installed) and applies
the command-line choices on top.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from llmco2.config_checks import SAMPLE_SCHEMA, check_value
from llmco2.file_checks import check_output_path
from llmco2.interrupts import terminate_as_interrupt

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

    check_value(args.n, "--n", *SAMPLE_SCHEMA["n"])  # the Hydra sample app's bound on n as well
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
    with terminate_as_interrupt():  # SIGTERM stops like Ctrl-C: exit 143, the temporary file removed
        rows = sampling.write_blocks(sampler.sample_blocks(args.n, seed=args.seed), out)
    report = getattr(sampler, "last_report", None)
    dropped = f"; {report}" if report is not None and str(report) else ""
    sys.stderr.write(f"wrote {rows} {args.strategy} configurations to {out} in {time.perf_counter() - start:.2f} s{dropped}\n")
    return 0

