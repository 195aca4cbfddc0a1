"""``llmco2 predict ... --serving --concurrency N | --rate R``: one request's footprint inside a
continuously batched server.

The server (model, GPU type and count, engine, dtype) runs background traffic — lengths from an
Azure trace (default ``conv``) or the request's own lengths (``--background fixed``) — at the
given load; the request (``--batch-size`` copies of it) arrives in the middle of that traffic, and
its share of every iteration it took part in is its energy. Output as ``llmco2 predict`` (energy,
latency, carbon), plus the server's aggregates.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from llmco2.cli.common import fmt, fmt_time, parse_pue, print_json
from llmco2.errors import InvalidInputError

if TYPE_CHECKING:
    import numpy as np

BACKGROUNDS = ("conv", "code", "fixed")
#: Lowest arrival rate a served request is simulated at (requests/s): one a day. Idle time between
#: arrivals is charged to the requests, so a rate near zero would charge one request for years of idling.
MIN_RATE = 1.0 / 86_400


def add_serving_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--serving`` options of ``llmco2 predict`` (``--engine`` too, unless the parser has it)."""
    g = p.add_argument_group("serving (a request inside a continuously batched server)")
    g.add_argument("--serving", action="store_true", help="predict the request inside a loaded server (needs --concurrency or --rate)")
    g.add_argument("--concurrency", type=int, default=None, metavar="N", help="closed loop: N requests in the server at once")
    g.add_argument("--rate", type=float, default=None, metavar="R", help="open loop: Poisson arrivals, R requests per second")
    g.add_argument("--background", default="conv", choices=BACKGROUNDS,
                   help="lengths of the other requests: Azure conv or code trace, or the request's own (fixed)")
    g.add_argument("--serving-requests", type=int, default=2000, metavar="N", help="background requests to simulate (default 2000)")
    g.add_argument("--max-batch", type=int, default=256, metavar="N", help="most sequences per iteration (vLLM max_num_seqs, 256)")
    g.add_argument("--max-batched-tokens", type=int, default=8192, metavar="N", help="token budget per iteration (default 8192)")
    g.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                   help="mix prompt chunks with decodes (default) or prefill whole prompts in their own iterations")
    g.add_argument("--seed", type=int, default=0, help="seed of the background lengths and arrivals")
    g.add_argument("--no-calibration", action="store_true",
                   help="with --checkpoint (a learned cost model): skip the shipped correction fitted for the default checkpoint")
    if "--engine" not in p._option_string_actions:
        g.add_argument("--engine", default="vllm", help="serving engine id (vllm, sglang, tensorrt-llm, ...; default vllm)")


def _check(args: argparse.Namespace) -> None:
    if (args.concurrency is None) == (args.rate is None):
        raise InvalidInputError("give exactly one load for --serving: --concurrency N or --rate R", field="--serving")
    if args.concurrency is not None and args.concurrency < 1:
        raise InvalidInputError(f"must be >= 1, got {args.concurrency}", field="--concurrency")
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise InvalidInputError(f"must be a positive number of requests per second, got {args.rate}", field="--rate")
    if args.rate is not None and args.rate < MIN_RATE:
        raise InvalidInputError(f"{args.rate:g} requests/s is below {MIN_RATE:g} (one request a day): the server would idle for "
                                f"{1 / args.rate:.3g} s between requests and charge that idle energy to them", field="--rate")
    if args.serving_requests < 1:
        raise InvalidInputError(f"must be >= 1, got {args.serving_requests}", field="--serving-requests")
    missing = [f"--{n.replace('_', '-')}" for n in ("model", "gpu", "prompt_tokens", "gen_tokens") if getattr(args, n) is None]
    if missing:
        raise InvalidInputError(f"--serving needs {', '.join(missing)}", field="--serving")
    if getattr(args, "requests", None):
        raise InvalidInputError("--serving predicts one request; it does not take --requests", field="--serving")
    for name in ("prompt_tokens", "gen_tokens"):
        if getattr(args, name) < 1:
            raise InvalidInputError(f"must be >= 1, got {getattr(args, name)}", field=f"--{name.replace('_', '-')}")


