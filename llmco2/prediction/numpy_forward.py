"""The LLMCO2 network's forward pass in NumPy (no torch).

The network (:class:`llmco2.training.gnn.LLMCO2Net`) is ``num_layers`` x PyG ``SAGEConv`` with its
defaults (mean aggregation, root weight, ``normalize=False``):
``h_i' = relu(W_l · mean_{j -> i} h_j + b_l + W_r · h_i)``, then mean and max pooling over each
graph's nodes, the global features concatenated, and ``Linear -> ReLU -> Linear``.

Graphs of requests that share a DAG variant have the same nodes and edges, so a batch is grouped
by structure and each group is a few slice additions (one per edge of the variant) and one matrix
product per layer on a ``[2 F, k * m]`` block, whatever the number of requests. Blocks are shared
out to a few threads; BLAS runs one thread per call, so the result does not depend on the number
of threads.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.table import distinct_rows
from llmco2.errors import InvalidInputError
from llmco2.graph.features import GraphArrays

#: Graphs per block of the forward pass (bounds the working memory: block x nodes x hidden floats).
FORWARD_BLOCK = 256
#: From this many multiply-adds on (2 F inputs per output), a layer's product carries its bias as
#: a last input row of ones. OpenBLAS computes products of up to 100^3 multiply-adds by another
#: kernel, whose sums round differently with the extra row; above, each output is summed in input
#: order, so the bias last rounds as adding it afterwards does.
BIAS_IN_PRODUCT = 2_000_000
#: A block of more graphs than this is computed in halves (:func:`cache_halves`).
CACHE_BLOCK = 128


def cache_halves(block: NDArray[np.int64], k: int, narrowest: int) -> list[NDArray[np.int64]]:
    """A block of graphs of ``k`` nodes as its two halves where it holds more than
    :data:`CACHE_BLOCK` graphs and each half's products are large (:data:`BIAS_IN_PRODUCT`
    multiply-adds or more for a layer of ``narrowest`` inputs and outputs), else whole. A large
    product sums each output in input order whatever its number of columns, so the halves give
    the numbers the whole block gives; their node states fit a core's cache better."""
    half = (len(block) + 1) // 2
    if len(block) <= CACHE_BLOCK or narrowest * (len(block) - half) * k * 2 * narrowest < BIAS_IN_PRODUCT:
        return [block]
    return [block[:half], block[half:]]


@functools.lru_cache(maxsize=256)
def single_source_runs(sources: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, int, int, int], ...]:
    """The nodes of a structure with exactly one in-neighbour (``sources[i]``: the nodes with an
    edge into node ``i``) as runs ``(t0, t1, s0, s1)``: nodes ``t0 .. t1 - 1`` take the states of
    nodes ``s0 .. s1 - 1`` in order (consecutive sources, ``s1 - s0 == t1 - t0``), or all of node
    ``s0`` (``s1 == s0 + 1``, a broadcast), so that each run is one copy of node blocks."""
    runs: list[list[int]] = []
    for i, srcs in enumerate(sources):
        if len(srcs) != 1:
            continue
        s = srcs[0]
        if runs and runs[-1][1] == i:
            t0, t1, s0, s1 = runs[-1]
            if s1 - s0 == t1 - t0 and s == s1:  # consecutive sources
                runs[-1][1:4:2] = [i + 1, s + 1]
                continue
            if s1 == s0 + 1 and s == s0:  # the same source
                runs[-1][1] = i + 1
                continue
        runs.append([i, i + 1, s, s + 1])
    return tuple((t0, t1, s0, s1) for t0, t1, s0, s1 in runs)


def _relu(a: NDArray[np.float32]) -> NDArray[np.float32]:
    return np.maximum(a, 0.0, out=a)


@dataclass(frozen=True)
class StructureGroups:
    """Graphs grouped by identical structure (node count and local edge list)."""

    starts: NDArray[np.int64]  # first node of every graph
    groups: list[tuple[NDArray[np.int64], int, tuple[tuple[int, ...], ...]]]  # (graphs, nodes, sources of each node)


def _hash_weights(size: int, seed: int) -> NDArray[np.float64]:
    """``size`` pseudo-random integers in ``[1, 2^31]`` as floats (splitmix64 of ``seed + i``;
    cheaper to start than ``numpy.random``, which takes some 20 ms to import)."""
    z = (np.arange(size, dtype=np.uint64) + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(33)).astype(np.float64) + 1.0


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
    h1, h2 = (_hash_weights(width * width, seed) for seed in (12345, 67890))
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


