"""``llmco2 predict ... --serving --concurrency N | --rate R``: the flags of one request's footprint
inside a continuously batched server (:mod:`llmco2.api.server`), and its table."""

from __future__ import annotations

import argparse
from typing import Any

from llmco2.api.server import BACKGROUNDS
from llmco2.cli.common import fmt, fmt_time, print_json, scope_line
from llmco2.errors import InvalidInputError


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
    g.add_argument("--dp", type=int, default=1, metavar="N",
                   help="data-parallel replicas sharing the load (--gpus counts them all; default: --dp x --tp GPUs, or "
                        "--dp x --ep; replicas do not share experts)")
    g.add_argument("--no-calibration", action="store_true",
                   help="with --checkpoint (a learned cost model): skip the shipped correction fitted for the default checkpoint")
    if "--engine" not in p._option_string_actions:
        g.add_argument("--engine", default="vllm", help="serving engine id (vllm, sglang, tensorrt-llm, ...; default vllm)")


def run_serving(args: argparse.Namespace) -> int:
    """``llmco2 predict --serving``: print the request's footprint under load (table or JSON)."""
    from llmco2.api.server import ServedRequest, ServerLoad, serve_request
    from llmco2.cli.request_flags import assumptions, request_options

    missing = [f"--{n.replace('_', '-')}" for n in ("model", "gpu", "prompt_tokens", "gen_tokens") if getattr(args, n) is None]
    if missing:
        raise InvalidInputError(f"--serving needs {', '.join(missing)}", field="--serving")
    if getattr(args, "requests", None):
        raise InvalidInputError("--serving predicts one request; it does not take --requests", field="--serving")
    ep = getattr(args, "ep", None)
    gpus = args.gpus if args.gpus is not None else args.dp * (ep or args.tp or 1)
    request = ServedRequest(args.model, args.gpu, prompt_tokens=args.prompt_tokens, generated_tokens=args.gen_tokens,
                            batch_size=1 if args.batch_size is None else args.batch_size, gpus=gpus, tp=args.tp,
                            dp=args.dp, ep=ep)
    load = ServerLoad(concurrency=args.concurrency, rate=args.rate, background=args.background,
                      serving_requests=args.serving_requests, max_batch=args.max_batch,
                      max_batched_tokens=args.max_batched_tokens, chunked_prefill=args.chunked_prefill, seed=args.seed,
                      calibration=not args.no_calibration)
    record = serve_request(request, load, request_options(args), assumptions(args))
    if args.json:
        print_json(record)
        return 0
    _print(record)
    return 0


def _print(record: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    sv = record["serving"]
    load = f"{sv['load']['concurrency']} concurrent" if sv["load"]["concurrency"] else f"{sv['load']['rate_per_s']:g} req/s"
    replicas = f" in {sv['replicas']} replicas" if sv.get("replicas") else ""
    layout = f", tp {record['tensor_parallel']} x ep {record['expert_parallel']}" if "expert_parallel" in record else ""
    t = Table(title=f"{record['model']} on {record['num_gpus']} x {record['gpu']}{replicas} ({record['engine']}{layout}), {load}")
    for col in ("", "prefill", "decode", "total"):
        t.add_column(col, justify="left" if not col else "right")
    e, lat = record["energy_j"], record["latency_s"]
    t.add_row("energy", fmt(e["prefill"], "J"), fmt(e["decode"], "J"), fmt(e["total"], "J"))
    se = record["server_energy_j"]
    t.add_row("server energy", fmt(se["prefill"], "J"), fmt(se["decode"], "J"), fmt(se["total"], "J"))
    t.add_row("latency", fmt_time(lat["prefill"]) + " (TTFT)", fmt_time(lat["decode"]), fmt_time(lat["total"]))
    console.print(f"request: {record['batch_size']} x ({record['prompt_tokens']} prompt, {record['generated_tokens']} generated "
                  f"tokens) among {sv['requests']:,} simulated requests ({sv['workload']})")
    console.print(t)
    c = record["carbon_g"]
    a = record["assumptions"]
    console.print(scope_line(a["scope"]))
    emb = "unknown" if c["embodied"] is None else f"{c['embodied']:.4g} g"
    console.print(f"carbon ({a['scope']['scope']} scope): operational {c['operational']:.4g} g + embodied {emb} = "
                  f"[bold]{c['total']:.4g} g CO2eq[/bold]")
    console.print(f"server: {sv['j_per_output_token']:.3g} J per output token ({sv['server_j_per_output_token']:.3g} J at "
                  f"the wall, {sv['server_average_power_w']:.0f} W), mean batch {sv['mean_batch']:.1f}, GPU busy "
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
    console.print(f"assumptions: grid {a['grid']['g_co2eq_per_kwh']:g} g/kWh ({a['grid']['region'] or 'user value'}), "
                  f"PUE {a['pue']['value']:g}, GPU lifetime {a['lifetime_years']:g} years")
    for note in record["notes"]:
        console.print(f"[yellow]note:[/yellow] {note}")
