"""``llmco2 compare``: which GPU, how many and how split serve a model cheapest in carbon at a load
while meeting its latency targets (flags to :func:`llmco2.api.compare.compare`, a table, a figure)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llmco2.api.compare import DEFAULT_REQUESTS, EP_MODES
from llmco2.api.server import BACKGROUNDS
from llmco2.cli.common import print_json
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_output_path

#: Rows the table shows (``--json`` has every configuration).
SHOWN = 15
#: Longest configuration label the table shows in 120 columns; longer ones (expert-parallel splits,
#: long GPU ids) widen the table so that no column is cut short.
LABEL_WIDTH = 26


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("compare", help="rank GPU configurations for a model under a load (carbon per output token, "
                                       "latency targets)")
    p.add_argument("--model", required=True, help="model id or HF config.json path")
    p.add_argument("--gpus", default="datacentre", metavar="LIST|datacentre|all",
                   help="GPU types to try: comma-separated ids, datacentre (default) or all")
    p.add_argument("--max-gpus", type=int, default=8, metavar="N", help="most GPUs per configuration (1, 2, 4, 8 tried; default 8)")
    p.add_argument("--tp", type=int, default=None, metavar="N",
                   help="only configurations of tensor-parallel degree N (default: every degree)")
    p.add_argument("--dp", type=int, default=None, metavar="N",
                   help="only configurations of N data-parallel replicas (default: any number; with --tp, GPUs = tp x dp)")
    p.add_argument("--ep", default="auto", type=_ep_value, metavar="N|" + "|".join(EP_MODES),
                   help="expert parallelism of a mixture-of-experts model: auto (default) also tries each split with "
                        "the experts spread over all its GPUs (ep = GPUs; vLLM's --enable-expert-parallel), "
                        "off never, only nothing else (a dense model is refused); a number N only the "
                        "configurations of expert-parallel degree N (1: as off)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, metavar="R", help="open loop: Poisson arrivals, R requests per second")
    load.add_argument("--concurrency", type=int, metavar="N", help="closed loop: N requests in the server at once")
    p.add_argument("--background", default="conv", choices=BACKGROUNDS,
                   help="request lengths: Azure conv or code trace, or fixed (--prompt-tokens/--gen-tokens)")
    p.add_argument("--prompt-tokens", type=int, default=None, metavar="L", help="with --background fixed")
    p.add_argument("--gen-tokens", type=int, default=None, metavar="N", help="with --background fixed")
    p.add_argument("--slo-ttft", type=float, default=None, metavar="S", help="time-to-first-token target (s)")
    p.add_argument("--slo-tpot", type=float, default=None, metavar="S", help="time-per-output-token target (s)")
    p.add_argument("--slo-percentile", type=float, default=90.0, metavar="P", help="percentile the targets apply at (default 90)")
    p.add_argument("--serving-requests", type=int, default=DEFAULT_REQUESTS, metavar="N",
                   help=f"requests simulated per replica or expert-parallel server (default {DEFAULT_REQUESTS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the request lengths and arrivals")
    p.add_argument("--engine", default="vllm", help="serving engine id (default vllm)")
    p.add_argument("--dtype", default="bf16", help="weight dtype (default bf16)")
    p.add_argument("--region", default=None, help="grid region (default world)")
    p.add_argument("--carbon-intensity", type=float, default=None, metavar="G_PER_KWH", help="grid intensity, g CO2eq/kWh")
    p.add_argument("--pue", default=None, help="power usage effectiveness: a number or a named default")
    p.add_argument("--lifetime-years", type=float, default=None, help="GPU lifetime for embodied carbon (default 5)")
    p.add_argument("--scope", default="server", choices=("gpu", "server"),
                   help="carbon on the whole server (GPUs, the host's share, power-supply losses; default) or the GPUs alone")
    p.add_argument("--platform", default=None, metavar="ID", help="server platform (default: each GPU's usual one)")
    p.add_argument("-o", "--out", default=None, metavar="FIG", help="write the figure (.png, .pdf or .svg; needs the plots extra)")
    p.add_argument("--json", action="store_true", help="print every configuration as JSON")
    handlers[("compare", None)] = cmd_compare


def _ep_value(text: str) -> str | int:
    """``--ep``'s text: a number as an int (the library refuses those below 1), a mode as it is."""
    try:
        return int(text)
    except ValueError:
        return text


