"""GPU priors (the set H of the paper's Section 4.2) and placement: which GPU kinds and counts
can run a configuration.

A configuration is *placeable* on ``c`` GPUs of a kind when the GPU runs the request's compute
dtype, ``c`` (the tensor-parallel degree; no pipeline parallelism) divides the heads, KV heads and
MLP width, ``c`` GPUs fit in one node with an interconnect, and weights + KV cache (bytes, the
analytic engine's memory model, :func:`memory_need_bytes`) fit in ``memory_fraction`` of their
memory.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.sampling.architectures import arch_variants
from llmco2.data.sampling.common import ARCH_COLUMNS, DTYPES, IntArray
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, Request, get_gpu, get_model

#: The paper's Table 2 GPUs (T4, L4, A100 at 2,039 GB/s = 80 GB SXM, H100 at 3,350 GB/s = SXM).
PAPER_GPUS = ("t4", "l4", "a100-80gb", "h100-sxm")
#: GPU counts (tensor-parallel degrees) the samplers may draw.
GPU_COUNTS = (1, 2, 3, 4)
#: Any GPU that runs fp16, bf16 and int8: supplies dtype sizes to the memory model (its own
#: capacity and speed are never used there).
_SHAPE_GPU = "a100-80gb"


@dataclass(frozen=True)
class Gpus:
    """GPU kinds as arrays (one entry per kind) and the sorted GPU counts ``counts`` allowed."""

    gpus: tuple[GPU, ...]
    counts: IntArray

    @functools.cached_property
    def ids(self) -> NDArray[np.object_]:
        return np.array([g.id for g in self.gpus], dtype=object)

    @functools.cached_property
    def memory_bytes(self) -> NDArray[np.float64]:
        """Memory of one GPU of each kind (bytes)."""
        return np.array([g.memory_bytes for g in self.gpus])

    def placeable(self, gpu_idx: IntArray | None = None) -> NDArray[np.bool_]:
        """(G, C) or per-row (n, C): can ``c`` GPUs of this kind run tensor parallel (node, link)?"""
        per_node = np.array([max(g.gpus_per_node, 1) for g in self.gpus])
        linked = np.array([g.interconnect_bandwidth_gb_s > 0 for g in self.gpus])
        ok = (self.counts[None, :] <= per_node[:, None]) & ((self.counts[None, :] == 1) | linked[:, None])
        return ok if gpu_idx is None else ok[gpu_idx]

    def supports(self, dtypes: Sequence[str]) -> NDArray[np.bool_]:
        """(G, D): does the GPU run the compute dtype of weights in each of ``dtypes``?"""
        return np.array([[g.supports(Request(weight_dtype=d).compute_dtype) for d in dtypes] for g in self.gpus],  # type: ignore[arg-type]
                        dtype=bool).reshape(len(self.gpus), len(dtypes))


def sampler_gpus(names: Sequence[str], counts: Sequence[int]) -> Gpus:
    """The distinct catalog GPUs ``names`` (at least one) and positive GPU ``counts``."""
    gpus: list[GPU] = []
    for name in names:
        gpu = get_gpu(str(name))
        if gpu.id not in {g.id for g in gpus}:
            gpus.append(gpu)
    if not gpus:
        raise InvalidInputError("give at least one GPU", field="gpus")
    c = sorted({int(x) for x in counts})
    if not c or c[0] < 1:
        raise InvalidInputError(f"must be positive integers, got {list(counts)}", field="gpu_counts")
    return Gpus(tuple(gpus), np.array(c, dtype=np.int64))


def memory_need_bytes(df: pd.DataFrame) -> NDArray[np.float64]:
    """Weights + KV cache (bytes) of every row of a sample frame, on a single device.

    Uses the analytic engine's memory model (`model_totals` of a one-GPU `LayerBatch`:
    ``weight_bytes_per_gpu + kv_cache_bytes_per_gpu``): a row fits on ``c`` GPUs of ``M`` bytes
    exactly when ``model_totals(...).fits_in_memory`` holds there, i.e. need <= ``c * M``.
    Vectorised: one `ModelArch` per distinct architecture, one `LayerBatch` for all rows.
    """
    from llmco2.analytic.layer import LayerBatch, analyze_layers
    from llmco2.analytic.model import model_totals

    n = len(df)
    if n == 0:
        return np.zeros(0)
    codes, archs = arch_variants(df)
    params = np.array([a.param_count() for a in archs], dtype=np.float64)[codes]
    # one template row per (base model, dtype): everything the memory model reads besides shapes
    combo_keys = df["model"].astype(str) + "|" + df["dtype"].astype(str)
    combo_codes, combos = pd.factorize(combo_keys)
    shape_gpu = get_gpu(_SHAPE_GPU)
    items = []
    for key in combos:
        model, dtype = str(key).split("|")
        items.append((get_model(model), Request(weight_dtype=dtype), shape_gpu))
    template = LayerBatch.from_items(items, validate=False)
    idx = np.asarray(combo_codes, dtype=np.int64)
    expanded = {f.name: getattr(template, f.name)[idx] for f in fields(LayerBatch)}
    col = {c: df[c].to_numpy(dtype=np.float64) for c in (*ARCH_COLUMNS, "batch_size", "prompt_tokens", "generated_tokens")}
    expanded.update(hidden=col["hidden_size"], intermediate=col["intermediate_size"], layers=col["num_layers"],
                    heads=col["num_heads"], kv_heads=col["num_kv_heads"], head_dim=col["head_dim"], params=params,
                    batch=col["batch_size"], prompt=col["prompt_tokens"], generated=col["generated_tokens"],
                    tp=np.ones(n), num_gpus=np.ones(n))
    totals = model_totals(analyze_layers(replace(template, **expanded)))
    return np.asarray(totals.weight_bytes_per_gpu + totals.kv_cache_bytes_per_gpu, dtype=np.float64)


def feasible(df: pd.DataFrame, gpus: Gpus, dtypes: Sequence[str], memory_fraction: float,
              need: NDArray[np.float64] | None = None) -> NDArray[np.bool_]:
    """(n, G, C): can row i run on ``counts[c]`` GPUs of kind ``g``? (dtype, TP, node, memory)."""
    if need is None:
        need = memory_need_bytes(df)
    c = gpus.counts
    heads, kv, inter = (df[k].to_numpy(dtype=np.int64) for k in ("num_heads", "num_kv_heads", "intermediate_size"))
    tp_ok = (heads[:, None] % c == 0) & (kv[:, None] % c == 0) & (inter[:, None] % c == 0)  # (n, C)
    dtype_idx = pd.Index(list(dtypes)).get_indexer(df["dtype"].astype(str))
    if np.any(dtype_idx < 0):
        raise InvalidInputError(f"dtype must be one of {', '.join(dtypes)}", field="dtype")
    dtype_ok = gpus.supports(dtypes).T[dtype_idx]  # (n, G)
    fits = need[:, None, None] <= gpus.memory_bytes[None, :, None] * c[None, None, :] * memory_fraction
    return tp_ok[:, None, :] & gpus.placeable()[None, :, :] & dtype_ok[:, :, None] & fits


def placeable_as_is(df: pd.DataFrame, memory_fraction: float) -> NDArray[np.bool_]:
    """Can each row run on its own ``gpu`` x ``num_gpus``?"""
    if not len(df):
        return np.zeros(0, dtype=bool)
    gpu_ids = list(pd.unique(df["gpu"]))
    counts = np.unique(df["num_gpus"].to_numpy(dtype=np.int64))
    gpus = sampler_gpus(gpu_ids, counts.tolist())
    feas = feasible(df, gpus, DTYPES, memory_fraction)
    g = pd.Index(list(gpus.ids)).get_indexer(df["gpu"].map(lambda x: get_gpu(x).id))
    c = np.searchsorted(gpus.counts, df["num_gpus"].to_numpy(dtype=np.int64))
    return feas[np.arange(len(df)), g, c]