def _last_node_major(w: NDArray[np.float32], a: NDArray[np.float32], skip: int, h: NDArray[np.float32], k: int,
                     out_rows: NDArray[np.float32]) -> None:
    """The last SAGE layer and the pooling of :meth:`SageForward._pooled` where its products are
    large, with node-major output: ``h`` (``[k * m, hidden]``) ``= a^T W^T``, so that the pooled
    sum and max over each graph's ``k`` nodes run over contiguous rows of ``h``, and written
    straight into ``out_rows`` (``[m, 2 * hidden]``: mean, then max).

    ``a``: the layer input ``[2 F + 1, k * m]`` (columns node-major, last row ones); ``skip``: the
    leading columns whose aggregate is zeros (their product skips the ``W_l`` half). OpenBLAS
    computes the transposed product as the same column-major product ``W a`` (NumPy passes the
    transposes as flags), each output summed in input order, so every node state is the one the
    feature-major product gives. The sum over the nodes runs in node order, as
    ``numpy.add.reduce`` over the node axis does."""
    f = (a.shape[0] - 1) // 2
    hidden = h.shape[1]
    if skip:
        np.matmul(a[f:, :skip].T, w[:, f:].T, out=h[:skip])
        np.matmul(a[:, skip:].T, w.T, out=h[skip:])
    else:
        np.matmul(a.T, w.T, out=h)  # with the bias, last
    np.maximum(h, np.zeros(hidden, dtype=np.float32), out=h)
    nodes = h.reshape(k, -1)  # [k, m * hidden]: one flat row per node
    stats = np.empty((2, nodes.shape[1]), dtype=np.float32)
    np.add.reduce(nodes, axis=0, out=stats[0])
    np.true_divide(stats[0], np.intp(k), out=stats[0], casting="unsafe")  # as h.mean(axis=1) divides
    np.maximum.reduce(nodes, axis=0, out=stats[1])
    out_rows.reshape(-1, 2, hidden)[...] = stats.reshape(2, -1, hidden).transpose(1, 0, 2)


