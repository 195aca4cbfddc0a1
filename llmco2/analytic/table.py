"""Many requests as columns: per-row numbers in arrays, architectures, GPUs and request kinds
(dtypes, attention kernel, engine) as small lists indexed by per-row codes.

A 20,000-row request file mixes a few hundred (architecture, GPU, dtype) combinations, so everything that
depends only on those — catalog look-ups, parameter counts, peak throughputs, validation rules —
is computed once per distinct combination and broadcast, never once per row.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.item_codes import ROW_COUNTS, code_items
from llmco2.analytic.layer import LayerBatch
from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import GPU
from llmco2.specs.models import ModelArch
from llmco2.specs.requests import Request, validate_request

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class RequestTable:
    """``n`` requests as columns.

    Attributes:
        archs / gpus / kinds: distinct architectures, GPUs and request kinds (a `Request` whose
            dtypes, attention flags and engine are the row's; its token counts are not used).
        arch / gpu / kind: per-row index into those lists.
        batch_size, prompt_tokens, generated_tokens, num_gpus, tensor_parallel, expert_parallel: per-row counts.
    """

    archs: list[ModelArch]
    gpus: list[GPU]
    kinds: list[Request]
    arch: IntArray
    gpu: IntArray
    kind: IntArray
    batch_size: IntArray
    prompt_tokens: IntArray
    generated_tokens: IntArray
    num_gpus: IntArray
    tensor_parallel: IntArray
    expert_parallel: IntArray

    def __len__(self) -> int:
        return int(self.arch.shape[0])

    @classmethod
    def from_items(cls, items: Sequence[tuple[ModelArch, Request, GPU]]) -> RequestTable:
        """Columns of (arch, request, gpu) triples (one light pass: attribute reads only)."""
        arch_list, gpu_list, kind_list, codes, nums = code_items(items)
        return cls(arch_list, gpu_list, kind_list, codes[0], codes[1], codes[2], *nums)

    def item(self, i: int) -> tuple[ModelArch, Request, GPU]:
        """Row ``i`` as an (arch, request, gpu) triple."""
        return self.take(np.array([i])).items()[0]

    def items(self) -> list[tuple[ModelArch, Request, GPU]]:
        """Every row as a triple. The requests are copies of the row's kind with its counts set
        directly (the counts were checked as columns: positive integers, TP and EP dividing the
        GPUs, EP a multiple of TP), so this costs about a microsecond per row."""
        archs, gpus, kinds = self.archs, self.gpus, [k.__dict__ for k in self.kinds]
        new = object.__new__
        out = []
        cols = zip(self.arch.tolist(), self.gpu.tolist(), self.kind.tolist(), self.batch_size.tolist(),
                   self.prompt_tokens.tolist(), self.generated_tokens.tolist(), self.num_gpus.tolist(),
                   self.tensor_parallel.tolist(), self.expert_parallel.tolist(), strict=True)
        for a, g, k, b, p, n_gen, n_gpu, tp, ep in cols:
            req = new(Request)
            d = req.__dict__
            d.update(kinds[k])
            d["batch_size"], d["prompt_tokens"], d["generated_tokens"], d["num_gpus"], d["tensor_parallel"] = b, p, n_gen, n_gpu, tp
            d["expert_parallel"] = ep
            out.append((archs[a], req, gpus[g]))
        return out

    def take(self, rows: NDArray[np.int64] | slice) -> RequestTable:
        """The rows ``rows`` (catalog lists shared)."""
        return RequestTable(self.archs, self.gpus, self.kinds, self.arch[rows], self.gpu[rows], self.kind[rows],
                            self.batch_size[rows], self.prompt_tokens[rows], self.generated_tokens[rows],
                            self.num_gpus[rows], self.tensor_parallel[rows], self.expert_parallel[rows])

    def device_ids(self) -> NDArray[np.str_]:
        """GPU id of every row."""
        return np.array([g.id for g in self.gpus])[self.gpu]

    def engine_ids(self) -> NDArray[np.str_]:
        """Serving-engine id of every row."""
        return np.array([k.engine for k in self.kinds])[self.kind]

    def layer_batch(self) -> LayerBatch:
        """The shapes of every row (`LayerBatch.from_parts`: no per-row Python)."""
        counts = {f: getattr(self, attr).astype(np.float64) for f, attr in ROW_COUNTS.items()}
        return LayerBatch.from_parts(self.archs, self.arch, self.gpus, self.gpu, self.kinds, self.kind, counts)

    def validate(self, check_context: bool = True, line: IntArray | None = None) -> None:
        """`validate_request` on every row, run once per distinct outcome-determining combination
        (arch, GPU, kind, TP, EP, GPUs, context fits); the error names the first failing row."""
        max_ctx = np.array([a.max_context for a in self.archs], dtype=np.int64)[self.arch]
        fits = (self.prompt_tokens + self.generated_tokens <= max_ctx) | (not check_context)
        if self.all_valid(fits):
            return  # every row passes every check below: nothing to name
        first, _ = distinct_rows(self.arch, self.gpu, self.kind, self.tensor_parallel, self.expert_parallel, self.num_gpus, fits)
        first = np.sort(first)
        for i, (arch, req, gpu) in zip(first.tolist(), self.take(first).items(), strict=True):
            try:
                validate_request(req, arch, gpu, check_context=check_context)
            except InvalidInputError as exc:
                where = f"line {int(line[i])}: " if line is not None else f"row {i}: "
                raise InvalidInputError(f"{where}{exc}", field=None) from None

    def all_valid(self, fits: NDArray[np.bool_]) -> bool:
        """Whether every row passes `validate_request` (``fits``: each row's context check), by
        column arithmetic over the distinct architectures, GPUs and kinds: ``True`` only where each
        of its checks holds for every row (else the rows are checked one combination at a time,
        which names the first failing row)."""
        tp, ep, gpus = self.tensor_parallel, self.expert_parallel, self.num_gpus
        if not len(self) or not (fits.all() and (tp > 0).all() and (ep > 0).all()):
            return not len(self)

        def arch_col(name: str) -> IntArray:
            return np.array([getattr(a, name) for a in self.archs], dtype=np.int64)[self.arch]
        heads, kv, inter, layers = (arch_col(n) for n in ("num_heads", "num_kv_heads", "intermediate_size", "num_layers"))
        experts = arch_col("num_experts")
        moe = np.array([a.is_moe for a in self.archs], dtype=bool)[self.arch]
        per_node = np.array([max(g.gpus_per_node, 1) for g in self.gpus], dtype=np.int64)[self.gpu]
        linked = np.array([g.interconnect_bandwidth_gb_s > 0 for g in self.gpus], dtype=bool)[self.gpu]
        dtype_ok = np.array([[g.supports(k.compute_dtype) for k in self.kinds] for g in self.gpus], dtype=bool)
        attention_dp = np.where(ep > tp, ep // tp, 1)
        kv_ok = (kv % tp == 0) | ((kv > 0) & (tp % np.maximum(kv, 1) == 0))
        experts_ok = (ep == 1) | (moe & (experts % ep == 0) & (ep <= per_node) & linked)
        ok = (experts_ok & (heads % tp == 0) & kv_ok & (inter % tp == 0) & (gpus // (tp * attention_dp) <= layers)
              & (tp <= per_node) & ((tp == 1) | linked) & dtype_ok[self.gpu, self.kind])
        return bool(ok.all())


def distinct_rows(*columns: NDArray[Any]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Distinct rows of equal-length columns: ``(first row of each distinct row, group of every
    row)``, groups numbered in sorted order (a lexsort: no per-row Python)."""
    n = len(columns[0])
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(columns[::-1])
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for c in columns:
        sc = c[order]
        new[1:] |= sc[1:] != sc[:-1]
    group = np.cumsum(new) - 1
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = group
    return order[new].astype(np.int64), inverse


def object_codes(objects: Sequence[Any]) -> tuple[list[Any], NDArray[np.int64]]:
    """``(distinct objects, per-row code)``, objects compared by identity, in order of first
    appearance (no per-row Python beyond reading ``id``)."""
    if not isinstance(objects, (list, tuple)):
        objects = list(objects)  # held, so that no two rows' objects share an id
    n = len(objects)
    if not n:
        return [], np.zeros(0, dtype=np.int64)
    ids = np.fromiter(map(id, objects), dtype=np.int64, count=n)
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return [objects[int(i)] for i in first[order]], rank[inverse.reshape(-1)].astype(np.int64)


def value_codes(values: Sequence[Hashable]) -> tuple[list[Any], NDArray[np.int64]]:
    """``(distinct values, per-row code)`` of hashable values compared by equality: codes by
    identity first (:func:`object_codes`), then equal values merged (a dict over the distinct
    objects only), in order of first appearance. A NumPy array is coded by ``np.unique`` (sorted)."""
    if isinstance(values, np.ndarray):
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq.tolist(), inverse.reshape(-1).astype(np.int64)
    objs, code = object_codes(values)
    index: dict[Any, int] = {}
    merge = np.array([index.setdefault(v, len(index)) for v in objs], dtype=np.int64)
    return list(index), merge[code] if len(code) else code