def cmd_compare(args: argparse.Namespace) -> int:
    from llmco2.api.compare import compare
    from llmco2.api.options import Assumptions, RequestOptions

    if args.background != "fixed" and (args.prompt_tokens is not None or args.gen_tokens is not None):
        raise InvalidInputError("--prompt-tokens and --gen-tokens apply with --background fixed", field="--background")
    out = check_output_path(args.out, "--out", (".png", ".pdf", ".svg")) if args.out else None
    table = compare(args.model, args.gpus, rate=args.rate, concurrency=args.concurrency, background=args.background,
                    prompt_tokens=args.prompt_tokens, generated_tokens=args.gen_tokens, slo_ttft_s=args.slo_ttft,
                    slo_tpot_s=args.slo_tpot, slo_percentile=args.slo_percentile, max_gpus=args.max_gpus,
                    serving_requests=args.serving_requests, seed=args.seed, expert_parallel=args.ep,
                    tp=args.tp, dp=args.dp,
                    options=RequestOptions(engine=args.engine, dtype=args.dtype),
                    assumptions=Assumptions(region=args.region, carbon_intensity=args.carbon_intensity, pue=args.pue,
                                            lifetime_years=args.lifetime_years, scope=args.scope, platform=args.platform))
    if out is not None:
        from llmco2.api.compare_figure import plot_comparison

        load = f"{args.rate:g} req/s" if args.rate is not None else f"{args.concurrency} concurrent"
        plot_comparison(table, out, f"{table.attrs['model']}, {load} ({args.background} lengths)", args.slo_tpot)
    if args.json:
        print_json({"verdict": table.attrs["verdict"], "left_out": table.attrs["left_out"],
                    "assumptions": table.attrs["assumptions"], "options": _records(table)})
    else:
        _print(table, args)
    if out is not None:
        sys.stdout.flush()
        sys.stderr.write(f"figure -> {out}\n")
    return 0


def _records(table: Any) -> list[dict[str, Any]]:
    """The rows as JSON-ready dicts (NumPy scalars as Python numbers, NaN as null), numbers unrounded."""
    import numpy as np

    def plain(v: Any) -> Any:
        v = v.item() if isinstance(v, np.generic) else v
        return None if isinstance(v, float) and v != v else v

    return [{k: plain(v) for k, v in row.items()} for row in table.to_dict(orient="records")]


def _print(table: Any, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    tpot, ttft = (next(c for c in table.columns if c.startswith(p)) for p in ("tpot_p", "ttft_p"))
    load = f"{args.rate:g} requests/s" if args.rate is not None else f"{args.concurrency} concurrent requests"
    t = Table(title=f"{table.attrs['model']} at {load}, {args.background} lengths: {len(table)} configurations")
    pct = f"p{args.slo_percentile:g}"
    for col in ("#", "configuration", "mg CO2/token", "10-90%", "GPU J/tok", "wall kW", f"TTFT {pct}", f"TPOT {pct}", "ok"):
        t.add_column(col, justify="left" if col in ("configuration", "ok") else "right", no_wrap=True,
                     min_width=8 if col == "ok" else None)
    for row in table.head(SHOWN).itertuples(index=False):
        r = row._asdict()
        flags = ("meets" if r["meets_slo"] else ("behind" if not r["stable"] else "misses")) + (" *" if r["extrapolated"] else "")
        t.add_row(str(r["rank"]), r["label"], f"{1e3 * r['g_per_output_token']:.3g}",
                  f"{1e3 * r['g_per_output_token_low']:.2g}-{1e3 * r['g_per_output_token_high']:.2g}",
                  f"{r['j_per_output_token']:.3g}", f"{(r['server_power_w'] or r['power_w']) / 1e3:.3g}", f"{r[ttft]:.3g} s", f"{1e3 * r[tpot]:.3g} ms",
                  flags)
    longest = max((len(label) for label in table["label"].head(SHOWN)), default=0)
    console = Console(width=max(Console().width, 120 + max(0, longest - LABEL_WIDTH)))
    console.print(t)
    if len(table) > SHOWN:
        console.print(f"... {len(table) - SHOWN} more (--json lists every configuration)")
    console.print(f"verdict: {table.attrs['verdict']}")
    console.print("ok: meets = meets the targets and keeps up; behind = the queue grows at this load; "
                  "* = GPU, model family or engine the physics fit has not seen (an unseen GPU or family widens the interval)")
    for line in table.attrs["left_out"]:
        console.print(f"left out: {line}")
    a = table.attrs["assumptions"]
    console.print(f"assumptions: carbon on the {args.scope} scope, grid {a['grid']['g_co2eq_per_kwh']:g} g/kWh "
                  f"({a['grid']['region'] or 'user value'}), PUE {a['pue']['value']:g}, GPU lifetime {a['lifetime_years']:g} years")
