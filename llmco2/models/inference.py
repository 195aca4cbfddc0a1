"""Inference without torch: the trained LLMCO2 network as a NumPy forward pass.

The network (:class:`llmco2.models.gnn.LLMCO2Net`) is ``num_layers`` x PyG ``SAGEConv`` with its
defaults (mean aggregation, root weight, ``normalize=False``):
``h_i' = relu(W_l · mean_{j -> i} h_j + b_l + W_r · h_i)``, then mean and max pooling over each
graph's nodes, the global features concatenated, and ``Linear -> ReLU -> Linear``.

Graphs of requests that share a DAG variant have the same nodes and edges, so a batch is grouped
by structure and each group is a few slice additions (one per edge of the
variant) and two matrix products per layer on a ``[k * m, F]`` block, whatever the number of requests.

Weights come from the inference sidecar written by :mod:`llmco2.models.export` (rewritten, with a
log line, when it is missing or older than its ``.pt``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis, analyze_layers
from llmco2.analytic.model import ModelTotals, model_totals
from llmco2.analytic.table import RequestTable, distinct_rows
from llmco2.errors import InvalidInputError
from llmco2.graph.features import FEATURE_SCHEMA_VERSION, GraphArrays, build_graph_arrays
from llmco2.graph.scaling import FeatureScaler
from llmco2.graph.views import view
from llmco2.models.export import SIDECAR_FORMAT, WEIGHT_PREFIX, file_sha256, sidecar_path
from llmco2.models.head import OutputHead, PhasePrediction
from llmco2.models.physics import Item

log = logging.getLogger(__name__)

#: Graphs per block of the forward pass (bounds the working memory: block x nodes x hidden floats).
FORWARD_BLOCK = 2048


def _relu(a: NDArray[np.float32]) -> NDArray[np.float32]:
    return np.maximum(a, 0.0, out=a)


@dataclass(frozen=True)
class StructureGroups:
    """Graphs grouped by identical structure (node count and local edge list)."""

    starts: NDArray[np.int64]  # first node of every graph
    groups: list[tuple[NDArray[np.int64], int, tuple[tuple[int, ...], ...]]]  # (graphs, nodes, sources of each node)


def structure_groups(g: GraphArrays) -> StructureGroups:
    """Group the graphs of ``g`` by structure: equal node count, edge count and two random-weight
    hashes of the local ``(src, dst)`` pairs."""
    n = g.num_graphs
    counts = np.bincount(g.batch, minlength=n)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    src, dst = g.edge_index
    graph_of_edge = g.batch[dst] if len(dst) else np.zeros(0, dtype=np.int64)
    width = int(counts.max()) + 1 if n else 1
    local = (src - starts[graph_of_edge]) * width + (dst - starts[graph_of_edge])
    rng = np.random.default_rng(12345)
    h1, h2 = (rng.integers(1, 2**31, size=width * width).astype(np.float64) for _ in range(2))
    first, inverse = distinct_rows(counts, np.bincount(graph_of_edge, minlength=n),
                                   np.bincount(graph_of_edge, weights=h1[local], minlength=n),
                                   np.bincount(graph_of_edge, weights=h2[local], minlength=n))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
    groups = []
    for gid, r0 in enumerate(first):
        k = int(counts[r0])
        mine = graph_of_edge == r0
        sources: list[list[int]] = [[] for _ in range(k)]
        for s_, d_ in zip((src[mine] - starts[r0]).tolist(), (dst[mine] - starts[r0]).tolist(), strict=True):
            sources[d_].append(s_)  # in edge order, the order scatter-add sums in
        groups.append((order[bounds[gid]:bounds[gid + 1]], k, tuple(tuple(x) for x in sources)))
    return StructureGroups(starts, groups)


@dataclass
class SageForward:
    """The LLMCO2Net forward pass from its state-dict arrays (float32, like the trained network)."""

    convs: list[tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float32]]]  # (W_l^T, b_l, W_r^T)
    head: list[tuple[NDArray[np.float32], NDArray[np.float32]]]  # (W^T, b) of each Linear
    use_graph: bool = True

    @classmethod
    def from_state_dict(cls, weights: dict[str, NDArray[np.float32]], num_layers: int, use_graph: bool) -> SageForward:
        try:
            convs = []
            for i in range(num_layers if use_graph else 0):
                p = f"convs.{i}."
                bias = weights.get(p + "lin_l.bias")
                w_l = weights[p + "lin_l.weight"]
                convs.append((np.ascontiguousarray(w_l.T), bias if bias is not None else np.zeros(w_l.shape[0], np.float32),
                              np.ascontiguousarray(weights[p + "lin_r.weight"].T)))
            idx = sorted(int(k.split(".")[1]) for k in weights if k.startswith("head.") and k.endswith(".weight"))
            head = [(np.ascontiguousarray(weights[f"head.{i}.weight"].T), weights[f"head.{i}.bias"]) for i in idx]
        except KeyError as exc:
            raise InvalidInputError(f"unsupported network layout in the checkpoint: no weight {exc.args[0]!r}",
                                    field="checkpoint") from None
        known = {f"convs.{i}.lin_{s}.{t}" for i in range(num_layers) for s in "lr" for t in ("weight", "bias")}
        known |= {f"head.{i}.{t}" for i in idx for t in ("weight", "bias")}
        extra = sorted(set(weights) - known)
        if extra or not head:
            raise InvalidInputError(f"unsupported network layout in the checkpoint (unexpected weights {extra[:3]})",
                                    field="checkpoint")
        return cls(convs, head, use_graph)

    @property
    def out_dim(self) -> int:
        return int(self.head[-1][0].shape[1])

    def _pooled(self, x: NDArray[np.float32], graphs: NDArray[np.int64], k: int, sources: tuple[tuple[int, ...], ...],
                starts: NDArray[np.int64]) -> NDArray[np.float32]:
        """``[m, 2 * hidden]`` mean and max pooled node states of ``graphs`` (one structure: ``k``
        nodes, ``sources[i]`` the nodes with an edge into node ``i``)."""
        h = x[starts[graphs][None, :] + np.arange(k)[:, None]]  # [k, m, F]
        m = h.shape[1]
        for w_l, b_l, w_r in self.convs:
            f = h.shape[2]
            agg = np.zeros_like(h)
            for i, srcs in enumerate(sources):  # sum over in-neighbours, then divide: as scatter-mean does
                if srcs:
                    a = agg[i]
                    np.copyto(a, h[srcs[0]])
                    for j in srcs[1:]:
                        a += h[j]
                    if len(srcs) > 1:
                        a /= np.float32(len(srcs))
            agg = agg.reshape(k * m, f)
            out = agg @ w_l
            out += b_l  # the order of PyG: lin_l(aggregate) with its bias, then + lin_r(root)
            out += h.reshape(k * m, f) @ w_r
            h = _relu(out).reshape(k, m, -1)
        return np.concatenate([h.mean(axis=0), h.max(axis=0)], axis=1)

    def __call__(self, g: GraphArrays) -> NDArray[np.float32]:
        """``[num_graphs, out_dim]`` standardised outputs."""
        n = g.num_graphs
        parts: list[NDArray[np.float32]] = []
        if self.use_graph:
            hidden = self.convs[-1][0].shape[1]
            pooled = np.zeros((n, 2 * hidden), dtype=np.float32)
            sg = structure_groups(g)
            for graphs, k, sources in sg.groups:
                for lo in range(0, len(graphs), FORWARD_BLOCK):
                    block = graphs[lo:lo + FORWARD_BLOCK]
                    pooled[block] = self._pooled(g.x, block, k, sources, sg.starts)
            parts.append(pooled)
        parts.append(g.u.astype(np.float32, copy=False))
        z = np.concatenate(parts, axis=1)
        for j, (w, b) in enumerate(self.head):
            z = z @ w
            z += b
            if j < len(self.head) - 1:
                z = _relu(z)
        return z


@dataclass
class InferenceModel:
    """A trained checkpoint, ready to predict without torch: feature scaler, NumPy network and the
    checkpoint's output head (:class:`llmco2.models.head.OutputHead`: prior, target, intervals).

    ``meta`` holds the checkpoint's non-network entries (``config``, ``head``, ...).
    """

    net: SageForward
    scaler: FeatureScaler
    head: OutputHead
    meta: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    @property
    def config(self) -> dict[str, Any]:
        return self.meta.get("config", {})

    @property
    def domain(self) -> dict[str, Any]:
        return self.head.domain

    @classmethod
    def from_arrays(cls, arrays: dict[str, NDArray], source: Path | None = None) -> InferenceModel:
        meta = json.loads(bytes(arrays["meta"]).decode())
        if meta.get("feature_schema_version") != FEATURE_SCHEMA_VERSION or "head" not in meta:
            raise InvalidInputError(
                f"{source or 'the checkpoint'} was trained with feature schema version {meta.get('feature_schema_version')}, "
                f"this llmco2 computes version {FEATURE_SCHEMA_VERSION}; retrain it", field="checkpoint")
        weights = {k[len(WEIGHT_PREFIX):]: v for k, v in arrays.items() if k.startswith(WEIGHT_PREFIX)}
        cfg = meta.get("config", {})
        net = SageForward.from_state_dict(weights, int(cfg.get("num_layers", 2)), bool(cfg.get("use_graph", True)))
        return cls(net, FeatureScaler.from_state_dict(meta["scaler"]), OutputHead.from_state_dict(meta["head"]), meta, source)

    # -- prediction -------------------------------------------------------------------------------
    def graphs(self, analysis: LayerAnalysis, totals: ModelTotals) -> GraphArrays:
        """Standardised graph batch of the analysed requests, in the checkpoint's feature view."""
        g = view(build_graph_arrays(self.head.network_analysis(analysis), totals), self.config.get("feature_view", "full"))
        sc = self.scaler
        if g.x.dtype != np.float32 or g.u.dtype != np.float32:
            return sc.transform(g)
        x, u = g.x.copy() if g.x.base is not None else g.x, g.u.copy()
        x -= sc.node_mean  # in place, the same float32 operations as FeatureScaler.transform
        x /= sc.node_std
        u -= sc.global_mean
        u /= sc.global_std
        return GraphArrays(x=x, edge_index=g.edge_index, batch=g.batch, u=u, num_graphs=g.num_graphs)

    def outputs(self, analysis: LayerAnalysis, totals: ModelTotals) -> NDArray[np.float32]:
        """``[n, out_dim]`` standardised network outputs."""
        return self.net(self.graphs(analysis, totals))

    def predict(self, requests: RequestTable | Sequence[Item]) -> PhasePrediction:
        """Energy, latency, interval and notes of every request (same as ``GNNPredictor.predict``)."""
        table = requests if isinstance(requests, RequestTable) else RequestTable.from_items(list(requests))
        analysis = analyze_layers(table.layer_batch())
        totals = model_totals(analysis)
        items = requests if not isinstance(requests, RequestTable) else table.items()
        return self.head.finish(self.outputs(analysis, totals), items, analysis, totals)

    def predict_phases(self, data: Any) -> NDArray[np.float64]:
        """``[n_configs, 2]`` energy (J) of an ``EnergyData`` (same API as the training predictor)."""
        analysis, totals = data.analysis()
        return self.head.finish(self.outputs(analysis, totals), data.items, analysis, totals).energy_j

    def predict_rows(self, data: Any) -> NDArray[np.float64]:
        """Energy (J) of each row's phase of an ``EnergyData``."""
        per_config = self.predict_phases(data)[data.config]
        out = np.where(data.phase == 0, per_config[:, 0], per_config[:, 1])
        return np.where(data.phase == 2, per_config[:, 0] + per_config[:, 1], out)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmco2"


