"""``llmco2 analyze ...`` and ``llmco2 catalog``: the analytic engine on the command line."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from llmco2.cli.common import Parser, fmt, fmt_time, print_json
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_output_path

log = logging.getLogger(__name__)


# -- argument groups -------------------------------------------------------------------------------
def add_request_args(p: argparse.ArgumentParser, single: bool = True) -> None:
    if single:
        p.add_argument("--model", required=True, help="model id (e.g. llama3.1-8b) or path to a HF config.json")
        p.add_argument("--gpu", required=True, help="GPU id (e.g. a100-80gb, h100)")
        p.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs serving the request (default 1)")
        p.add_argument("--tp", type=int, default=None, metavar="N", help="tensor-parallel degree (default: --gpus)")
        p.add_argument("--batch-size", type=int, required=True, metavar="B")
        p.add_argument("--prompt-tokens", type=int, required=True, metavar="L")
        p.add_argument("--gen-tokens", type=int, required=True, metavar="N", help="generated tokens (the first comes from prefill)")
    p.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=True,
                   help="fused attention kernel (default) or matmul_qk/softmax/matmul_sv")
    p.add_argument("--dtype", default="fp16", metavar="DTYPE", help="weight dtype: fp32, fp16, bf16, fp8, int8, int4 (default fp16)")
    p.add_argument("--act-dtype", default=None, metavar="DTYPE", help="activation dtype (default: fp16/bf16 as the weights)")
    p.add_argument("--kv-dtype", default=None, metavar="DTYPE", help="KV-cache dtype (default: activation dtype)")
    p.add_argument("--causal", action="store_true", help="count prefill attention over the causal triangle, not the full square")
    p.add_argument("--ignore-context", action="store_true", help="allow prompt + generated tokens beyond the model's context")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--approximate", action="store_true",
                   help="with a config.json: map fields and architectures llmco2 does not model onto the nearest modelled "
                        "one (the notes say what was approximated) instead of refusing them")


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    """Add ``llmco2 analyze ...`` and ``llmco2 catalog`` to the top-level subparsers."""
    analyze = sub.add_parser("analyze", help="analytic cost of kernels, layers and models")
    asub = analyze.add_subparsers(dest="what", required=True, parser_class=Parser)

    att = asub.add_parser("attention", help="per-chip cost of one attention block under TP/CP (seed 003 rules)")
    att.add_argument("--hidden-size", type=int, required=True)
    att.add_argument("--num-heads", type=int, required=True)
    att.add_argument("--batch-size", type=int, required=True)
    att.add_argument("--seq-len", type=int, required=True, help="prompt length (prefill) or past cached length (decode)")
    att.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    att.add_argument("--new-tokens", type=int, default=1)
    att.add_argument("--tp", type=int, default=1)
    att.add_argument("--cp", type=int, default=1)
    att.add_argument("--cp-mode", choices=("kv-sharded", "kv-allgather"), default="kv-sharded")
    att.add_argument("--decode-projections", choices=("qkv", "q", "none"), default="qkv")
    att.add_argument("--kv-len", choices=("total", "past"), default="total")
    att.add_argument("--no-materialize-hidden", dest="materialize_hidden", action="store_false")
    att.add_argument("--bytes-per-elem", type=int, default=2)
    att.add_argument("--softmax-stat-bytes", type=int, default=4)
    att.add_argument("--json", action="store_true")

    layer = asub.add_parser("layer", help="kernel DAG of one transformer layer, prefill and decode features")
    add_request_args(layer)
    layer.add_argument("--requests", default=None, help=argparse.SUPPRESS)

    model = asub.add_parser("model", help="whole-model summary of a request: totals, time at roofline, dominant kernels")
    add_request_args(model)

    batch = asub.add_parser("batch", help="vectorised analysis of many requests from a CSV")
    batch.add_argument("--requests", required=True, metavar="CSV",
                       help="columns model, gpu, num_gpus, batch_size, prompt_tokens, generated_tokens "
                            "[, tensor_parallel, dtype, flash_attention]")
    batch.add_argument("--out", required=True, metavar="FILE",
                       help="output table (.csv or .parquet): every input column with its type, plus per-phase totals")
    add_request_args(batch, single=False)

    flops = asub.add_parser("flops", help="FLOPs split into tensor-core, CUDA-core and SFU work per module (seed 001), and MFU")
    flops.add_argument("--model", required=True)
    flops.add_argument("--batch-size", type=int, required=True)
    flops.add_argument("--seq-len", type=int, required=True, help="tokens per sequence (prefill) or cached length (decode)")
    flops.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    flops.add_argument("--backward", action="store_true", help="also count the backward pass")
    flops.add_argument("--gpu", default=None, help="with --elapsed-s: GPU whose dense peak the MFU is relative to")
    flops.add_argument("--gpus", type=int, default=1)
    flops.add_argument("--dtype", default="bf16")
    flops.add_argument("--elapsed-s", type=float, default=None, help="measured time of the pass, for MFU")
    flops.add_argument("--json", action="store_true")

    table = asub.add_parser("table", help="per-layer prefill/decode table of compute, memory and communication (seed 000)")
    table.add_argument("--model", required=True)
    table.add_argument("--batch-size", type=int, required=True)
    table.add_argument("--seq-len", type=int, required=True)
    table.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    table.add_argument("--tp", type=int, default=1)
    table.add_argument("--json", action="store_true")

    cat = sub.add_parser("catalog", help="list the GPUs, models and engines llmco2 knows")
    cat.add_argument("which", choices=("gpus", "models", "engines"))
    cat.add_argument("--json", action="store_true")
    handlers.update({
        ("analyze", "attention"): cmd_analyze_attention,
        ("analyze", "layer"): cmd_analyze_layer,
        ("analyze", "model"): cmd_analyze_model,
        ("analyze", "batch"): cmd_analyze_batch,
        ("analyze", "flops"): cmd_analyze_flops,
        ("analyze", "table"): cmd_analyze_table,
        ("catalog", None): cmd_catalog,
    })


# -- helpers ---------------------------------------------------------------------------------------
def _request_from_args(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from llmco2.specs import Request, get_gpu, get_model, validate_request

    arch = get_model(args.model, approximate=getattr(args, "approximate", False))
    gpu = get_gpu(args.gpu)
    req = Request(
        batch_size=args.batch_size, prompt_tokens=args.prompt_tokens, generated_tokens=args.gen_tokens,
        num_gpus=args.gpus, tensor_parallel=args.tp, weight_dtype=args.dtype, activation_dtype=args.act_dtype,
        kv_dtype=args.kv_dtype, flash_attention=args.flash_attention, causal=args.causal,
    )
    validate_request(req, arch, gpu, check_context=not args.ignore_context)
    return arch, req, gpu


# -- commands --------------------------------------------------------------------------------------
def cmd_analyze_attention(args: argparse.Namespace) -> int:
    from llmco2.analytic.parallel import attention_cost

    cost = attention_cost(
        hidden_size=args.hidden_size, num_heads=args.num_heads, batch_size=args.batch_size, seq_len=args.seq_len,
        phase=args.phase, new_tokens=args.new_tokens, tp=args.tp, cp=args.cp, cp_mode=args.cp_mode,
        decode_projections=args.decode_projections, kv_len=args.kv_len, materialize_hidden=args.materialize_hidden,
        bytes_per_elem=args.bytes_per_elem, softmax_stat_bytes=args.softmax_stat_bytes,
    )
    if args.json:
        print_json(cost.to_dict())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Attention block, {args.phase}, tp={args.tp} cp={args.cp}")
    table.add_column("metric")
    table.add_column("per chip", justify="right")
    table.add_column("total", justify="right")
    d = cost.to_dict()
    for key, unit in (("flops", "FLOP"), ("weight_memory", "B"), ("activation_memory", "B"), ("kv_cache", "B")):
        table.add_row(f"{key} ({unit})", f"{d[key + '_per_chip']:,}", f"{d[key + '_total']:,}")
    table.add_row("communication_bytes", f"{d['communication_bytes']:,}", "")
    Console().print(table)
    return 0


def _layer_payload(arch: Any, req: Any, gpu: Any) -> dict[str, Any]:
    from llmco2.analytic.features import global_features
    from llmco2.analytic.layer import analyze_layer
    from llmco2.analytic.layer_dag import layer_graph
    from llmco2.analytic.model import model_totals, summary_record

    analysis = analyze_layer(arch, req, gpu, check_context=False)  # checked by _request_from_args
    totals = model_totals(analysis)
    graph = layer_graph(analysis)
    return {
        "model": arch.id,
        "gpu": gpu.id,
        **graph,
        "global": global_features(arch, req, gpu, analysis, totals),
        "summary": summary_record(analysis, totals),
    }


def _print_summary(console: Any, summary: dict[str, Any], title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for col in ("phase", "ops", "memory", "network", "time at roofline", "dominant kernels"):
        table.add_column(col, justify="left" if col in ("phase", "dominant kernels") else "right")
    for phase in ("prefill", "decode"):
        rec = summary[phase]
        dom = ", ".join(f"{k['name']} {k['share_of_time']:.0%}" for k in rec["dominant_kernels"])
        table.add_row(phase, fmt(rec["ops"], "OP"), fmt(rec["mem_bytes"], "B"), fmt(rec["net_bytes"], "B"),
                      fmt_time(rec["time_s"]), dom)
    console.print(table)
    console.print(
        f"Request time at roofline {fmt_time(summary['time_s'])}, dominated by {summary['dominant_phase']}; "
        f"weights {fmt(summary['weight_bytes_per_gpu'], 'B')} + KV cache {fmt(summary['kv_cache_bytes_per_gpu'], 'B')} "
        f"per GPU: {'fits' if summary['fits_in_memory'] else 'does NOT fit'} in GPU memory."
    )


def cmd_analyze_layer(args: argparse.Namespace) -> int:
    arch, req, gpu = _request_from_args(args)
    payload = _layer_payload(arch, req, gpu)
    if args.json:
        print_json(payload)
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for phase in ("prefill", "decode"):
        steps = "1 forward pass" if phase == "prefill" else f"{req.decode_steps} steps"
        table = Table(title=f"{phase}: one layer of {arch.id} on {req.num_gpus} x {gpu.id} (per GPU, {steps})")
        for col in ("kernel", "kind", "ops", "weights", "activations", "KV cache", "network", "ops/byte", "perf", "time", "bound"):
            table.add_column(col, justify="left" if col in ("kernel", "kind", "bound") else "right")
        for node in payload["nodes"]:
            rec = node[phase]
            acts = rec["act_load_bytes"] + rec["act_store_bytes"]
            kv = rec["kv_load_bytes"] + rec["kv_store_bytes"]
            ai = rec["intensity"]
            table.add_row(node["name"], node["kind"], fmt(rec["ops"], "OP"), fmt(rec["weight_bytes"], "B"), fmt(acts, "B"),
                          fmt(kv, "B"), fmt(rec["net_bytes"], "B"), "-" if ai is None else f"{ai:.3g}",
                          fmt(rec["perf"], "OP/s"), fmt_time(rec["time_s"]), rec["bound"])
        console.print(table)
    console.print("edges: " + ", ".join(f"{s}->{d}" for s, d in payload["edges"]))
    _print_summary(console, payload["summary"], f"Whole model: {arch.num_layers} layers + embedding and LM head (all GPUs)")
    return 0


def cmd_analyze_model(args: argparse.Namespace) -> int:
    arch, req, gpu = _request_from_args(args)
    payload = _layer_payload(arch, req, gpu)
    out = {"model": arch.id, "gpu": gpu.id, "global": payload["global"], "summary": payload["summary"]}
    if args.json:
        print_json(out)
        return 0
    from rich.console import Console

    _print_summary(Console(), payload["summary"],
                   f"{arch.id} on {req.num_gpus} x {gpu.id}: B={req.batch_size}, L={req.prompt_tokens}, G={req.generated_tokens}")
    return 0


def cmd_analyze_batch(args: argparse.Namespace) -> int:
    from llmco2.analytic.request_parsing import RowDefaults
    from llmco2.api.analysis_file import analyze_file

    if args.json:
        raise InvalidInputError("analyze batch writes its table to --out (.csv or .parquet); it prints no JSON", field="--json")
    out = check_output_path(args.out, "--out", (".csv", ".parquet"))
    defaults = RowDefaults(dtype=args.dtype, act_dtype=args.act_dtype, kv_dtype=args.kv_dtype,
                           flash_attention=args.flash_attention, causal=args.causal, ignore_context=args.ignore_context)
    rows = analyze_file(Path(args.requests), out, defaults)
    sys.stderr.write(f"wrote {rows} analysed requests to {out}\n")
    return 0


def cmd_analyze_flops(args: argparse.Namespace) -> int:
    from llmco2.analytic.flop_split import matmul_totals, mfu, model_flops, module_flops
    from llmco2.specs import get_gpu, get_model

    if args.elapsed_s is None:  # the GPU, its count and dtype only set the peak the MFU is relative to
        given = [f for f, v, default in (("--gpu", args.gpu, None), ("--gpus", args.gpus, 1), ("--dtype", args.dtype, "bf16"))
                 if v != default]
        if given:
            verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
            raise InvalidInputError(f"{', '.join(given)} only {verb} with --elapsed-s (the MFU's peak); leave {them} out or "
                                    "give the measured time", field=given[0])
    arch = get_model(args.model, approximate=getattr(args, "approximate", False))
    decode = args.phase == "decode"
    seqlen_q = 1 if decode else args.seq_len
    modules = module_flops(arch, args.batch_size, seqlen_q, args.seq_len, backward=args.backward, kv_cache=decode)
    whole = model_flops(arch, args.batch_size, seqlen_q, args.seq_len, backward=args.backward, kv_cache=decode)
    out: dict[str, Any] = {
        "model": arch.id, "phase": args.phase, "backward": args.backward,
        "per_layer_modules": {k: {"tensor_core": v.tensor_core, "cuda_core": v.cuda_core, "sfu": v.sfu} for k, v in modules.items()},
        "whole_model": {"tensor_core": whole.tensor_core, "cuda_core": whole.cuda_core, "sfu": whole.sfu, "total": whole.total},
        "matmul_totals": matmul_totals(arch, args.batch_size, args.seq_len, args.phase),
    }
    if args.elapsed_s is not None:
        if args.gpu is None:
            raise InvalidInputError("--elapsed-s needs --gpu to know the peak", field="--gpu")
        peak = get_gpu(args.gpu).peak_ops_per_s(args.dtype) * args.gpus
        out["mfu"] = mfu(whole.tensor_core, args.elapsed_s, peak)
    if args.json:
        print_json(out)
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{arch.id}: FLOPs of one layer by unit ({args.phase}{', with backward' if args.backward else ''})")
    for col in ("module", "tensor core", "CUDA core", "SFU"):
        t.add_column(col, justify="left" if col == "module" else "right")
    for name, split in modules.items():
        t.add_row(name, f"{split.tensor_core:,}", f"{split.cuda_core:,}", f"{split.sfu:,}")
    t.add_row("whole model", f"{whole.tensor_core:,}", f"{whole.cuda_core:,}", f"{whole.sfu:,}")
    console = Console()
    console.print(t)
    if "mfu" in out:
        console.print(f"MFU = {out['mfu']:.1%}")
    return 0


def cmd_analyze_table(args: argparse.Namespace) -> int:
    from llmco2.analytic.reference_tables import layer_table, model_table_totals
    from llmco2.specs import get_model

    arch = get_model(args.model, approximate=getattr(args, "approximate", False))
    rows = layer_table(arch, args.batch_size, args.seq_len, args.phase, tp=args.tp)
    totals = model_table_totals(arch, args.batch_size, args.seq_len, args.phase, tp=args.tp)
    if args.json:
        print_json({"model": arch.id, "phase": args.phase, "rows": [vars(r) for r in rows], "model_totals": totals})
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{arch.id}, {args.phase} per layer (memory and communication in elements)")
    for col in ("#", "kernel", "compute", "memory", "communication"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    for r in rows:
        t.add_row(str(r.index), r.name, f"{r.compute:,}", f"{r.memory:,}", f"{r.communication:,.0f}")
    console = Console()
    console.print(t)
    console.print("whole model: " + ", ".join(f"{k} {v:,.0f}" for k, v in totals.items()))
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from llmco2.specs import engine_catalog, gpu_catalog, model_catalog

    if args.which == "engines":  # the --engine values and the host-overhead priors a new engine starts from
        rows = [
            {"id": e.id, "name": e.name, "cuda_graphs": e.cuda_graphs, "continuous_batching": e.continuous_batching,
             "launch_us": e.launch_overhead_us, "step_ms": e.step_overhead_ms, "sequence_us": e.sequence_overhead_us,
             "aliases": list(e.aliases)}
            for e in engine_catalog()
        ]
    elif args.which == "gpus":
        rows = [
            {"id": g.id, "name": g.name, "memory_gb": g.memory_size_gb, "bandwidth_gb_s": g.memory_bandwidth_gb_s,
             "fp16_tflops": g.peak_dense_tops.get("fp16"), "interconnect_gb_s": g.interconnect_bandwidth_gb_s,
             "tdp_w": g.tdp_w}
            for g in gpu_catalog()
        ]
    else:
        rows = [
            {"id": m.id, "name": m.name, "params_b": round(m.param_count() / 1e9, 3),
             "active_params_b": round(m.active_param_count() / 1e9, 3), "layers": m.num_layers,
             "hidden": m.hidden_size, "heads": m.num_heads, "kv_heads": m.num_kv_heads, "experts": m.num_experts}
            for m in model_catalog()
        ]
    if args.json:
        print_json(rows)
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"llmco2 {args.which}")
    keys = [k for k, v in rows[0].items() if not isinstance(v, list)]  # lists (an engine's aliases) only in --json
    for key in keys:
        table.add_column(key)
    for row in rows:
        table.add_row(*("-" if row[k] is None else str(row[k]) for k in keys))
    Console().print(table)
    return 0


