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

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import KERNEL_NAMES, KERNELS, PHASES, LayerAnalysis, layer_edges
from llmco2.analytic.model import ModelTotals
from llmco2.specs.engines import engine_ids

#: Levels of the categorical serving-engine feature (catalog order, ``unknown`` included).
ENGINE_LEVELS: tuple[str, ...] = tuple(engine_ids())

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


def _log(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.log1p(np.maximum(np.nan_to_num(np.asarray(x, dtype=np.float64), posinf=_INTENSITY_CAP), 0.0))


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


def _phase_block(analysis: LayerAnalysis, phase: str, name: str) -> NDArray[np.float64]:
    """``[n_requests, len(PHASE_FEATURES)]`` features of kernel ``name`` in ``phase``."""
    c = analysis.costs[phase][name]
    r = analysis.roofline[phase][name]
    bound = r.bound
    cols = [
        _log(c.ops), _log(c.mem_bytes), _log(c.weight_bytes), _log(c.act_load_bytes + c.act_store_bytes),
        _log(c.kv_load_bytes + c.kv_store_bytes), _log(c.net_bytes), _log(r.perf_ops_per_s),
        _log(np.minimum(r.intensity, _INTENSITY_CAP)), _log(r.time_s * 1e6),
        (bound == 0).astype(np.float64), (bound == 1).astype(np.float64), (bound == 2).astype(np.float64),
    ]
    return np.stack(cols, axis=1)


def global_feature_matrix(analysis: LayerAnalysis, totals: ModelTotals) -> NDArray[np.float64]:
    """``[n_requests, len(GLOBAL_FEATURES)]`` global features."""
    b = analysis.batch
    cols = [
        _log(b.hidden), _log(b.intermediate), _log(b.heads), _log(b.kv_heads), _log(b.head_dim), _log(b.layers), _log(b.vocab),
        _log(b.experts), _log(b.experts_per_token), _log(b.params), b.w_bytes * 8.0, b.kv_bytes * 8.0,
        b.gated.astype(np.float64), b.flash.astype(np.float64),
        _log(b.batch), _log(b.prompt), _log(b.generated), _log(b.generated - 1.0), _log(b.num_gpus), _log(b.tp),
        _log(b.peak_ops_per_s), _log(b.mem_bw_bytes_per_s), _log(b.net_bw_bytes_per_s), _log(b.tdp_w), _log(b.mem_capacity_bytes),
    ]
    for phase in PHASES:
        t = totals.totals[phase]
        cols += [_log(t["ops"]), _log(t["mem_bytes"]), _log(t["net_bytes"]), _log(t["time_s"] * 1e6)]
    cols += [(b.engine == i).astype(np.float64) for i in range(len(ENGINE_LEVELS))]
    return np.stack(cols, axis=1)


def build_graph_arrays(analysis: LayerAnalysis, totals: ModelTotals) -> GraphArrays:
    """All requests' graphs at once: requests sharing a DAG variant (same kernels present) are
    filled together, so the cost is a few NumPy operations per variant, not per graph."""
    n = len(analysis.batch)
    present = np.stack([analysis.present[k] for k in KERNEL_NAMES], axis=1)  # [n, K]
    counts = present.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    num_nodes = int(counts.sum())
    blocks = {p: {k: _phase_block(analysis, p, k) for k in KERNEL_NAMES} for p in PHASES}
    x = np.zeros((num_nodes, len(NODE_FEATURES)), dtype=np.float32)
    batch = np.repeat(np.arange(n, dtype=np.int64), counts)
    edge_chunks: list[tuple[NDArray[np.int64], NDArray[np.int64]]] = []
    bits = present.astype(np.int64) @ (np.int64(1) << np.arange(present.shape[1], dtype=np.int64))  # one code per variant
    _, first, inverse = np.unique(bits, return_index=True, return_inverse=True)
    patterns = present[first]
    n_kernels, n_phase = len(KERNEL_NAMES), len(PHASE_FEATURES)
    for pid, pattern in enumerate(patterns):
        reqs = np.flatnonzero(inverse.reshape(-1) == pid)
        names = [k for k, on in zip(KERNEL_NAMES, pattern, strict=True) if on]
        slot = {k: j for j, k in enumerate(names)}
        for j, name in enumerate(names):
            rows = offsets[reqs] + j
            x[rows, KERNEL_NAMES.index(name)] = 1.0
            x[rows, n_kernels:n_kernels + n_phase] = blocks["prefill"][name][reqs]
            x[rows, n_kernels + n_phase:] = blocks["decode"][name][reqs]
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
