"""Graph embedding of a (model, request, GPU) triple (paper §4.1), vectorised over requests.

One graph per request: the layer DAG's kernels are the nodes, data dependencies the edges. Every
node carries a kernel-type one-hot and **two feature sets, prefill and decode**: operations,
memory bytes (weights, activations, KV cache), network bytes, roofline performance (paper Eq 8)
and two roofline-derived features (time at the roofline, bound type). Global features describe
the architecture, the request, the hardware, the phase totals and the serving engine (a one-hot
over the engine catalog, ``unknown`` included, so that an engine the data never showed degrades to
the median behaviour rather than failing).

Raw features are already log-scaled (``log1p`` of counts, bytes, seconds x 1e6); standardisation
is fitted on training data by :class:`llmco2.graph.scaling.FeatureScaler`. The feature schema has
a version (:data:`FEATURE_SCHEMA_VERSION`) that checkpoints record and check on load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import KERNEL_NAMES, KERNELS, PHASES, LayerAnalysis
from llmco2.analytic.layer_dag import layer_edges
from llmco2.analytic.model import ModelTotals
from llmco2.specs.engines import engine_levels

#: Levels of the categorical serving-engine feature (catalog order, ``unknown`` included; a version of
#: another engine's software takes that engine's level, see ``feature_level`` in engines.toml).
ENGINE_LEVELS: tuple[str, ...] = tuple(engine_levels())

#: Bump whenever a feature is added, removed, reordered or computed differently.
FEATURE_SCHEMA_VERSION = 2  # 2: serving-engine one-hot globals

PHASE_FEATURES: tuple[str, ...] = (
    "log_ops", "log_mem_bytes", "log_weight_bytes", "log_act_bytes", "log_kv_bytes", "log_net_bytes",
    "log_perf", "log_intensity", "log_time_us", "bound_compute", "bound_memory", "bound_network",
)
NODE_FEATURES: tuple[str, ...] = (
    *(f"kernel_{n}" for n in KERNEL_NAMES),
    *(f"prefill_{f}" for f in PHASE_FEATURES),
    *(f"decode_{f}" for f in PHASE_FEATURES),
)
GLOBAL_FEATURES: tuple[str, ...] = (
    "log_hidden", "log_intermediate", "log_heads", "log_kv_heads", "log_head_dim", "log_layers", "log_vocab",
    "log_experts", "log_experts_per_token", "log_params", "weight_bits", "kv_bits", "mlp_gated", "flash_attention",
    "log_batch", "log_prompt", "log_generated", "log_decode_steps", "log_num_gpus", "log_tp",
    "log_peak_ops_per_s", "log_mem_bw", "log_net_bw", "log_tdp_w", "log_mem_capacity",
    *(f"{p}_log_{q}" for p in PHASES for q in ("ops", "mem_bytes", "net_bytes", "time_us")),
    *(f"engine_{e}" for e in ENGINE_LEVELS),
)
#: Which global features carry phase totals, per phase (for models that use one phase at a time).
_INTENSITY_CAP = 1e9


def _log(x: NDArray[np.float64], overwrite: bool = False) -> NDArray[np.float64]:
    """``log1p(max(q, 0))`` of every element, NaN read as 0 and +inf as :data:`_INTENSITY_CAP`
    (``overwrite``: ``x`` is a float64 scratch array that may be changed, else it is copied).

    From ``q >= 1`` on, ``log(1 + q)`` is used: ``1 + q`` is exact to 2^-53, so the result is
    within a few float64 ulps of ``log1p(q)`` (the features are float32, so equal in practice),
    and ``log`` is several times faster than ``log1p`` over large arrays. Below 1, ``log1p`` runs
    in place on the masked elements only (no gather and scatter)."""
    q = x if overwrite and isinstance(x, np.ndarray) and x.dtype == np.float64 else np.array(x, dtype=np.float64)
    np.fmax(q, 0.0, out=q)  # NaN, -inf and negatives -> 0
    q[q == np.inf] = _INTENSITY_CAP
    out = np.add(q, 1.0)
    np.log(out, out=out)
    np.log1p(q, out=out, where=q < 1.0)
    return out


@dataclass(frozen=True)
class GraphArrays:
    """A batch of graphs as NumPy arrays (PyG-style layout).

    Attributes:
        x: node features ``[num_nodes, len(NODE_FEATURES)]``.
        edge_index: ``[2, num_edges]`` (global node indices).
        batch: graph index of each node ``[num_nodes]``.
        u: global features ``[num_graphs, len(GLOBAL_FEATURES)]``.
        num_graphs: number of graphs (requests).
    """

    x: NDArray[np.float32]
    edge_index: NDArray[np.int64]
    batch: NDArray[np.int64]
    u: NDArray[np.float32]
    num_graphs: int


def _phase_raw(analysis: LayerAnalysis, phase: str, name: str) -> tuple[list[NDArray[np.float64]], NDArray[np.int64]]:
    """The nine quantities of kernel ``name`` in ``phase`` that :data:`PHASE_FEATURES` takes the
    log of (counts, bytes, ops/s, ops/byte, microseconds), and the roofline bound index."""
    c = analysis.costs[phase][name]
    r = analysis.roofline[phase][name]
    raw = [c.ops, c.mem_bytes, c.weight_bytes, c.act_load_bytes + c.act_store_bytes, c.kv_load_bytes + c.kv_store_bytes,
           c.net_bytes, r.perf_ops_per_s, np.minimum(r.intensity, _INTENSITY_CAP), r.time_s * 1e6]
    return raw, r.bound


def _take_rows(v: Any, rows: NDArray[np.int64], n: int, out: NDArray[Any] | None = None) -> NDArray[Any]:
    """``broadcast_to(v, (n,))[rows]`` (into ``out`` when given) without building the broadcast
    view when ``v`` is already one value per request or a single value. ``rows``: increasing
    request indices (``flatnonzero`` of a mask), so all ``n`` of them are every request in order
    and a plain copy."""
    a = np.asarray(v)
    if a.shape == (n,):
        if len(rows) == n and (out is None or out.dtype == a.dtype):
            if out is None:
                return a.copy()
            np.copyto(out, a)
            return out
        return np.take(a, rows, out=out)
    if a.size != 1:
        return np.take(np.broadcast_to(a, (n,)), rows, out=out)
    if out is None:
        return np.full(len(rows), a.reshape(()), dtype=a.dtype)
    out[...] = a.reshape(())
    return out


def _fill_nodes(x: NDArray[np.float32], analysis: LayerAnalysis, present: NDArray[np.bool_],
                offsets: NDArray[np.int64]) -> None:
    """Write every node's row of ``x`` (its kernel one-hot and prefill and decode features), one
    kernel at a time: the kernel's quantities are taken at the requests where it is present and
    logged in one :func:`_log` (element-wise, so equal to taking them one at a time). Every row of
    ``x`` is written once, so ``x`` need not be zeroed beforehand."""
    n = len(analysis.batch)
    n_kernels, n_logged = len(KERNEL_NAMES), sum(not f.startswith("bound_") for f in PHASE_FEATURES)  # logged, then 3 flags
    slot = np.cumsum(present, axis=1) - 1  # position of each kernel among its graph's nodes
    row_type = np.dtype((np.void, x.shape[1] * x.itemsize))  # a node's row as one item: a faster scatter
    x_rows = x.view(row_type).reshape(-1)
    for k, name in enumerate(KERNEL_NAMES):
        rows = np.flatnonzero(present[:, k])
        if not len(rows):
            continue
        block = np.zeros((len(rows), x.shape[1]), dtype=x.dtype)  # the rows of these nodes
        block[:, k] = 1.0
        phases = block[:, n_kernels:].reshape(len(rows), 2, len(PHASE_FEATURES))
        raw = np.empty((2, n_logged, len(rows)), dtype=np.float64)
        for p, phase in enumerate(("prefill", "decode")):
            values, bound = _phase_raw(analysis, phase, name)
            for j, v in enumerate(values):
                _take_rows(v, rows, n, raw[p, j])
            np.equal(_take_rows(bound, rows, n)[:, None], np.arange(3), out=phases[:, p, n_logged:],
                     casting="unsafe")  # compute, memory, network bound
        logged = _log(raw, overwrite=True).astype(np.float32)  # rounded to float32 once
        for p in range(2):
            for j in range(n_logged):  # a contiguous column into each strided one: faster than one transposing copy
                phases[:, p, j] = logged[p, j]
        x_rows[offsets[rows] + slot[rows, k]] = block.view(row_type).reshape(-1)


def global_feature_matrix(analysis: LayerAnalysis, totals: ModelTotals) -> NDArray[np.float64]:
    """``[n_requests, len(GLOBAL_FEATURES)]`` global features."""
    b = analysis.batch
    n = len(b)
    logged = [b.hidden, b.intermediate, b.heads, b.kv_heads, b.head_dim, b.layers, b.vocab, b.experts, b.experts_per_token,
              b.params]
    after = [b.batch, b.prompt, b.generated, b.generated - 1.0, b.num_gpus, b.tp, b.peak_ops_per_s, b.mem_bw_bytes_per_s,
             b.net_bw_bytes_per_s, b.tdp_w, b.mem_capacity_bytes]
    for phase in PHASES:
        t = totals.totals[phase]
        after += [t["ops"], t["mem_bytes"], t["net_bytes"], t["time_s"] * 1e6]
    logs = _log(np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for v in logged + after], axis=1), overwrite=True)
    plain = np.stack([b.w_bytes * 8.0, b.kv_bytes * 8.0, b.gated, b.flash], axis=1).astype(np.float64)
    engines = (b.engine[:, None] == np.arange(len(ENGINE_LEVELS))[None, :]).astype(np.float64)
    return np.concatenate([logs[:, :len(logged)], plain, logs[:, len(logged):], engines], axis=1)


def build_graph_arrays(analysis: LayerAnalysis, totals: ModelTotals) -> GraphArrays:
    """All requests' graphs at once: node features filled one kernel at a time, edges one DAG
    variant (requests with the same kernels present) at a time, so nothing runs once per graph."""
    n = len(analysis.batch)
    present = np.stack([analysis.present[k] for k in KERNEL_NAMES], axis=1)  # [n, K]
    counts = present.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    num_nodes = int(counts.sum())
    x = np.empty((num_nodes, len(NODE_FEATURES)), dtype=np.float32)
    _fill_nodes(x, analysis, present, offsets)  # every row, nodes in request-major, then kernel order
    batch = np.repeat(np.arange(n, dtype=np.int64), counts)
    edge_chunks: list[tuple[NDArray[np.int64], NDArray[np.int64]]] = []
    bits = present.astype(np.int64) @ (np.int64(1) << np.arange(present.shape[1], dtype=np.int64))  # one code per variant
    _, first, inverse = np.unique(bits, return_index=True, return_inverse=True)
    patterns = present[first]
    for pid, pattern in enumerate(patterns):
        reqs = np.flatnonzero(inverse.reshape(-1) == pid)
        names = [k for k, on in zip(KERNEL_NAMES, pattern, strict=True) if on]
        slot = {k: j for j, k in enumerate(names)}
        # parallel-attention models drop add_attn -> norm_mlp; handle per request below
        template = np.array([[slot[s], slot[d]] for s, d in layer_edges({k: True for k in names})], dtype=np.int64)
        par = analysis.batch.parallel_attention[reqs]
        for flag in (False, True):
            sub = reqs[par == flag]
            if not len(sub):
                continue
            t = template
            if flag and "add_attn" in slot and "norm_mlp" in slot:
                t = t[~((t[:, 0] == slot["add_attn"]) & (t[:, 1] == slot["norm_mlp"]))]
            src = (offsets[sub][:, None] + t[None, :, 0]).reshape(-1)
            dst = (offsets[sub][:, None] + t[None, :, 1]).reshape(-1)
            edge_chunks.append((src, dst))
    if edge_chunks:
        edge_index = np.stack([np.concatenate([c[0] for c in edge_chunks]), np.concatenate([c[1] for c in edge_chunks])])
    else:
        edge_index = np.zeros((2, 0), dtype=np.int64)
    u = global_feature_matrix(analysis, totals).astype(np.float32)
    return GraphArrays(x=x, edge_index=edge_index.astype(np.int64), batch=batch, u=u, num_graphs=n)


def node_kind_names() -> tuple[str, ...]:
    """Kernel names in one-hot order (for inspection and plots)."""
    return tuple(k.name for k in KERNELS)


def subset(g: GraphArrays, graphs: NDArray[np.int64]) -> GraphArrays:
    """The graphs ``graphs`` (in that order) as a new batch, node and edge indices remapped."""
    graphs = np.asarray(graphs, dtype=np.int64)
    counts = np.bincount(g.batch, minlength=g.num_graphs)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    new_counts = counts[graphs]
    new_starts = np.concatenate([[0], np.cumsum(new_counts)[:-1]])
    total = int(new_counts.sum())
    graph_of_new = np.repeat(np.arange(len(graphs)), new_counts)
    local = np.arange(total) - new_starts[graph_of_new]
    old_nodes = starts[graphs][graph_of_new] + local
    remap = np.full(len(g.batch), -1, dtype=np.int64)
    remap[old_nodes] = np.arange(total)
    keep = remap[g.edge_index[0]] >= 0
    edges = remap[g.edge_index[:, keep]]
    return GraphArrays(x=g.x[old_nodes], edge_index=edges, batch=graph_of_new.astype(np.int64), u=g.u[graphs],
                       num_graphs=len(graphs))


def graph_list(g: GraphArrays) -> list[dict[str, NDArray]]:
    """One dict (x, edge_index, u) per graph — for inspection and tests, not for speed."""
    return [{"x": s.x, "edge_index": s.edge_index, "u": s.u[0]} for s in (subset(g, np.array([i])) for i in range(g.num_graphs))]
