"""``llmco2 predict`` (DESIGN.md convention 3) and ``llmco2 evaluate`` (convention 4)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llmco2.cli.common import fmt, fmt_time, print_json
from llmco2.errors import InvalidInputError

EVAL_FORMATS = ("canonical", "co2meter", "argonne", "mlenergy_v2", "mlenergy_v3", "wilkins", "delavande", "tokenpowerbench")


def _pue(text: str | None) -> float | str | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    from llmco2.cli.analyze import _add_request_args

    p = sub.add_parser("predict", help="predict energy, latency and carbon of a request (or a CSV of requests)")
    p.add_argument("--model", help="model id or HF config.json path")
    p.add_argument("--gpu", help="GPU id")
    p.add_argument("--gpus", type=int, default=1, metavar="N")
    p.add_argument("--tp", type=int, default=None, metavar="N")
    p.add_argument("--batch-size", type=int, metavar="B")
    p.add_argument("--prompt-tokens", type=int, metavar="L")
    p.add_argument("--gen-tokens", type=int, metavar="N")
    p.add_argument("--requests", default=None, metavar="CSV", help="many requests (columns model, gpu, num_gpus, batch_size, "
                                                                   "prompt_tokens, generated_tokens[, ...]); needs --out")
    p.add_argument("--out", default=None, metavar="CSV", help="with --requests: the input columns plus predictions")
    p.add_argument("--region", default=None, help="grid region: ISO country code (fra, us, ...), cloud region "
                                                    "(aws:us-east-1, gcp:europe-west4, azure:westeurope) or world (default)")
    p.add_argument("--carbon-intensity", type=float, default=None, metavar="G_PER_KWH", help="grid intensity, g CO2eq/kWh")
    p.add_argument("--pue", default=None, help="power usage effectiveness: a number or a named default (google, aws, "
                                               "microsoft, industry_average, edge_device, ...)")
    p.add_argument("--lifetime-years", type=float, default=None, help="GPU lifetime for embodied carbon (default 5)")
    p.add_argument("--checkpoint", default=None, help="predictor checkpoint (default: the shipped one)")
    _add_request_args(p, single=False)
    handlers[("predict", None)] = cmd_predict

    e = sub.add_parser("evaluate", help="accuracy of a checkpoint on measured energy rows")
    e.add_argument("--data", required=True, help="measurements: canonical table (.parquet/.csv) or a source file")
    e.add_argument("--format", default="canonical", choices=EVAL_FORMATS)
    e.add_argument("--checkpoint", default=None)
    e.add_argument("--json", action="store_true")
    handlers[("evaluate", None)] = cmd_evaluate


def _single_items(args: argparse.Namespace) -> list[Any]:
    from llmco2.cli.analyze import _request_from_args

    missing = [f"--{n.replace('_', '-')}" for n in ("model", "gpu", "batch_size", "prompt_tokens", "gen_tokens")
               if getattr(args, n) is None]
    if missing:
        raise InvalidInputError(f"missing {', '.join(missing)} (or give --requests FILE.csv --out FILE.csv)", field="predict")
    return [_request_from_args(args)]


def cmd_predict(args: argparse.Namespace) -> int:
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.models.predict import load_predictor

    options = dict(region_id=args.region, carbon_intensity=args.carbon_intensity, pue_value=_pue(args.pue),
                   lifetime_years=args.lifetime_years)
    if args.requests:
        return _predict_file(args, options)
    items = _single_items(args)  # the request is checked before the checkpoint is loaded
    fp = predict_footprint(items, load_predictor(args.checkpoint), **options)
    arch, req, gpu = items[0]
    record = {"model": arch.id, "gpu": gpu.id, "num_gpus": req.num_gpus, "batch_size": req.batch_size,
              "prompt_tokens": req.prompt_tokens, "generated_tokens": req.generated_tokens, **fp.record(0)}
    energy, carbon = record["energy_j"], record["carbon_g"]
    if args.json:
        print_json({**record, "prefill": energy["prefill"], "decode": energy["decode"], "total": energy["total"],
                    "operational": carbon["operational"], "embodied": carbon["embodied"]})
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{arch.id} on {req.num_gpus} x {gpu.id}")
    for col in ("", "prefill", "decode", "total"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("energy", fmt(energy["prefill"], "J"), fmt(energy["decode"], "J"), fmt(energy["total"], "J"))
    lat = record["latency_s"]
    t.add_row("latency", fmt_time(lat["prefill"]), fmt_time(lat["decode"]), fmt_time(lat["total"]))
    console = Console()
    console.print(f"request: batch {req.batch_size}, {req.prompt_tokens} prompt tokens, {req.generated_tokens} generated tokens")
    console.print(t)
    emb = "unknown" if carbon["embodied"] is None else f"{carbon['embodied']:.4g} g"
    a = record["assumptions"]
    grid = a["grid"]
    where = grid["region"] or "user value"
    console.print(f"carbon: operational {carbon['operational']:.4g} g + embodied {emb} = [bold]{carbon['total']:.4g} g CO2eq[/bold]")
    console.print(f"assumptions: grid {grid['g_co2eq_per_kwh']:g} g/kWh ({where}), PUE {a['pue']['value']:g} "
                  f"({a['pue'].get('id', 'user value')}), GPU lifetime {a['lifetime_years']:g} years")
    for note in record["notes"]:
        console.print(f"[yellow]note:[/yellow] {note}")
    return 0


def _predict_file(args: argparse.Namespace, options: dict[str, Any]) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from llmco2.analytic.batch import read_request_csv
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.models.predict import load_predictor

    if not args.out:
        raise InvalidInputError("--requests needs --out FILE.csv for the predictions", field="--out")
    out = Path(args.out)
    if not out.parent.exists():
        raise InvalidInputError(f"folder {str(out.parent)!r} does not exist", field="--out")
    start = time.perf_counter()
    src = Path(args.requests)
    items = read_request_csv(src, defaults=args)
    predictor = load_predictor(args.checkpoint)
    import pandas as pd

    frame = pd.read_csv(src)
    show = sys.stderr.isatty() and len(items) > 20_000
    with Progress(TextColumn("predicting"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn(),
                  disable=not show, transient=True) as bar:
        task = bar.add_task("predict", total=len(items))
        fp = predict_footprint(items, predictor, progress=lambda k: bar.advance(task, k), **options)
    frame["prefill_j"], frame["decode_j"], frame["total_j"] = fp.prefill_j, fp.decode_j, fp.total_j
    frame["latency_s"] = fp.latency_s
    frame["operational_g"], frame["embodied_g"], frame["total_g"] = fp.operational_g, fp.embodied_g, fp.total_g
    frame["extrapolated"] = fp.extrapolated
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.to_csv(tmp, index=False)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    seconds = time.perf_counter() - start
    g = fp.assumptions["grid"]
    sys.stderr.write(f"predicted {len(items):,} requests in {seconds:.2f} s ({len(items) / seconds:,.0f}/s) -> {out}; "
                     f"grid {g['g_co2eq_per_kwh']:g} g/kWh ({g['region'] or 'user value'}), PUE {fp.assumptions['pue']['value']:g}\n")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from llmco2.models.experiment import evaluate
    from llmco2.models.predict import load_predictor

    predictor = load_predictor(args.checkpoint)
    if args.format == "canonical":
        from llmco2.data.schema import read_table

        table, _ = read_table(args.data, on_error="raise")
    else:
        from llmco2.data.importers import import_file

        table = import_file(args.format, args.data).table
    metrics = evaluate(predictor, table)
    out = {k: metrics[k] for k in ("n", "mape", "median_ape", "eba_5", "eba_10", "eba_30")}
    out.update(per_phase=metrics["per_phase"], per_device=metrics["per_device"], per_family=metrics["per_family"],
               excluded_rows=metrics["excluded_rows"])
    if args.json:
        print_json(out)
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{args.data}: {out['n']:,} rows with positive measured energy")
    for col in ("group", "rows", "MAPE", "median APE", "EBA(5%)", "EBA(10%)", "EBA(30%)"):
        t.add_column(col, justify="left" if col == "group" else "right")

    def row(name: str, s: dict[str, Any]) -> None:
        def pct(x: float | None) -> str:
            return "-" if x is None else f"{100 * x:.1f}%"

        t.add_row(name, f"{s['n']:,}", pct(s["mape"]), pct(s["median_ape"]), pct(s["eba_5"]), pct(s["eba_10"]), pct(s["eba_30"]))

    row("all", out)
    for key in ("per_phase", "per_device", "per_family"):
        for name, s in out[key].items():
            row(f"{key[4:]}: {name}", s)
    Console().print(t)
    if out["excluded_rows"]:
        Console().print("left out: " + ", ".join(f"{n:,} {r}" for r, n in out["excluded_rows"].items()))
    return 0