def _read_sidecar(path: Path) -> dict[str, NDArray] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, KeyError):
        return None


def _fresh(arrays: dict[str, NDArray] | None, digest: str) -> bool:
    if arrays is None or "meta" not in arrays:
        return False
    meta = json.loads(bytes(arrays["meta"]).decode())
    return meta.get("sidecar_format") == SIDECAR_FORMAT and meta.get("source_sha256") == digest


@functools.lru_cache(maxsize=4)
def load_inference(checkpoint: str | Path) -> InferenceModel:
    """The torch-free model of ``checkpoint`` (a ``.pt``), from its sidecar; a missing or stale
    sidecar is rewritten from the ``.pt`` (next to it, or in the user cache when that folder is
    read-only), which needs torch once."""
    src = Path(checkpoint)
    if not src.is_file():
        raise InvalidInputError(f"no such checkpoint {str(src)!r}", field="checkpoint")
    digest = file_sha256(src)
    candidates = [sidecar_path(src), _cache_dir() / f"{digest[:16]}.infer.npz"]
    for path in candidates:
        arrays = _read_sidecar(path) if path.is_file() else None
        if _fresh(arrays, digest):
            assert arrays is not None
            return InferenceModel.from_arrays(arrays, src)
    from llmco2.models.export import export_inference

    for path in candidates:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            log.warning("writing the inference weights of %s to %s (once per checkpoint; needs torch)", src, path)
            export_inference(src, path)
        except OSError as exc:
            log.warning("cannot write %s (%s)", path, exc)
            continue
        arrays = _read_sidecar(path)
        if arrays is not None:
            return InferenceModel.from_arrays(arrays, src)
    raise InvalidInputError(f"cannot write the inference weights of {src} anywhere; check folder permissions",
                            field="checkpoint")