def serving_workload(args: argparse.Namespace, copies: int) -> tuple[Any, np.ndarray]:
    """Background traffic with ``copies`` of the request inserted halfway; (workload, indices of the copies)."""
    import numpy as np

    from llmco2.serving.workload import Workload, poisson_arrivals, trace_lengths

    n = args.serving_requests
    if args.background == "fixed":
        prompt, output = np.full(n, args.prompt_tokens), np.full(n, args.gen_tokens)
    else:
        prompt, output, _ = trace_lengths(args.background, n, args.seed)
    at = n // 2
    prompt = np.insert(prompt, at, np.full(copies, args.prompt_tokens))
    output = np.insert(output, at, np.full(copies, args.gen_tokens))
    mine = np.arange(at, at + copies)
    if args.concurrency is not None:
        return Workload(prompt, output, None, args.concurrency, f"{args.background} background, closed loop of "
                                                                   f"{args.concurrency}"), mine
    arrivals = poisson_arrivals(len(prompt), args.rate, args.seed)
    arrivals[mine] = arrivals[at]  # the copies arrive together
    return Workload(prompt, output, np.maximum.accumulate(arrivals), None,
                    f"{args.background} background, Poisson {args.rate:g} req/s"), mine


def run_serving(args: argparse.Namespace) -> int:
    """``llmco2 predict --serving``: print the request's footprint under load (table or JSON)."""
    from llmco2.models.predict import load_predictor
    from llmco2.serving.api import serve, server_setup

    if getattr(args, "gpus", None) is None:
        args.gpus = 1  # --gpus defaults to one GPU (None only marks it as not given)
    _check(args)
    copies = args.batch_size or 1
    if copies < 1:
        raise InvalidInputError(f"must be >= 1, got {copies}", field="--batch-size")
    engine = getattr(args, "engine", None) or "vllm"
    server_setup(args.model, args.gpu, args.gpus, args.tp, engine, args.dtype)  # fail on bad input before loading
    workload, mine = serving_workload(args, copies)
    checkpoint = getattr(args, "checkpoint", None)
    calibration = None
    if checkpoint and not args.no_calibration:
        from llmco2.serving.calibration import shipped_calibration

        calibration = shipped_calibration()  # applied only where it belongs to the given checkpoint
    result = serve(args.model, args.gpu, workload, num_gpus=args.gpus, tp=args.tp, engine=engine, dtype=args.dtype,
                   max_batch=args.max_batch, max_batched_tokens=args.max_batched_tokens, chunked_prefill=args.chunked_prefill,
                   predictor=load_predictor(checkpoint) if checkpoint else None, region_id=args.region,
                   carbon_intensity=args.carbon_intensity, pue_value=parse_pue(args.pue), lifetime_years=args.lifetime_years, calibration=calibration)
    rows = result.requests.iloc[mine]
    record = _record(args, copies, rows, result)
    if args.json:
        e, c = record["energy_j"], record["carbon_g"]  # the flat keys of ``llmco2 predict --json`` too
        print_json({**record, "prefill": e["prefill"], "decode": e["decode"], "total": e["total"],
                    "operational": c["operational"], "embodied": c["embodied"]})
        return 0
    _print(record)
    return 0