@dataclass
class SageForward:
    """The LLMCO2Net forward pass from its state-dict arrays (float32, like the trained network).

    Node states are kept feature-major (``[features, nodes]``): each SAGE layer is one matrix
    product of the stacked ``[W_l | W_r | b_l]`` (``[hidden, 2 F + 1]``) with the layer input laid
    out as ``[aggregate; root; 1]`` (``[2 F + 1, nodes]``), which equals ``lin_l(aggregate) +
    lin_r(root)``, the bias added last (BLAS accumulates each output in the order of the inner
    dimension, so this rounds as adding the bias afterwards does). Its output goes straight into
    the root half of the next layer's input, and the ReLU runs in place over contiguous memory.
    The leading nodes of a structure with no in-neighbour (an aggregate of zeros: the DAG's first
    kernel) skip the ``W_l`` half where both products are large enough for OpenBLAS's large-product
    path (each output summed in input order, whatever the number of columns): the zeros add nothing
    to the sums, so the numbers are the same. Buffers are allocated once per call and reused by
    every block; the pooled mean and max are reductions over the nodes into one of them.
    """

    convs: list[NDArray[np.float32]]  # [W_l | W_r | b_l] of each layer, [hidden, 2 F + 1]
    head: list[tuple[NDArray[np.float32], NDArray[np.float32]]]  # (W^T, b) of each Linear
    use_graph: bool = True

    @classmethod
    def from_state_dict(cls, weights: dict[str, NDArray[np.float32]], num_layers: int, use_graph: bool) -> SageForward:
        try:
            convs = []
            for i in range(num_layers if use_graph else 0):
                p = f"convs.{i}."
                bias = weights.get(p + "lin_l.bias")
                w_l, w_r = weights[p + "lin_l.weight"], weights[p + "lin_r.weight"]
                b = bias if bias is not None else np.zeros(w_l.shape[0], np.float32)
                convs.append(np.ascontiguousarray(np.concatenate([w_l, w_r, np.reshape(b, (-1, 1))], axis=1), dtype=np.float32))
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

    def _pooled(self, x: NDArray[np.float32], nodes: NDArray[np.int64], k: int, sources: tuple[tuple[int, ...], ...],
                work: list[NDArray[np.float32]], out_rows: NDArray[np.float32]) -> None:
        """Write into ``out_rows`` (``[m, 2 * hidden]``) the mean and max pooled node states of
        ``m`` graphs of one structure (``k`` nodes, ``sources[i]`` the nodes with an edge into
        node ``i``). ``x``: node features ``[num_nodes, F]``; ``nodes``: the graphs' ``k * m``
        rows of ``x``, node-major. ``work``: three flat float32 buffers of
        ``k * m * (2 * max(F, hidden) + 1)`` floats or more."""
        rows = len(nodes)
        m = rows // k
        f = x.shape[1]
        a = work[0][:(2 * f + 1) * rows].reshape(2 * f + 1, rows)
        gathered = work[2][:rows * f].reshape(rows, f)
        np.take(x, nodes, axis=0, out=gathered, mode="clip")  # the indices are in range
        a[f:2 * f] = gathered.T  # root half, feature-major
        a[2 * f].fill(1.0)  # times the bias
        zeros = work[2][-rows:].reshape(1, rows)  # a zero row, for a fast in-place ReLU
        zeros.fill(0.0)
        lead = next((i for i, srcs in enumerate(sources) if srcs), k)  # leading nodes with no in-neighbour
        out = a[f:2 * f]
        for layer, w in enumerate(self.convs):
            root = a[f:2 * f].reshape(f, k, m)
            agg = a[:f].reshape(f, k, m)
            hidden = w.shape[0]
            # the leading nodes' aggregates are zeros, which add nothing to the sums: their product
            # skips the W_l half when both products take OpenBLAS's large-product path
            skip = lead * m if 0 < lead < k and hidden * m * min(lead, k - lead) * f >= BIAS_IN_PRODUCT else 0
            for t0, t1, s0, s1 in single_source_runs(sources):  # one in-neighbour: its state, copied
                np.copyto(agg[:, t0:t1], root[:, s0:s1])
            for i, srcs in enumerate(sources):  # sum over in-neighbours, then divide: as scatter-mean does
                if len(srcs) > 1:
                    target = agg[:, i]
                    np.add(root[:, srcs[0]], root[:, srcs[1]], out=target)
                    for j in srcs[2:]:
                        target += root[:, j]
                    target /= np.float32(len(srcs))
                elif not srcs and (i >= lead or not skip):
                    agg[:, i].fill(0.0)
            if layer == len(self.convs) - 1:
                if skip or hidden * rows * 2 * f >= BIAS_IN_PRODUCT:  # large products: node-major output
                    _last_node_major(w, a, skip, work[2][:hidden * rows].reshape(rows, hidden), k, out_rows)
                    return
                out = work[2][:hidden * rows].reshape(hidden, rows)
            else:
                nxt = work[1 - layer % 2][:(2 * hidden + 1) * rows].reshape(2 * hidden + 1, rows)
                nxt[2 * hidden].fill(1.0)
                out = nxt[hidden:2 * hidden]
            if skip:  # both products large: the bias rides in each, last
                np.matmul(w[:, f:], a[f:, :skip], out=out[:, :skip])
                np.matmul(w, a[:, skip:], out=out[:, skip:])
            elif hidden * rows * 2 * f >= BIAS_IN_PRODUCT:
                np.matmul(w, a, out=out)  # with the bias, last
            else:  # OpenBLAS's path for small products sums in another order: the bias is added after
                np.matmul(w[:, :-1], a[:-1], out=out)
                out += w[:, -1:]
            np.maximum(out, zeros, out=out)
            a, f = (nxt, hidden) if layer < len(self.convs) - 1 else (a, f)
        h = out.reshape(-1, k, m)
        hidden = h.shape[0]
        stats = work[1][:2 * hidden * m].reshape(2 * hidden, m)  # free once the last layer has run
        np.add.reduce(h, axis=1, out=stats[:hidden])  # summed over the nodes in order, as h.mean(axis=1) does,
        np.true_divide(stats[:hidden], np.intp(k), out=stats[:hidden], casting="unsafe")  # and divided as it does
        np.maximum.reduce(h, axis=1, out=stats[hidden:])
        out_rows[...] = stats.T

    def __call__(self, g: GraphArrays, threads: int | None = None) -> NDArray[np.float32]:
        """``[num_graphs, out_dim]`` standardised outputs (``threads``: default
        :func:`forward_threads`)."""
        width = 2 * self._width(g) if self.use_graph else 0
        z = np.empty((g.num_graphs, width + g.u.shape[1]), dtype=np.float32)  # [pooled | globals]
        with _blas_single_thread():  # the same products, so the same rounding, on any machine
            if self.use_graph:
                self.pooled(g, threads, out=z[:, :width])
            z[:, width:] = g.u
            for j, (w, b) in enumerate(self.head):
                z = z @ w
                z += b
                if j < len(self.head) - 1:
                    z = _relu(z)
        return z

    def _width(self, g: GraphArrays) -> int:
        """Width of a node state after the SAGE layers (the node features without any)."""
        return int(self.convs[-1].shape[0]) if self.convs else int(g.x.shape[1])

    def pooled(self, g: GraphArrays, threads: int | None = None, out: NDArray[np.float32] | None = None) -> NDArray[np.float32]:
        """``[num_graphs, 2 * hidden]`` pooled node states after the SAGE layers (written into
        ``out`` when given, e.g. a view into the head's input).

        The graphs are cut into blocks of at most :data:`FORWARD_BLOCK` graphs of one structure,
        largest first, and ``threads`` threads (default :func:`forward_threads`) take blocks from a
        queue; BLAS runs
        one thread per call meanwhile, so every block is computed the same way however many
        threads there are."""
        width = self._width(g)
        pooled = np.empty((g.num_graphs, 2 * width), dtype=np.float32) if out is None else out
        sg = structure_groups(g)
        narrowest = min([g.x.shape[1], *(w.shape[0] for w in self.convs)])  # the fewest inputs and outputs of a layer
        units = [(part, k, sources) for graphs, k, sources in sg.groups for lo in range(0, len(graphs), FORWARD_BLOCK)
                 for part in cache_halves(graphs[lo:lo + FORWARD_BLOCK], k, narrowest)]
        if not units:
            return pooled
        units.sort(key=lambda u: -len(u[0]) * u[1])
        size = max(len(block) * k for block, k, _ in units) * (2 * max(g.x.shape[1], width) + 1)
        queue: SimpleQueue[tuple[NDArray[np.int64], int, tuple[tuple[int, ...], ...]]] = SimpleQueue()
        for unit in units:
            queue.put(unit)

        def work() -> None:
            buffers = [np.empty(size, dtype=np.float32) for _ in range(3)]
            while True:
                try:
                    block, k, sources = queue.get_nowait()
                except Empty:
                    return
                nodes = (sg.starts[block][None, :] + np.arange(k)[:, None]).reshape(-1)
                rows = np.empty((len(block), pooled.shape[1]), dtype=np.float32)
                self._pooled(g.x, nodes, k, sources, buffers, rows)
                pooled[block] = rows

        threads = min(threads or forward_threads(), len(units))
        with _blas_single_thread():
            if threads == 1:
                work()
            else:
                with ThreadPoolExecutor(threads) as pool:
                    for done in [pool.submit(work) for _ in range(threads)]:
                        done.result()
        return pooled


