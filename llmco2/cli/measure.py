"""``llmco2 measure``: measure the GPU energy of request configurations (prefill and decode).

``--dry-run`` prints the plan — configurations, what an earlier run already finished, and the
time estimated from the analytic roofline — and needs no GPU. Without a GPU (and without
``--dry-run``) the command exits with code 2 and one line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from llmco2.cli.common import fmt_time, print_json

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("measure", help="measure prefill/decode GPU energy of the configurations in a CSV (NVML)",
                       description="Measure the GPU energy of every configuration of a request/sampler CSV and append the "
                                   "results to a canonical table as each finishes; rerun the same command to resume.")
    p.add_argument("--configs", required=True, help="request/sampler CSV (model, gpu, num_gpus, batch_size, prompt_tokens, "
                                                    "generated_tokens [, dtype, flash_attention, architecture columns])")
    p.add_argument("--out", required=True, help="output table (.csv), e.g. data/measurements/h100.csv")
    p.add_argument("--repeats", type=int, default=5, help="measured runs per configuration (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs before them (default 1)")
    p.add_argument("--gpus", default="0", help="CUDA indices to use, e.g. 0,1 (default 0)")
    p.add_argument("--idle-s", type=float, default=5.0, help="seconds of idle-power measurement before the sweep (default 5; 0 skips)")
    p.add_argument("--device", default=None, help="catalog id of this machine's GPU (default: recognised from its name)")
    p.add_argument("--model-path", action="append", default=[], metavar="MODEL=PATH",
                   help="measure MODEL with the real weights of a local checkpoint folder (repeatable)")
    p.add_argument("--method", choices=("auto", "nvml_energy", "nvml_power"), default="auto",
                   help="energy counter, sampled power, or the counter where available (default)")
    p.add_argument("--decode-mode", choices=("eager", "static"), default="eager",
                   help="decode eagerly (engine hf, default) or with a static KV cache + torch.compile / CUDA graphs "
                        "(engine hf-static), for configurations without an 'engine' column (hf / hf-static)")
    p.add_argument("--min-window-s", type=float, default=1.0, help="shortest measurement window, seconds (default 1)")
    p.add_argument("--min-periods", type=float, default=20.0,
                   help="shortest window in energy-counter update periods (default 20)")
    p.add_argument("--target-bound", type=float, default=0.015,
                   help="add passes until one counter increment is at most this fraction of a window (default 0.015)")
    p.add_argument("--flag-bound", type=float, default=0.02,
                   help="flag rows whose quantisation bound exceeds this fraction counter_quantised (default 0.02)")
    p.add_argument("--max-passes", type=int, default=100_000, help="most passes in one window (default 100000)")
    p.add_argument("--probe-s", type=float, default=2.0,
                   help="seconds of probing the energy counter's update period under load before the sweep (default 2; 0 skips)")
    p.add_argument("--retry-failed", action="store_true", help="measure configurations in the failure file again")
    p.add_argument("--shard", type=int, default=0, help="this process's shard (0-based)")
    p.add_argument("--num-shards", type=int, default=1, help="number of shards the configurations are split into")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the estimated time; needs no GPU")
    p.add_argument("--json", action="store_true", help="print the plan or the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    handlers[("measure", None)] = cmd_measure


def _options(args: argparse.Namespace):  # -> SweepOptions
    from llmco2.measure.sweep import SweepOptions, parse_gpus, parse_model_paths

    return SweepOptions(configs=Path(args.configs), out=Path(args.out), repeats=args.repeats, warmup=args.warmup,
                        gpus=parse_gpus(args.gpus), idle_s=args.idle_s, device=args.device, shard=args.shard,
                        num_shards=args.num_shards, retry_failed=args.retry_failed,
                        model_paths=parse_model_paths(args.model_path), method=args.method, progress=not args.no_progress,
                        decode_mode=args.decode_mode, min_window_s=args.min_window_s, min_periods=args.min_periods,
                        target_bound=args.target_bound, flag_bound=args.flag_bound, max_passes=args.max_passes,
                        probe_s=args.probe_s)


def _print_plan(plan) -> None:  # plan: SweepPlan
    doc = plan.to_dict()
    out = sys.stdout
    out.write(f"{doc['total']} configurations in {doc['configs']}"
              + (f" (shard {doc['shard']} of {doc['num_shards']})" if doc["num_shards"] > 1 else "") + f" -> {doc['out']}\n")
    out.write(f"  already done: {doc['done']}, failed before: {doc['failed']}, for other GPUs: {doc['other_gpu']}, "
              f"to measure: {doc['todo']}\n")
    est = doc["estimated_s"]
    runs = plan.options.warmup + plan.options.repeats
    out.write(f"  estimated GPU time (roofline x {runs} runs + 2 calibrations, each phase at least one "
              f"{plan.options.policy.minimum_s(None):g} s window, + idle): {'-' if est is None else fmt_time(est)}"
              " (a lower bound: model building, Python overhead and windows longer than the minimum are not counted)\n")
    for c in plan.items:
        f = c.fields
        est_c = "-" if c.estimate_s is None else fmt_time(c.estimate_s)
        out.write(f"  {c.number:>5} {c.status:<9} {f['model']} on {f['num_gpus']}x {f['gpu']} {f['engine']} {f['dtype']} batch {f['batch_size']} "
                  f"prompt {f['prompt_tokens']} gen {f['generated_tokens']}  ~{est_c}\n")


def cmd_measure(args: argparse.Namespace) -> int:
    from llmco2.measure.sweep import plan_sweep, run_sweep

    options = _options(args)
    if args.dry_run:
        plan = plan_sweep(options, readonly=True)
        if args.json:
            print_json(plan.to_dict())
        else:
            _print_plan(plan)
        return 0
    from llmco2.interrupts import exit_code, terminate_as_interrupt

    try:
        with terminate_as_interrupt():  # SIGTERM (a Slurm time limit, say) stops like Ctrl-C: exit 143
            summary = run_sweep(options)
    except KeyboardInterrupt as exc:
        sys.stderr.write(f"llmco2: interrupted; finished configurations are in {options.shard_out}; "
                         f"run the same command again to resume\n")
        return exit_code(exc)
    if args.json:
        print_json(summary)
    else:
        sys.stderr.write(f"measured {summary['measured']} configurations on {summary['device']} -> {summary['out']} "
                         f"({summary['rows_total']} rows in all); {summary['done_before']} were done before, "
                         f"{summary['other_gpu']} are for other GPUs"
                         + (f"; {summary['failed']} failed (see {summary['failed_file']})" if summary["failed"] else "") + "\n")
    return 0