def _record(args: argparse.Namespace, copies: int, rows: Any, result: Any) -> dict[str, Any]:
    s = result.summary
    emb = rows["embodied_g"]
    ttft, e2e = float(rows["ttft_s"].max()), float(rows["e2e_s"].max())
    server = result.assumptions["server"]
    return {
        "model": server["model"], "gpu": server["gpu"], "num_gpus": server["num_gpus"], "engine": server["engine"],
        "batch_size": copies, "prompt_tokens": args.prompt_tokens, "generated_tokens": args.gen_tokens,
        "energy_j": {"prefill": float(rows["prefill_j"].sum()), "decode": float(rows["decode_j"].sum()),
                     "total": float(rows["energy_j"].sum())},
        "latency_s": {"prefill": ttft, "decode": e2e - ttft, "total": e2e, "ttft": ttft,
                      "tpot": None if args.gen_tokens < 2 else float(rows["tpot_s"].mean())},
        "carbon_g": {"operational": float(rows["operational_g"].sum()),
                     "embodied": None if emb.isna().any() else float(emb.sum()), "total": float(rows["total_g"].sum())},
        "serving": {"load": {"concurrency": args.concurrency, "rate_per_s": args.rate},
                    "workload": result.assumptions["workload"],
                    **{k: s[k] for k in ("requests", "j_per_output_token", "j_per_output_token_interval", "gpu_utilisation", "average_power_w",
                                         "mean_batch", "makespan_s", "preemptions", "ttft_s", "tpot_s")},
                    "limits": {k: server[k] for k in ("max_batch", "max_batched_tokens", "chunked_prefill",
                                                      "kv_capacity_tokens")},
                    "idle_w": server["idle_w"], "idle_source": server["idle_source"], "calibration": server["calibration"],
                    "cost_model": server["cost_model"], "interval": server["interval"]},
        "assumptions": {k: v for k, v in result.assumptions.items() if k not in ("server", "workload")},
    }


def _print(record: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    sv = record["serving"]
    load = f"{sv['load']['concurrency']} concurrent" if sv["load"]["concurrency"] else f"{sv['load']['rate_per_s']:g} req/s"
    t = Table(title=f"{record['model']} on {record['num_gpus']} x {record['gpu']} ({record['engine']}), {load}")
    for col in ("", "prefill", "decode", "total"):
        t.add_column(col, justify="left" if not col else "right")
    e, lat = record["energy_j"], record["latency_s"]
    t.add_row("energy", fmt(e["prefill"], "J"), fmt(e["decode"], "J"), fmt(e["total"], "J"))
    t.add_row("latency", fmt_time(lat["prefill"]) + " (TTFT)", fmt_time(lat["decode"]), fmt_time(lat["total"]))
    console.print(f"request: {record['batch_size']} x ({record['prompt_tokens']} prompt, {record['generated_tokens']} generated "
                  f"tokens) among {sv['requests']:,} simulated requests ({sv['workload']})")
    console.print(t)
    c = record["carbon_g"]
    emb = "unknown" if c["embodied"] is None else f"{c['embodied']:.4g} g"
    console.print(f"carbon: operational {c['operational']:.4g} g + embodied {emb} = [bold]{c['total']:.4g} g CO2eq[/bold]")
    console.print(f"server: {sv['j_per_output_token']:.3g} J per output token, mean batch {sv['mean_batch']:.1f}, GPU busy "
                  f"{100 * sv['gpu_utilisation']:.0f}% of the time, average power {sv['average_power_w']:.0f} W "
                  f"(idle {sv['idle_w']:.0f} W: {sv['idle_source']})")
    cal = sv["calibration"]
    if cal:
        extra = " and decode-step latency" if cal.get("decode_latency") else ""
        console.print(f"calibration: busy energy x {cal['factor']:.3g}{extra}, fitted on {cal['rows']} ML.ENERGY v3 H100 rows")
    else:
        console.print(f"cost model: {sv['cost_model']}, no correction")
    if sv.get("j_per_output_token_interval"):
        lo, hi = sv["j_per_output_token_interval"]
        console.print(f"J per output token, 10-90% interval: {lo:.3g} - {hi:.3g} ({sv['interval']})")
    a = record["assumptions"]
    console.print(f"assumptions: grid {a['grid']['g_co2eq_per_kwh']:g} g/kWh ({a['grid']['region'] or 'user value'}), "
                  f"PUE {a['pue']['value']:g}, GPU lifetime {a['lifetime_years']:g} years")