#: Per thread: whether :func:`forward_threads` is held at one (:func:`one_thread`).
_LOCAL = threading.local()


@contextmanager
def one_thread() -> Iterator[None]:
    """Within this context, the calling thread predicts on its own: :func:`forward_threads` is 1
    there (no worker threads), e.g. in each of the threads that predict a file's chunks side by
    side. The numbers are the same either way."""
    before = getattr(_LOCAL, "one", False)
    _LOCAL.one = True
    try:
        yield
    finally:
        _LOCAL.one = before


def forward_threads() -> int:
    """Threads of the forward pass: the CPUs this process may use (at most 8), or
    ``LLMCO2_THREADS`` when set; 1 inside :func:`one_thread`."""
    if getattr(_LOCAL, "one", False):
        return 1
    given = os.environ.get("LLMCO2_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _blas_single_thread() -> AbstractContextManager[Any]:
    """A context in which BLAS calls run on one thread (threadpoolctl), or a no-op without it.
    The libraries are looked up once per process (some 0.5 ms a look-up)."""
    controller = _threadpool_controller()
    return controller.limit(limits=1, user_api="blas") if controller is not None else nullcontext()


@functools.lru_cache(maxsize=1)
def _threadpool_controller() -> Any:
    """threadpoolctl's controller of the loaded thread pools, or None without threadpoolctl."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()
