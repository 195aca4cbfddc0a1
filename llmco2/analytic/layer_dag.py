"""The kernel DAG of one layer as plain data: its data-dependency edges among the kernels present,
and one request's nodes (each kernel's cost and roofline per phase) and edges as JSON-ready records
(the layer JSON of convention 2, docs/reference/conventions.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmco2.analytic.layer import KERNEL_NAMES, KERNELS, PHASES, LayerAnalysis
from llmco2.analytic.roofline import BOUNDS


def layer_edges(present: dict[str, bool]) -> list[tuple[str, str]]:
    """Data-dependency edges ``(src, dst)`` among the present kernels of one layer.

    An input written ``"a|b"`` reads ``a`` when present, else ``b`` (the all-reduce sits between
    a row-parallel projection and its residual add only with more than one GPU).
    """
    edges: list[tuple[str, str]] = []
    for spec in KERNELS:
        if not present.get(spec.name):
            continue
        for inp in spec.inputs:
            src = next((alt for alt in inp.split("|") if present.get(alt)), None)
            if src is not None:
                edges.append((src, spec.name))
    return edges


def _edges_for(present: dict[str, bool], parallel_attention: bool) -> list[tuple[str, str]]:
    edges = layer_edges(present)
    if parallel_attention:  # attention and MLP both read the layer input: norm_mlp has no producer
        edges = [e for e in edges if e != ("add_attn", "norm_mlp")]
    return edges


def as_number(x: float) -> int | float:
    """JSON-friendly number: an int when the value is whole (and finite)."""
    value = float(x)
    if np.isfinite(value) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value if np.isfinite(value) else None  # type: ignore[return-value]


def phase_record(analysis: LayerAnalysis, phase: str, name: str, i: int = 0) -> dict[str, Any]:
    """One kernel's features in one phase for request ``i`` (the layer JSON of convention 2, docs/reference/conventions.md)."""
    c = analysis.costs[phase][name]
    r = analysis.roofline[phase][name]
    return {
        "ops": as_number(c.ops[i]),
        "mem_bytes": as_number(c.mem_bytes[i]),
        "net_bytes": as_number(c.net_bytes[i]),
        "perf": as_number(r.perf_ops_per_s[i]),
        "intensity": as_number(r.intensity[i]),
        "time_s": float(r.time_s[i]),
        "bound": BOUNDS[int(r.bound[i])],
        "weight_bytes": as_number(c.weight_bytes[i]),
        "act_load_bytes": as_number(c.act_load_bytes[i]),
        "act_store_bytes": as_number(c.act_store_bytes[i]),
        "kv_load_bytes": as_number(c.kv_load_bytes[i]),
        "kv_store_bytes": as_number(c.kv_store_bytes[i]),
    }


def layer_graph(analysis: LayerAnalysis, i: int = 0) -> dict[str, Any]:
    """Nodes and edges of request ``i``'s layer: ``{"nodes": [...], "edges": [[src, dst], ...]}``."""
    present = {n: bool(analysis.present[n][i]) for n in KERNEL_NAMES}
    nodes = [
        {"name": spec.name, "kind": spec.kind, **{p: phase_record(analysis, p, spec.name, i) for p in PHASES}}
        for spec in KERNELS
        if present[spec.name]
    ]
    edges = _edges_for(present, bool(analysis.batch.parallel_attention[i]))
    return {"nodes": nodes, "edges": [list(e) for e in edges]}
