"""``llmco2 report ...``: the paper's case studies, the carbon of an Azure trace, and the GPU
comparison, as figures (and JSON/CSV with ``--json``/``--csv``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from llmco2.api.options import parse_pue
from llmco2.cli.common import Parser, print_json
from llmco2.cli.request_flags import add_scope_arguments
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_output_folder, check_output_path
from llmco2.specs.limits import MAX_SIMULATED_REQUESTS, whole_number


def _carbon_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--region", default=None)
    p.add_argument("--carbon-intensity", type=float, default=None, metavar="G_PER_KWH")
    p.add_argument("--pue", default=None)
    p.add_argument("--lifetime-years", type=float, default=None)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--json", action="store_true", help="also print the numbers as JSON")


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    rep = sub.add_parser("report", help="figures: case studies, a whole Azure trace, which GPU emits least")
    rsub = rep.add_subparsers(dest="what", required=True, parser_class=Parser)
    cs = rsub.add_parser("case-studies", help="paper Figures 9-11 (carbon per GPU-second; Bloom-7b1 over 1/2/4 GPUs)")
    cs.add_argument("-o", "--out", required=True, help="folder for the PNGs")
    cs.add_argument("--gpu", default="a100-80gb")
    add_scope_arguments(cs)
    _carbon_args(cs)
    tr = rsub.add_parser("trace", help="carbon of every request of an Azure trace on a model and GPU")
    tr.add_argument("--trace", choices=("code", "conv"), default="conv")
    tr.add_argument("--model", default="llama3.1-8b")
    tr.add_argument("--gpu", default="a100-80gb")
    tr.add_argument("--gpus", type=int, default=1)
    tr.add_argument("--batch-size", type=int, default=1)
    tr.add_argument("-o", "--out", required=True, help="figure (.png/.pdf/.svg)")
    tr.add_argument("--csv", default=None, help="also write every request's footprint to this CSV")
    tr.add_argument("--intensity-file", default=None, metavar="CSV",
                    help="hourly grid intensity (timestamp, g_co2eq_per_kwh[, region], or an Electricity Maps hourly "
                         "export): each request at the hour of its trace timestamp; --region picks the file's region")
    sv = tr.add_argument_group("serving (the trace inside a continuously batched server)")
    sv.add_argument("--serving", action="store_true", help="serve the trace at a load instead of predicting requests in isolation; "
                                                           "the figure becomes J per output token against load")
    sv.add_argument("--rate", type=float, default=None, metavar="R", help="Poisson arrivals, R requests/s (default: the trace's timestamps)")
    sv.add_argument("--concurrency", type=int, default=None, metavar="N", help="closed loop of N concurrent requests")
    sv.add_argument("--engine", default="vllm", help="serving engine of the served trace (default vllm)")
    sv.add_argument("--dtype", default="bf16", help="weight dtype of the server (default bf16)")
    sv.add_argument("--sweep-gpus", default="h100,a100-80gb,l4", metavar="LIST",
                    help="servers of the load figure: GPU or GPU:COUNT, comma-separated (default h100,a100-80gb,l4)")
    sv.add_argument("--sweep-engines", default="vllm,tensorrt-llm", metavar="LIST", help="engines of the load figure")
    sv.add_argument("--sweep-requests", type=int, default=600, metavar="N", help="trace requests per point of the figure (default 600)")
    sv.add_argument("--seed", type=int, default=0)
    sv.add_argument("--no-calibration", action="store_true", help="with --checkpoint (a learned cost model): skip the shipped correction fitted for the default checkpoint")
    add_scope_arguments(tr)
    _carbon_args(tr)
    cmp_ = rsub.add_parser("compare", help="which GPU type and count emits least for one request in isolation (the "
                                           "older comparison; llmco2 compare ranks configurations under a load)",
                           description="Rank GPU types and counts by carbon per request for one request in isolation. "
                                       "This is the older spelling of the comparison: llmco2 compare ranks server "
                                       "configurations (GPU type, count, tensor/data/expert parallelism) for a model "
                                       "under a load, with latency targets.")
    cmp_.add_argument("--model", required=True)
    cmp_.add_argument("--batch-size", type=int, required=True)
    cmp_.add_argument("--prompt-tokens", type=int, required=True)
    cmp_.add_argument("--gen-tokens", type=int, required=True)
    cmp_.add_argument("--gpus", default=None, help="comma-separated GPU ids (default: the data-centre GPUs of the catalog)")
    cmp_.add_argument("-o", "--out", required=True)
    add_scope_arguments(cmp_)
    _carbon_args(cmp_)
    handlers.update({("report", "case-studies"): cmd_case_studies, ("report", "trace"): cmd_trace, ("report", "compare"): cmd_compare})


def _assumptions(args: argparse.Namespace) -> dict[str, Any]:
    scope = {"scope": args.scope, "platform": args.platform} if hasattr(args, "scope") else {}
    return dict(region_id=args.region, carbon_intensity=args.carbon_intensity, pue_value=parse_pue(args.pue),
                lifetime_years=args.lifetime_years, **scope)


def _figure_path(text: str) -> Path:
    return check_output_path(text, "--out", (".png", ".pdf", ".svg"))


def cmd_case_studies(args: argparse.Namespace) -> int:
    from llmco2.carbon.reports import carbon_per_gpu_second, plot_case_studies, scaling_study
    from llmco2.prediction.loading import load_predictor

    check_output_folder(args.out)
    predictor = load_predictor(args.checkpoint)
    kw = _assumptions(args)
    fig9 = carbon_per_gpu_second(gpu=args.gpu, predictor=predictor, **kw)
    scaling = scaling_study(gpu=args.gpu, predictor=predictor, **kw)
    paths = plot_case_studies(fig9, scaling, Path(args.out))
    sys.stderr.write("wrote " + ", ".join(map(str, paths)) + f" (carbon on the {args.scope} scope)\n")
    if args.json:
        print_json({"fig9": fig9.to_dict(orient="records"), "scaling": scaling.to_dict(orient="records")})
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    if args.serving:
        return _trace_served(args)
    from llmco2.carbon.reports import plot_trace, trace_footprint, trace_summary
    from llmco2.prediction.loading import load_predictor

    out = _figure_path(args.out)
    assumptions, hourly = _assumptions(args), None
    if args.intensity_file:
        from llmco2.carbon.hourly import load_intensity

        if args.carbon_intensity is not None:
            raise InvalidInputError("give either --intensity-file or --carbon-intensity, not both", field="--intensity-file")
        from llmco2.carbon.reports import trace_intensities

        hourly, assumptions["region_id"] = load_intensity(args.intensity_file), None
        trace_intensities(args.trace, hourly, args.region)  # every request's hour, before predicting
    frame, fp = trace_footprint(args.trace, args.model, args.gpu, args.gpus, args.batch_size,
                                load_predictor(args.checkpoint), **assumptions)
    if hourly is not None:
        from llmco2.carbon.reports import hourly_trace

        frame, fp = hourly_trace(frame, fp, args.trace, hourly, args.region)
    summary = trace_summary(frame, fp.assumptions)
    g = fp.assumptions["grid"]
    grid = f"hourly, mean {g['g_co2eq_per_kwh']:.4g}" if hourly is not None else f"{g['g_co2eq_per_kwh']:g}"
    plot_trace(summary, frame, out, f"Azure {args.trace} trace on {args.model}, {args.gpus} x {args.gpu}; grid "
                                    f"{grid} g/kWh ({g['region'] or 'user'}), PUE {fp.assumptions['pue']['value']:g}")
    if args.csv:
        frame.to_csv(args.csv, index=False)
    c = summary["carbon_kg"]
    sys.stderr.write(f"{summary['requests']:,} requests: {summary['energy_kwh']['prefill'] + summary['energy_kwh']['decode']:.3g} kWh "
                     f"GPU energy, {c['total']:.3g} kg CO2eq on the {args.scope} scope (prefill {c['operational_prefill']:.3g}, decode {c['operational_decode']:.3g}, "
                     f"embodied {c['embodied']:.3g}) -> {out}\n")
    if args.json:
        print_json(summary)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from llmco2.carbon.reports import compare_hardware, plot_compare
    from llmco2.prediction.loading import load_predictor

    out = _figure_path(args.out)
    gpus = tuple(g.strip() for g in args.gpus.split(",")) if args.gpus else None
    kw = {"gpus": gpus} if gpus else {}
    frame = compare_hardware(args.model, args.batch_size, args.prompt_tokens, args.gen_tokens,
                             predictor=load_predictor(args.checkpoint), **kw, **_assumptions(args))
    best = frame.iloc[0]
    plot_compare(frame, out, f"{args.model}: B={args.batch_size}, L={args.prompt_tokens}, G={args.gen_tokens}; least: "
                             f"{best['gpu']} x{best['num_gpus']} ({best['total_g']:.3g} g, {args.scope} scope)")
    sys.stderr.write(f"least carbon ({args.scope} scope): {best['gpu']} x{int(best['num_gpus'])} at {best['total_g']:.4g} g "
                     f"CO2eq per request on {best['platform']} ({len(frame)} options) -> {out}\n")
    if args.json:
        print_json(frame.to_dict(orient="records"))
    return 0


def _trace_served(args: argparse.Namespace) -> int:
    """``report trace --serving``: the trace served at a load, and J per output token against load."""
    from llmco2.prediction.loading import load_predictor

    if args.intensity_file:
        raise InvalidInputError("applies to the requests in isolation, not to --serving", field="--intensity-file")
    from llmco2.serving.reports import load_sweep, parse_servers, plot_load_sweep, served_summary, trace_served

    out = _figure_path(args.out)
    if args.rate is not None and args.concurrency is not None:
        raise InvalidInputError("give --rate or --concurrency, not both (neither: the trace's own timestamps)", field="--serving")
    whole_number(args.sweep_requests, "--sweep-requests", 1, MAX_SIMULATED_REQUESTS)  # the simulator's own bound
    servers = parse_servers(args.sweep_gpus)
    engines = [e.strip() for e in args.sweep_engines.split(",") if e.strip()]
    if not engines:
        raise InvalidInputError("name at least one engine (e.g. vllm)", field="--sweep-engines")
    from llmco2.serving.calibration import shipped_calibration

    # as predict --serving: the step physics, or the given checkpoint as the cost model (with the
    # shipped correction, which applies only to the checkpoint it was fitted for)
    predictor = load_predictor(args.checkpoint) if args.checkpoint else None
    calibration = shipped_calibration() if args.checkpoint and not args.no_calibration else None
    carbon = {("region" if k == "region_id" else "pue" if k == "pue_value" else k): v for k, v in _assumptions(args).items()}
    result = trace_served(args.trace, args.model, args.gpu, args.gpus, args.engine, args.rate, args.concurrency, args.seed,
                          args.dtype, predictor, calibration, **carbon)
    summary = served_summary(result)
    frame = load_sweep(args.model, servers, engines, args.trace, n=args.sweep_requests, seed=args.seed, dtype=args.dtype,
                       predictor=predictor, calibration=calibration, **carbon)
    plot_load_sweep(frame, out, f"{args.model}, Azure {args.trace} trace lengths ({args.sweep_requests} requests per point)")
    if args.csv:
        result.requests.to_csv(args.csv, index=False)
    c = summary["carbon_kg"]
    sys.stderr.write(f"{summary['requests']:,} requests served on {args.gpus} x {args.gpu} ({summary['workload']}): "
                     f"{summary['energy_kwh']:.3g} kWh GPU energy, {summary['j_per_output_token']:.3g} J per output token, "
                     f"{c['total']:.3g} kg CO2eq on the {args.scope} scope, GPU busy {100 * summary['gpu_utilisation']:.0f}%, mean batch "
                     f"{summary['mean_batch']:.1f} -> {out}\n")
    if args.json:
        print_json({"served": summary, "load_sweep": frame.to_dict(orient="records")})
    return 0
