"""``llmco2 predict`` and ``llmco2 evaluate``: flags to the use cases of :mod:`llmco2.api`, results printed."""

from __future__ import annotations

import argparse
from typing import Any

from llmco2.api.cluster_parts import PARTITION_ROWS
from llmco2.api.evaluate import EVAL_FORMATS
from llmco2.cli.common import fmt, fmt_time, print_json, scope_line
from llmco2.cli.request_flags import add_scope_arguments, assumptions, request_options
from llmco2.errors import InvalidInputError


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    from llmco2.cli.analyze import add_request_args

    p = sub.add_parser("predict", help="predict energy, latency and carbon of a request (or a CSV of requests)")
    p.add_argument("--model", help="model id or HF config.json path")
    p.add_argument("--gpu", help="GPU id")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="GPUs serving the request (default 1, or --ep; with --serving, those of all replicas: default "
                        "--dp x --tp, or --dp x --ep)")
    p.add_argument("--tp", type=int, default=None, metavar="N", help="tensor-parallel degree (default: --gpus)")
    p.add_argument("--ep", type=int, default=None, metavar="N",
                   help="expert-parallel degree of a mixture-of-experts model (default 1: experts split by --tp): each "
                        "of N GPUs holds 1/N of the experts whole, tokens reach them in an all-to-all; a multiple of --tp "
                        "dividing --gpus (vLLM --enable-expert-parallel: attention tensor-parallel over --tp GPUs, "
                        "data-parallel over N / --tp groups)")
    p.add_argument("--batch-size", type=int, metavar="B")
    p.add_argument("--prompt-tokens", type=int, metavar="L")
    p.add_argument("--gen-tokens", type=int, metavar="N")
    p.add_argument("--engine", default="vllm", metavar="ENGINE",
                   help="serving engine: vllm (default), vllm-eager, hf, hf-static, tensorrt-llm, deepspeed, sglang, edge, "
                        "unknown; with --requests, the default for rows without an engine column")
    p.add_argument("--requests", default=None, metavar="FILE",
                   help="many requests, CSV or Parquet (columns model, gpu, batch_size, prompt_tokens, generated_tokens"
                        "[, num_gpus, tensor_parallel, expert_parallel, dtype, flash_attention, engine, quantisation]); "
                        "read in chunks; needs --out")
    p.add_argument("--out", default=None, metavar="CSV", help="with --requests: the input columns plus predictions "
                                                               "(committed in chunks; after Ctrl-C the same command resumes)")
    p.add_argument("--on-error", default="raise", choices=("raise", "skip"),
                   help="with --requests: a row that fails its checks stops the run (raise, default) or is left out and "
                        "listed in OUT.rejects.csv (skip)")
    p.add_argument("--region", default=None, help="grid region: ISO country code (fra, us, ...), cloud region "
                                                    "(aws:us-east-1, gcp:europe-west4, azure:westeurope) or world (default)")
    p.add_argument("--carbon-intensity", type=float, default=None, metavar="G_PER_KWH", help="grid intensity, g CO2eq/kWh")
    p.add_argument("--intensity-file", default=None, metavar="CSV",
                   help="hourly grid intensity: columns timestamp (ISO 8601, UTC), g_co2eq_per_kwh[, region], or an "
                        "Electricity Maps hourly export; a request gets the hour of --timestamp (with --requests: of its "
                        "timestamp column) and, when the file has several regions, of --region or its region column")
    p.add_argument("--timestamp", default=None, metavar="ISO", help="with --intensity-file: the request's time (UTC)")
    p.add_argument("--pue", default=None, help="power usage effectiveness: a number or a named default (google, aws, "
                                               "microsoft, industry_average, edge_device, ...)")
    p.add_argument("--lifetime-years", type=float, default=None, help="GPU lifetime for embodied carbon (default 5)")
    p.add_argument("--checkpoint", default=None, help="predictor checkpoint (default: the shipped one)")
    add_scope_arguments(p)
    add_request_args(p, single=False)
    p.add_argument("--quantisation", default=None, metavar="METHOD",
                   help="weight quantisation method: awq, gptq (Marlin/ExLlama: 4-bit weights, 16-bit arithmetic), bnb-int8, "
                        "bnb-nf4, bnb-fp4 (bitsandbytes: dequantising kernels, slower than fp16), fp8, fp8-marlin (FP8 weights, "
                        "16-bit arithmetic: vLLM on GPUs without FP8), mxfp4, nvfp4, none, "
                        "or a GGUF type (llama.cpp / Ollama: gguf-q4-k-m, also Q4_K_M, ... gguf-q8-0); "
                        "sets the weight dtype when --dtype is left out (default: the kernels --dtype implies); with "
                        "--requests, the default for rows without a quantisation column")
    p.set_defaults(dtype=None)  # --dtype left out: fp16, or the --quantisation method's own dtype
    from llmco2.cli.serving import add_serving_arguments

    add_serving_arguments(p)
    add_cluster_arguments(p)
    handlers[("predict", None)] = cmd_predict

    e = sub.add_parser("evaluate", help="accuracy of a checkpoint on measured energy rows")
    e.add_argument("--data", required=True, help="measurements: canonical table (.parquet/.csv) or a source file")
    e.add_argument("--format", default="canonical", choices=EVAL_FORMATS)
    e.add_argument("--checkpoint", default=None)
    e.add_argument("--json", action="store_true")
    handlers[("evaluate", None)] = cmd_evaluate


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--workers`` and ``--partition-rows`` of ``llmco2 predict``."""
    p.add_argument("--cluster", default=None, metavar="local|ADDRESS",
                   help="with --requests GLOB_OR_DIR --out FOLDER: predict on Dask, 'local' (worker processes on this "
                        "machine) or a scheduler address (tcp://host:8786); one Parquet part per partition, a rerun resumes")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="with --cluster local: worker processes (default: CPUs, at most 4)")
    p.add_argument("--partition-rows", type=int, default=None, metavar="N",
                   help=f"with --cluster: rows per partition and part, a multiple of 16,384 (default {PARTITION_ROWS:,})")


def _check_single(args: argparse.Namespace) -> None:
    missing = [f"--{n.replace('_', '-')}" for n in ("model", "gpu", "batch_size", "prompt_tokens", "gen_tokens")
               if getattr(args, n) is None]
    if missing:
        raise InvalidInputError(f"missing {', '.join(missing)} (or give --requests FILE.csv --out FILE.csv)", field="predict")


def cmd_predict(args: argparse.Namespace) -> int:
    if getattr(args, "serving", False):
        from llmco2.cli.serving import run_serving

        if args.intensity_file or args.timestamp:
            raise InvalidInputError("applies to request-level predictions, not to --serving", field="--intensity-file")

        return run_serving(args)
    if args.requests:
        if args.ep is not None:
            raise InvalidInputError("applies to one request; with --requests give the file an expert_parallel column",
                                    field="--ep")
        from llmco2.api.files import predict_file
        from llmco2.api.options import ClusterOptions, FileJob

        if args.intensity_file and args.carbon_intensity is not None:
            raise InvalidInputError("give either --intensity-file or --carbon-intensity, not both", field="--intensity-file")
        cluster = ClusterOptions(address=args.cluster, workers=args.workers, partition_rows=args.partition_rows,
                                 verbose=args.verbose)
        return predict_file(FileJob(args.requests, args.out, request_options(args), assumptions(args), cluster,
                                    on_error=args.on_error))
    from llmco2.api.single import single_prediction

    if args.on_error != "raise":
        raise InvalidInputError("only applies with --requests FILE (a single request has no rows to leave out)",
                                field="--on-error")
    _check_single(args)
    record, (arch, req, gpu) = single_prediction(
        args.model, args.gpu, batch_size=args.batch_size, prompt_tokens=args.prompt_tokens, generated_tokens=args.gen_tokens,
        gpus=(args.ep or 1) if args.gpus is None else args.gpus, tp=args.tp, ep=args.ep, options=request_options(args),
        assumptions=assumptions(args))
    if args.json:
        print_json(record)
        return 0
    _print_single(record, arch.id, gpu.id, req)
    return 0


def _print_single(record: dict[str, Any], model: str, gpu: str, req: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    energy, carbon, band = record["energy_j"], record["carbon_g"], record["energy_j_interval"]
    layout = f", tp {req.tensor_parallel} x ep {req.expert_parallel}" if req.expert_parallel > 1 else ""
    t = Table(title=f"{model} on {req.num_gpus} x {gpu} ({req.engine}{layout})")
    for col in ("", "prefill", "decode", "total"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("energy", fmt(energy["prefill"], "J"), fmt(energy["decode"], "J"), fmt(energy["total"], "J"))
    lo, hi = record["interval_levels"]
    t.add_row(f"interval {100 * lo:g}-{100 * hi:g}%",
              *(f"{fmt(band[p][0], 'J')} - {fmt(band[p][1], 'J')}" for p in ("prefill", "decode", "total")))
    server = record.get("server_energy_j")
    if server:
        t.add_row("server energy", *(fmt(server[p], "J") for p in ("prefill", "decode", "total")))
    lat = record["latency_s"]
    t.add_row("latency", fmt_time(lat["prefill"]), fmt_time(lat["decode"]), fmt_time(lat["total"]))
    console = Console()
    console.print(f"request: batch {req.batch_size}, {req.prompt_tokens} prompt tokens, {req.generated_tokens} generated tokens")
    console.print(t)
    emb = "unknown" if carbon["embodied"] is None else f"{carbon['embodied']:.4g} g"
    a = record["assumptions"]
    if "scope" in a:
        console.print(scope_line(a["scope"]))
    grid = a["grid"]
    where = grid["region"] or "user value"
    if "hour" in grid:  # --intensity-file
        where = f"{grid['region'] or grid['intensity_file']}, hour {grid['hour']}"
        if grid.get("dataset"):  # a bundled published dataset: named, with the attribution its licence asks for
            where += f", {grid['dataset']}"
    on = f" ({a['scope']['scope']} scope)" if "scope" in a else ""
    console.print(f"carbon{on}: operational {carbon['operational']:.4g} g + embodied {emb} = "
                  f"[bold]{carbon['total']:.4g} g CO2eq[/bold]")
    console.print(f"assumptions: engine {a['engine']['id']}, grid {grid['g_co2eq_per_kwh']:g} g/kWh ({where}), "
                  f"PUE {a['pue']['value']:g} ({a['pue'].get('id', 'user value')}), GPU lifetime {a['lifetime_years']:g} years")
    if grid.get("attribution"):
        console.print(f"grid data: {grid['attribution']}")
    for note in record["notes"]:
        console.print(f"[yellow]note:[/yellow] {note}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from llmco2.api.evaluate import evaluate

    out = evaluate(args.data, args.format, args.checkpoint)
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
    iv = out["interval"]
    if iv["coverage"] is not None:
        Console().print(f"interval {100 * iv['levels'][0]:g}-{100 * iv['levels'][1]:g}%: {100 * iv['coverage']:.1f}% of "
                        f"{iv['n']:,} measurements inside (nominal {100 * iv['nominal']:.0f}%), {100 * iv['below']:.1f}% below, "
                        f"{100 * iv['above']:.1f}% above; median width x{iv['median_width']:.2f}")
    if out["excluded_rows"]:
        Console().print("left out: " + ", ".join(f"{n:,} {r}" for r, n in out["excluded_rows"].items()))
    return 0
