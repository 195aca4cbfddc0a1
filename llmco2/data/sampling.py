"""Configuration samplers for building an energy dataset (paper Section 4.2, Algorithm 1).

Every sampler returns one row per configuration to measure, with the columns of
:data:`SAMPLE_COLUMNS`: the catalog id of the base architecture (``model``), the GPU and GPU
count, the request (batch, prompt and generated tokens, weight ``dtype``), the workload it was
drawn from (``trace``: code, conv or uniform) and the **effective** architecture (perturbed or
not). :func:`rows_to_items` turns rows back into ``(ModelArch, Request, GPU)`` triples for the
analytic engine or a measurement harness.

* :class:`RandomSampler` is the paper's baseline: uniform over ranges.
* :class:`FocusedSampler` draws from the paper's priors: catalog architectures and perturbed
  variants of them (A), (prompt, generated) pairs resampled from the Azure traces (I), batch
  sizes of one or two with a small tail, and GPUs with the number of devices from the minimum
  that holds weights + KV cache up to four (H).
* :func:`fine_grained_sample` is Algorithm 1's ``FineGraindSampling`` (B points within ±C of a
  point), and :func:`focused_loop` the whole loop around any regressor and any measurement.

A configuration is *placeable* on ``c`` GPUs of a kind when the GPU runs the request's compute
dtype, ``c`` (the tensor-parallel degree; no pipeline parallelism) divides the heads, KV heads and
MLP width, ``c`` GPUs fit in one node with an interconnect, and weights + KV cache (the analytic
engine's memory model, :func:`memory_need_bytes`) fit in ``memory_fraction`` of their memory.
Samplers drop what cannot be placed anywhere allowed, count it and log it.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request, get_gpu, get_model, validate_request

log = logging.getLogger(__name__)

IntArray = NDArray[np.int64]

ARCH_COLUMNS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")
SAMPLE_COLUMNS = ("model", "gpu", "num_gpus", "batch_size", "prompt_tokens", "generated_tokens", "dtype", "trace",
                  *ARCH_COLUMNS)
INT_COLUMNS = ("num_gpus", "batch_size", "prompt_tokens", "generated_tokens", *ARCH_COLUMNS)
DTYPES = ("fp16", "bf16", "int8", "int4")
#: Default share of each weight dtype in the focused draw (renormalised over the dtypes allowed).
DTYPE_WEIGHTS = {"fp16": 0.4, "bf16": 0.3, "int8": 0.15, "int4": 0.15}
SAMPLE_TRACES = ("code", "conv", "uniform")

#: The 17 LLMs of the paper's Section 5.1.
PAPER_MODELS = ("bloom-560m", "bloom-1b1", "bloom-1b7", "bloom-3b", "bloom-7b1", "gemma-2b", "gemma-7b", "gemma2-2b",
                "gemma2-9b", "gemma2-27b", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b", "qwen2-72b", "llama3.1-8b",
                "llama3.1-70b", "mixtral-8x7b")
#: The edge models of the CO2-Meter data that are not among the paper's 17 (Qwen2-1.5B is).
EDGE_MODELS = ("tinyllama-1.1b", "qwen1.5-0.5b", "internlm2-1.8b")
#: The paper's Table 2 GPUs (T4, L4, A100 at 2,039 GB/s = 80 GB SXM, H100 at 3,350 GB/s = SXM).
PAPER_GPUS = ("t4", "l4", "a100-80gb", "h100-sxm")
GPU_COUNTS = (1, 2, 3, 4)

#: Algorithm 1's ±C per field (the paper gives 10 prompt tokens, 1 generated token, 1 layer).
DEFAULT_RANGES: dict[str, int] = {"prompt_tokens": 10, "generated_tokens": 1, "num_layers": 1, "batch_size": 0,
                                  "num_gpus": 0, "hidden_size": 0, "intermediate_size": 0, "num_heads": 0}
#: Target column of the frames :func:`focused_loop` returns.
TARGET = "target"
#: Any GPU that runs fp16, bf16 and int8: supplies dtype sizes to the memory model (its own
#: capacity and speed are never used there).
_SHAPE_GPU = "a100-80gb"


# -- small helpers -----------------------------------------------------------------------------
def _as_list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise InvalidInputError(f"must be a list, got {value!r}", field=name) from None


def _weights(values: Any, k: int, name: str) -> NDArray[np.float64]:
    """Normalised non-negative weights of length ``k`` (``None``: equal)."""
    if values is None:
        return np.full(k, 1.0 / k)
    w = np.asarray(_as_list(values, name), dtype=np.float64)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidInputError(f"must be {k} non-negative numbers with a positive sum, got {list(values)}", field=name)
    return w / w.sum()


def _pick(weights: NDArray[np.float64], u: NDArray[np.float64]) -> tuple[IntArray, NDArray[np.bool_]]:
    """Row-wise categorical draw: column index per row (probability proportional to ``weights``)
    from uniforms ``u``; ``ok`` is false where a row has no positive weight."""
    cum = np.cumsum(weights, axis=1)
    total = cum[:, -1]
    idx = (cum <= (u * total)[:, None]).sum(axis=1)
    return np.minimum(idx, weights.shape[1] - 1).astype(np.int64), total > 0


def _round_to(x: NDArray[np.float64], step: Any) -> IntArray:
    """Round to a positive multiple of ``step`` (at least ``step``)."""
    step = np.asarray(step, dtype=np.float64)
    return (np.maximum(np.rint(x / step), 1.0) * step).astype(np.int64)


@functools.lru_cache(maxsize=8)
def _trace_pairs(which: str, path: str | None) -> IntArray:
    """(prompt, generated) rows of an Azure trace, counts below 1 raised to 1 (cached)."""
    from llmco2.data.azure import load_trace

    df = load_trace(which, path)
    pairs = df[["prompt_tokens", "generated_tokens"]].to_numpy(dtype=np.int64)
    pairs.setflags(write=False)
    return np.maximum(pairs, 1)


def trace_pairs(which: str, path: str | Path | None = None) -> IntArray:
    """The (prompt, generated) pairs of trace ``which``: the inference prior (read once per process)."""
    return _trace_pairs(which, None if path is None else str(Path(path).resolve()))


# -- model and GPU tables ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Models:
    archs: tuple[ModelArch, ...]

    @functools.cached_property
    def ids(self) -> NDArray[np.object_]:
        return np.array([a.id for a in self.archs], dtype=object)

    def col(self, name: str) -> IntArray:
        return np.array([getattr(a, name) for a in self.archs], dtype=np.int64)

    @functools.cached_property
    def max_context(self) -> IntArray:
        return self.col("max_context")

    @functools.cached_property
    def explicit_head_dim(self) -> NDArray[np.bool_]:
        return np.array([a.hidden_size != a.num_heads * a.head_dim for a in self.archs], dtype=bool)


def _models(names: Sequence[str]) -> _Models:
    archs: list[ModelArch] = []
    for name in names:
        arch = get_model(str(name))
        if arch.id not in {a.id for a in archs}:
            archs.append(arch)
    if not archs:
        raise InvalidInputError("give at least one model", field="models")
    return _Models(tuple(archs))


@dataclass(frozen=True)
class _Gpus:
    gpus: tuple[GPU, ...]
    counts: IntArray

    @functools.cached_property
    def ids(self) -> NDArray[np.object_]:
        return np.array([g.id for g in self.gpus], dtype=object)

    @functools.cached_property
    def memory_bytes(self) -> NDArray[np.float64]:
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


def _gpus(names: Sequence[str], counts: Sequence[int]) -> _Gpus:
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
    return _Gpus(tuple(gpus), np.array(c, dtype=np.int64))


def _check_dtypes(dtypes: Sequence[str]) -> list[str]:
    out = [str(d) for d in dtypes]
    bad = [d for d in out if d not in DTYPES]
    if bad or not out:
        raise InvalidInputError(f"sampled weight dtypes must be among {', '.join(DTYPES)}, got {out}", field="dtypes")
    return out


# -- architecture variants ---------------------------------------------------------------------
def _variant(base: ModelArch, values: Sequence[int]) -> ModelArch:
    """``base`` with the effective architecture ``values`` (in :data:`ARCH_COLUMNS` order)."""
    changes = {c: int(v) for c, v in zip(ARCH_COLUMNS, values, strict=True) if int(v) != getattr(base, c)}
    if not changes:
        return base
    tag = "-".join(f"{c.split('_')[-1][:1] if c != 'num_kv_heads' else 'kv'}{int(v)}" for c, v in changes.items())
    return base.with_overrides(**changes, id=f"{base.id}~{tag}", name=f"{base.name or base.id} (perturbed: {tag})",
                               aliases=(), published_params_b=None, active_params_b=None)


def _variants(df: pd.DataFrame) -> tuple[IntArray, list[ModelArch]]:
    """Distinct (model, architecture) of ``df``: a code per row and the `ModelArch` of each code."""
    keys = ["model", *ARCH_COLUMNS]
    codes = df.groupby(keys, sort=False).ngroup().to_numpy(dtype=np.int64)
    first = df.drop_duplicates(keys)
    archs: list[ModelArch] = []
    bases: dict[str, ModelArch] = {}
    for row in first[keys].itertuples(index=False):
        model = str(row[0])
        base = bases.setdefault(model, get_model(model))
        archs.append(_variant(base, [int(v) for v in row[1:]]))
    return codes, archs


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
    codes, archs = _variants(df)
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


def _feasible(df: pd.DataFrame, gpus: _Gpus, dtypes: Sequence[str], memory_fraction: float,
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


# -- frames ------------------------------------------------------------------------------------
def _frame(cols: Mapping[str, Any]) -> pd.DataFrame:
    df = pd.DataFrame({c: cols[c] for c in SAMPLE_COLUMNS})
    for c in INT_COLUMNS:
        df[c] = df[c].astype(np.int64)
    for c in ("model", "gpu", "dtype", "trace"):
        df[c] = df[c].astype(object).astype(str)
    return df.reset_index(drop=True)


def check_samples(df: pd.DataFrame) -> pd.DataFrame:
    """Check a sample frame's columns and value domains; the frame with canonical types."""
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise InvalidInputError(f"missing columns {', '.join(missing)}; a sample frame has {', '.join(SAMPLE_COLUMNS)}",
                                field="columns")
    for c in INT_COLUMNS:
        values = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values) | (values < 1) | (values != np.floor(values))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"row {i}: {c} must be a positive integer, got {df[c].iloc[i]!r}", field=c)
    bad_dtype = ~df["dtype"].astype(str).isin(DTYPES)
    if bad_dtype.any():
        i = int(np.flatnonzero(bad_dtype.to_numpy())[0])
        raise InvalidInputError(f"row {i}: dtype {df['dtype'].iloc[i]!r} is not one of {', '.join(DTYPES)}", field="dtype")
    bad_trace = ~df["trace"].astype(str).isin(SAMPLE_TRACES)
    if bad_trace.any():
        i = int(np.flatnonzero(bad_trace.to_numpy())[0])
        raise InvalidInputError(f"row {i}: trace {df['trace'].iloc[i]!r} is not one of {', '.join(SAMPLE_TRACES)}",
                                field="trace")
    extra = [c for c in df.columns if c not in SAMPLE_COLUMNS]
    return pd.concat([_frame({c: df[c].to_numpy() for c in SAMPLE_COLUMNS}), df[extra].reset_index(drop=True)], axis=1)


def to_csv(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a sample frame (checked; extra columns such as a target kept after the sample columns)."""
    p = Path(path)
    if p.suffix.lower() != ".csv":
        raise InvalidInputError(f"{p}: sample files are .csv", field="out")
    table = check_samples(df)
    p.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(p, index=False)
    return p


def read_samples(path: str | Path) -> pd.DataFrame:
    """Read a sample frame written by :func:`to_csv` (checked)."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"no such file {str(p)!r}", field="path")
    return check_samples(pd.read_csv(p))


def rows_to_items(df: pd.DataFrame, validate: bool = True) -> list[tuple[ModelArch, Request, GPU]]:
    """``(ModelArch, Request, GPU)`` of every row, for the analytic engine or a harness.

    The architecture is the catalog model ``model`` with the row's effective architecture
    columns applied through `ModelArch.with_overrides` (validated; ``head_dim`` from its column,
    so a perturbed model keeps ``hidden = heads * head_dim`` exactly when the sampler kept it).
    Requests run tensor parallel over all ``num_gpus``. ``validate`` also checks every triple
    with `validate_request` (TP divisibility, node size, dtype support, context length).
    """
    df = check_samples(df)
    codes, archs = _variants(df)
    gpus = {g: get_gpu(g) for g in df["gpu"].unique()}
    out: list[tuple[ModelArch, Request, GPU]] = []
    cols = [df[c].to_numpy() for c in ("gpu", "num_gpus", "batch_size", "prompt_tokens", "generated_tokens", "dtype")]
    for i, (gpu_id, ng, bs, p, g, dt) in enumerate(zip(*cols, strict=True)):
        req = Request(batch_size=int(bs), prompt_tokens=int(p), generated_tokens=int(g), num_gpus=int(ng),
                      weight_dtype=str(dt))
        triple = (archs[codes[i]], req, gpus[gpu_id])
        if validate:
            try:
                validate_request(req, triple[0], triple[2])
            except InvalidInputError as exc:
                raise InvalidInputError(f"row {i}: {exc}", field=exc.field) from None
        out.append(triple)
    return out


# -- samplers ----------------------------------------------------------------------------------
@dataclass
class SampleReport:
    """What the last :meth:`sample` call did: ``drawn`` candidates (rounds oversample; the surplus
    beyond ``requested`` is discarded, not counted as dropped) and the candidates ``dropped`` per
    reason (``context``: no model's context holds the request; ``placement``: no allowed GPU and
    count can run it)."""

    requested: int = 0
    drawn: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def dropped_total(self) -> int:
        return int(sum(self.dropped.values()))

    def as_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "drawn": self.drawn, "dropped": self.dropped_total,
                "dropped_by_reason": dict(self.dropped), "seconds": round(self.seconds, 3)}


class _Sampler:
    """Shared driver: draw rounds of candidates until ``n`` placeable rows are collected."""

    memory_fraction: float
    max_rounds: int
    last_report: SampleReport

    def _draw(self, rng: np.random.Generator, m: int) -> tuple[pd.DataFrame, dict[str, int]]:
        raise NotImplementedError

    def _expected_keep(self) -> float:
        return 0.9

    def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
        """``n`` configurations (the columns of :data:`SAMPLE_COLUMNS`), the same for the same seed."""
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise InvalidInputError(f"must be a non-negative integer, got {n!r}", field="n")
        n = int(n)
        start = time.perf_counter()
        rng = np.random.default_rng(seed)
        report = SampleReport(requested=n)
        parts: list[pd.DataFrame] = []
        have = 0
        for _ in range(self.max_rounds):
            if have >= n:
                break
            m = int(math.ceil((n - have) / self._expected_keep() * 1.1)) + 16
            part, dropped = self._draw(rng, m)
            report.drawn += m
            for reason, count in dropped.items():
                report.dropped[reason] = report.dropped.get(reason, 0) + int(count)
            parts.append(part)
            have += len(part)
        report.seconds = time.perf_counter() - start
        self.last_report = report
        if have < n:
            raise InvalidInputError(f"only {have} of {n} configurations could be placed after {self.max_rounds} rounds "
                                    f"(dropped: {report.dropped}); allow more GPUs, GPU counts or smaller dtypes",
                                    field="n")
        out = pd.concat(parts, ignore_index=True).iloc[:n] if parts else _frame({c: [] for c in SAMPLE_COLUMNS})
        if report.dropped_total:
            log.info("%s: drew %d configurations, dropped %d that could not be placed (%s); kept %d",
                     type(self).__name__, report.drawn, report.dropped_total, report.dropped, n)
        return out.reset_index(drop=True)

    def _place(self, df: pd.DataFrame, gpus: _Gpus, dtypes: Sequence[str], u_gpu: NDArray[np.float64],
               u_count: NDArray[np.float64], gpu_weights: NDArray[np.float64], policy: str,
               ) -> tuple[IntArray, IntArray, NDArray[np.bool_]]:
        """Pick a GPU (among those that can hold the row) and a count per row."""
        feas = _feasible(df, gpus, dtypes, self.memory_fraction)
        any_count = feas.any(axis=2)  # (n, G)
        g_idx, ok = _pick(any_count * gpu_weights[None, :], u_gpu)
        counts_ok = feas[np.arange(len(df)), g_idx]  # (n, C)
        if policy == "minimum":
            c_idx = np.argmax(counts_ok, axis=1)
        else:
            c_idx, _ = _pick(counts_ok.astype(np.float64), u_count)
        return g_idx, gpus.counts[c_idx], ok


class RandomSampler(_Sampler):
    """The paper's baseline: every field uniform over its range.

    Models uniform over ``models`` + ``extra_models`` (catalog architectures, unperturbed),
    prompt tokens in ``1..max_prompt``, generated tokens in ``1..max_generated``, batch size in
    ``1..max_batch``, weight dtype, GPU and GPU count uniform over their lists. Draws that cannot
    run (context longer than the model's, no tensor-parallel split, unsupported dtype, weights +
    KV cache over ``memory_fraction`` of the GPUs' memory) are rejected, so the sample is uniform
    over the runnable configurations. ``trace`` is ``uniform``.
    """

    def __init__(self, models: Sequence[str] = PAPER_MODELS + EDGE_MODELS, extra_models: Sequence[str] = (),
                 gpus: Sequence[str] = PAPER_GPUS, gpu_counts: Sequence[int] = GPU_COUNTS,
                 dtypes: Sequence[str] = DTYPES, max_prompt: int = 4096, max_generated: int = 1024,
                 max_batch: int = 8, memory_fraction: float = 0.9, max_rounds: int = 50) -> None:
        self.models = _models(_as_list(models, "models") + _as_list(extra_models, "extra_models"))
        self.gpus = _gpus(_as_list(gpus, "gpus"), _as_list(gpu_counts, "gpu_counts"))
        self.dtypes = _check_dtypes(_as_list(dtypes, "dtypes"))
        for name, value in (("max_prompt", max_prompt), ("max_generated", max_generated), ("max_batch", max_batch)):
            if int(value) < 1:
                raise InvalidInputError(f"must be >= 1, got {value}", field=name)
        self.max_prompt, self.max_generated, self.max_batch = int(max_prompt), int(max_generated), int(max_batch)
        self.memory_fraction = _check_fraction(memory_fraction, "memory_fraction")
        self.max_rounds = int(max_rounds)
        self.last_report = SampleReport()

    def _expected_keep(self) -> float:
        return 0.3

    def _draw(self, rng: np.random.Generator, m: int) -> tuple[pd.DataFrame, dict[str, int]]:
        mod = rng.integers(0, len(self.models.archs), m)
        prompt = rng.integers(1, self.max_prompt + 1, m)
        gen = rng.integers(1, self.max_generated + 1, m)
        batch = rng.integers(1, self.max_batch + 1, m)
        dtype = rng.integers(0, len(self.dtypes), m)
        g_idx = rng.integers(0, len(self.gpus.gpus), m)
        c_idx = rng.integers(0, len(self.gpus.counts), m)
        cols: dict[str, Any] = {"model": self.models.ids[mod], "gpu": self.gpus.ids[g_idx], "num_gpus": self.gpus.counts[c_idx],
                                "batch_size": batch, "prompt_tokens": prompt, "generated_tokens": gen,
                                "dtype": np.array(self.dtypes, dtype=object)[dtype], "trace": "uniform"}
        for c in ARCH_COLUMNS:
            cols[c] = self.models.col(c)[mod]
        df = _frame(cols)
        context_ok = prompt + gen <= self.models.max_context[mod]
        feas = _feasible(df, self.gpus, self.dtypes, self.memory_fraction)
        placed = feas[np.arange(m), g_idx, c_idx]
        keep = context_ok & placed
        return df[keep], {"context": int((~context_ok).sum()), "placement": int((context_ok & ~placed).sum())}


class FocusedSampler(_Sampler):
    """The paper's focused sampling priors (Section 4.2): A x I x H.

    **A, architectures**: the catalog models ``models`` (default: the paper's 17) +
    ``edge_models`` + ``extra_models``. With probability ``perturb_probability`` a row uses a
    perturbed variant of its model instead: one of ``variants_per_model`` variants drawn once per
    :meth:`sample` call (0: a fresh variant per row). A variant changes each of layer count, head
    count, hidden size and MLP width with probability ``perturb_field_probability`` (at least one)
    by a relative factor in ``1 ± *_range``, keeping the architecture valid: the query-per-KV-head
    group size is kept (MHA stays MHA, multi-query stays multi-query, GQA keeps its ratio), even KV
    heads stay even, ``head_dim`` is kept and hidden = heads x head_dim for models built that way
    (their hidden size changes through the head count); models with an explicit head_dim and
    all MLP widths move in steps of ``size_multiple``. The weight dtype (the paper's bitwidth) is
    drawn per row from ``dtypes`` with ``dtype_weights`` (default :data:`DTYPE_WEIGHTS`).

    **I, inference configs**: (prompt, generated) pairs resampled jointly from the rows of the
    Azure ``traces`` (code, conv; chosen per row by ``trace_weights``), so both marginals and their
    dependence follow the traces; batch size 1, 2, ... with ``batch_size_probs`` and the rest of
    the probability spread uniformly over the tail up to ``max_batch_size``. The model is drawn
    among those whose context holds prompt + generated tokens (the pair is drawn first, so the
    token distributions are not distorted by short-context models).

    **H, hardware**: a GPU from ``gpus`` (``gpu_weights``) among those that can hold the row, and a
    GPU count from ``gpu_counts``: uniform from the minimum that holds weights + KV cache (within
    ``memory_fraction`` of memory) up to the largest count (``num_gpus_policy: uniform``), or the
    minimum (``minimum``); counts must split heads, KV heads and MLP width (tensor parallelism).
    Rows that fit no model context or no allowed GPU count are dropped and counted.
    """

    def __init__(self, models: Sequence[str] = PAPER_MODELS, edge_models: Sequence[str] = EDGE_MODELS,
                 extra_models: Sequence[str] = (), model_weights: Sequence[float] | None = None,
                 traces: Sequence[str] = ("code", "conv"), trace_weights: Sequence[float] | None = None,
                 trace_paths: Mapping[str, str] | None = None,
                 batch_size_probs: Sequence[float] = (0.65, 0.25), max_batch_size: int = 8,
                 dtypes: Sequence[str] = DTYPES, dtype_weights: Sequence[float] | None = None,
                 gpus: Sequence[str] = PAPER_GPUS, gpu_weights: Sequence[float] | None = None,
                 gpu_counts: Sequence[int] = GPU_COUNTS, num_gpus_policy: str = "uniform",
                 memory_fraction: float = 0.9, perturb_probability: float = 0.5,
                 perturb_field_probability: float = 0.5, variants_per_model: int = 16,
                 layers_range: float = 0.5, heads_range: float = 0.5, hidden_range: float = 0.5,
                 intermediate_range: float = 0.5, size_multiple: int = 64, max_rounds: int = 20) -> None:
        names = _as_list(models, "models") + _as_list(edge_models, "edge_models") + _as_list(extra_models, "extra_models")
        self.models = _models(names)
        self.model_weights = _weights(model_weights, len(self.models.archs), "model_weights")
        self.traces = [str(t) for t in _as_list(traces, "traces")]
        bad = [t for t in self.traces if t not in ("code", "conv")]
        if bad or not self.traces:
            raise InvalidInputError(f"traces must be among code, conv, got {self.traces}", field="traces")
        self.trace_weights = _weights(trace_weights, len(self.traces), "trace_weights")
        self.trace_paths = {str(k): str(v) for k, v in dict(trace_paths or {}).items() if v is not None}
        probs = np.asarray(_as_list(batch_size_probs, "batch_size_probs"), dtype=np.float64)
        self.max_batch_size = int(max_batch_size)
        if (not len(probs) or np.any(probs < 0) or probs.sum() > 1 + 1e-9 or len(probs) > self.max_batch_size
                or (probs.sum() < 1 - 1e-9 and len(probs) == self.max_batch_size)):
            raise InvalidInputError(f"batch_size_probs must be probabilities of sizes 1..k (k <= max_batch_size) summing to at "
                                    f"most 1, the rest going to k+1..max_batch_size; got {list(probs)}", field="batch_size_probs")
        self.batch_size_probs = probs
        self.dtypes = _check_dtypes(_as_list(dtypes, "dtypes"))
        if dtype_weights is None:
            dtype_weights = [DTYPE_WEIGHTS[d] for d in self.dtypes]
        self.dtype_weights = _weights(dtype_weights, len(self.dtypes), "dtype_weights")
        self.gpus = _gpus(_as_list(gpus, "gpus"), _as_list(gpu_counts, "gpu_counts"))
        self.gpu_weights = _weights(gpu_weights, len(self.gpus.gpus), "gpu_weights")
        if num_gpus_policy not in ("uniform", "minimum"):
            raise InvalidInputError(f"must be uniform or minimum, got {num_gpus_policy!r}", field="num_gpus_policy")
        self.num_gpus_policy = num_gpus_policy
        self.memory_fraction = _check_fraction(memory_fraction, "memory_fraction")
        self.perturb_probability = _check_fraction(perturb_probability, "perturb_probability", allow_zero=True)
        self.perturb_field_probability = _check_fraction(perturb_field_probability, "perturb_field_probability", allow_zero=True)
        self.variants_per_model = int(variants_per_model)
        if self.variants_per_model < 0:
            raise InvalidInputError(f"must be >= 0, got {variants_per_model}", field="variants_per_model")
        self.ranges = {}
        for name, value in (("layers_range", layers_range), ("heads_range", heads_range), ("hidden_range", hidden_range),
                            ("intermediate_range", intermediate_range)):
            if not 0 <= float(value) < 1:
                raise InvalidInputError(f"must be in [0, 1) (a relative change), got {value}", field=name)
            self.ranges[name] = float(value)
        self.size_multiple = int(size_multiple)
        if self.size_multiple < 1:
            raise InvalidInputError(f"must be >= 1, got {size_multiple}", field="size_multiple")
        self.max_rounds = int(max_rounds)
        self.last_report = SampleReport()
        self._pool: dict[str, IntArray] | None = None

    # -- priors ---------------------------------------------------------------------------------
    def trace_prior(self, which: str) -> IntArray:
        """(prompt, generated) pairs of one trace (read once per process)."""
        return trace_pairs(which, self.trace_paths.get(which))

    def perturb(self, rng: np.random.Generator, base_idx: IntArray) -> dict[str, IntArray]:
        """Perturbed architectures of the models ``base_idx`` (vectorised; see the class doc)."""
        m = len(base_idx)
        mdl = self.models
        base = {c: mdl.col(c)[base_idx] for c in ARCH_COLUMNS}
        r = self.ranges
        factors = {k: 1.0 + rng.uniform(-v, v, m) for k, v in r.items()}
        chosen = rng.random((4, m)) < self.perturb_field_probability
        forced = rng.integers(0, 4, m)
        chosen[forced, np.arange(m)] |= ~chosen.any(axis=0)  # at least one field changes
        do_layers, do_heads, do_hidden, do_inter = chosen
        explicit = mdl.explicit_head_dim[base_idx]
        do_heads = do_heads | (do_hidden & ~explicit)  # hidden = heads x head_dim: change it through the heads
        layers = np.where(do_layers, np.maximum(np.rint(base["num_layers"] * factors["layers_range"]), 1), base["num_layers"])
        heads, kv = base["num_heads"], base["num_kv_heads"]
        group = heads // kv
        mqa = kv == 1
        kv_step = np.gcd(kv, 2)
        head_step = np.gcd(heads, 2)
        hf = factors["heads_range"]
        new_kv = np.where(mqa, 1, _round_to(kv * hf, kv_step))
        new_heads = np.where(mqa, _round_to(heads * hf, head_step), new_kv * group)
        heads = np.where(do_heads, new_heads, heads)
        kv = np.where(do_heads, new_kv, kv)
        step = self.size_multiple
        hidden = np.where(explicit, np.where(do_hidden, _round_to(base["hidden_size"] * factors["hidden_range"], step),
                                             base["hidden_size"]), heads * base["head_dim"])
        inter = np.where(do_inter, _round_to(base["intermediate_size"] * factors["intermediate_range"], step),
                         base["intermediate_size"])
        return {"hidden_size": hidden.astype(np.int64), "intermediate_size": inter.astype(np.int64),
                "num_layers": layers.astype(np.int64), "num_heads": heads.astype(np.int64),
                "num_kv_heads": kv.astype(np.int64), "head_dim": base["head_dim"].astype(np.int64)}

    def _draw_batch(self, u: NDArray[np.float64], u_tail: NDArray[np.float64]) -> IntArray:
        k = len(self.batch_size_probs)
        cum = np.cumsum(self.batch_size_probs)
        head = np.searchsorted(cum, u, side="right") + 1  # 1..k, or k+1 in the tail
        tail_lo, tail_hi = k + 1, self.max_batch_size
        tail = tail_lo + np.floor(u_tail * max(tail_hi - tail_lo + 1, 1)).astype(np.int64)
        return np.where(head <= k, head, np.minimum(tail, tail_hi)).astype(np.int64)

    def _draw(self, rng: np.random.Generator, m: int) -> tuple[pd.DataFrame, dict[str, int]]:
        mdl = self.models
        # every random array is drawn in a fixed order whose sizes depend on m only
        t_idx = rng.choice(len(self.traces), size=m, p=self.trace_weights)
        u_row, u_batch, u_tail, u_model = rng.random(m), rng.random(m), rng.random(m), rng.random(m)
        dtype_idx = rng.choice(len(self.dtypes), size=m, p=self.dtype_weights)
        perturbed = rng.random(m) < self.perturb_probability
        variant_idx = rng.integers(0, max(self.variants_per_model, 1), m)
        u_gpu, u_count = rng.random(m), rng.random(m)
        # I: (prompt, generated) rows of the traces
        prompt = np.empty(m, dtype=np.int64)
        gen = np.empty(m, dtype=np.int64)
        for t, name in enumerate(self.traces):
            sel = t_idx == t
            pairs = self.trace_prior(name)
            rows = np.minimum((u_row[sel] * len(pairs)).astype(np.int64), len(pairs) - 1)
            prompt[sel], gen[sel] = pairs[rows, 0], pairs[rows, 1]
        batch = self._draw_batch(u_batch, u_tail)
        # A: a model whose context holds the request, then (maybe) one of its variants
        eligible = (prompt + gen)[:, None] <= mdl.max_context[None, :]
        base_idx, model_ok = _pick(eligible * self.model_weights[None, :], u_model)
        arch = {c: mdl.col(c)[base_idx] for c in ARCH_COLUMNS}
        if self.perturb_probability > 0:
            if self.variants_per_model == 0:
                variant = self.perturb(rng, base_idx)
            else:
                assert self._pool is not None
                at = base_idx * self.variants_per_model + variant_idx
                variant = {c: self._pool[c][at] for c in ARCH_COLUMNS}
            for c in ARCH_COLUMNS:
                arch[c] = np.where(perturbed, variant[c], arch[c])
        cols: dict[str, Any] = {"model": mdl.ids[base_idx], "gpu": self.gpus.ids[0], "num_gpus": 1, "batch_size": batch,
                                "prompt_tokens": prompt, "generated_tokens": gen,
                                "dtype": np.array(self.dtypes, dtype=object)[dtype_idx],
                                "trace": np.array(self.traces, dtype=object)[t_idx], **arch}
        df = _frame(cols)[model_ok]
        # H: a GPU that can hold the row, and a GPU count
        g_idx, counts, placed = self._place(df, self.gpus, self.dtypes, u_gpu[model_ok], u_count[model_ok],
                                            self.gpu_weights, self.num_gpus_policy)
        df = df.assign(gpu=self.gpus.ids[g_idx].astype(str), num_gpus=counts.astype(np.int64))
        return df[placed], {"context": int((~model_ok).sum()), "placement": int((~placed).sum())}

    def _variant_pool(self, seed: int) -> dict[str, IntArray]:
        """``variants_per_model`` perturbed variants of every model, from a stream of ``seed``
        separate from the row draws."""
        k = self.variants_per_model
        return self.perturb(np.random.default_rng([int(seed), 1]), np.repeat(np.arange(len(self.models.archs)), k))

    def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
        """``n`` configurations from the priors (see the class doc), the same for the same seed."""
        if self.perturb_probability > 0 and self.variants_per_model > 0:
            self._pool = self._variant_pool(seed)
        return super().sample(n, seed)

    def architectures(self, seed: int = 0) -> pd.DataFrame:
        """The architecture set A for ``seed``: the base models and their perturbed variants."""
        rows = []
        for a in self.models.archs:
            rows.append({"model": a.id, "variant": 0, **{c: getattr(a, c) for c in ARCH_COLUMNS}})
        if self.perturb_probability > 0 and self.variants_per_model > 0:
            pool = self._variant_pool(seed)
            for j in range(len(pool["num_layers"])):
                i = j // self.variants_per_model
                rows.append({"model": self.models.archs[i].id, "variant": j % self.variants_per_model + 1,
                             **{c: int(pool[c][j]) for c in ARCH_COLUMNS}})
        return pd.DataFrame(rows)


def _check_fraction(value: float, name: str, allow_zero: bool = False) -> float:
    v = float(value)
    if not (0 <= v <= 1) or (v == 0 and not allow_zero):
        raise InvalidInputError(f"must be in {'[0' if allow_zero else '(0'}, 1], got {value}", field=name)
    return v


# -- Algorithm 1 -------------------------------------------------------------------------------
def fine_grained_sample(points: pd.DataFrame, b: int = 100, ranges: Mapping[str, int] | None = None, seed: int = 0, *,
                        max_gpus: int = 4, memory_fraction: float = 0.9) -> pd.DataFrame:
    """Algorithm 1's ``FineGraindSampling``: ``b`` configurations within ±C of each point.

    ``ranges`` maps a field to its C (merged over :data:`DEFAULT_RANGES`: prompt 10, generated 1,
    layers 1, others 0). Each field moves by an integer drawn uniformly in ``[-C, C]``, then the
    row is clipped to valid values: counts >= 1, GPU count <= ``max_gpus``, prompt + generated
    within the model's context (generated first, prompt then); a head change keeps the
    query-per-KV-head group (multi-query keeps one KV head) and carries the hidden size with it
    when hidden = heads x head_dim. The GPU kind, dtype and trace are the point's. Rows that can no
    longer be placed on their GPUs (tensor-parallel split, weights + KV cache over
    ``memory_fraction`` of memory) are dropped; ``df.attrs["dropped"]`` counts them.
    """
    pts = check_samples(points)[list(SAMPLE_COLUMNS)]
    if isinstance(b, bool) or int(b) != b or b < 1:
        raise InvalidInputError(f"must be a positive integer, got {b!r}", field="b")
    r = dict(DEFAULT_RANGES)
    for key, value in dict(ranges or {}).items():
        if key not in DEFAULT_RANGES:
            raise InvalidInputError(f"cannot perturb {key!r}; fields: {', '.join(DEFAULT_RANGES)}", field="ranges")
        if int(value) != value or value < 0:
            raise InvalidInputError(f"C of {key} must be a non-negative integer, got {value!r}", field="ranges")
        r[key] = int(value)
    memory_fraction = _check_fraction(memory_fraction, "memory_fraction")
    rng = np.random.default_rng(seed)
    n = len(pts) * int(b)
    base = pts.iloc[np.repeat(np.arange(len(pts)), int(b))].reset_index(drop=True)
    delta = {k: rng.integers(-c, c + 1, n) for k, c in r.items()}  # fixed order: same seed, same rows
    v = {c: base[c].to_numpy(dtype=np.int64) for c in INT_COLUMNS}
    context = base["model"].map({m: get_model(m).max_context for m in base["model"].unique()}).to_numpy(dtype=np.int64)
    gen = np.clip(v["generated_tokens"] + delta["generated_tokens"], 1, np.maximum(context - 1, 1))
    prompt = np.clip(v["prompt_tokens"] + delta["prompt_tokens"], 1, np.maximum(context - gen, 1))
    heads, kv = v["num_heads"], v["num_kv_heads"]
    group = heads // kv
    moved = heads + delta["num_heads"]
    new_heads = np.where(kv == 1, np.maximum(moved, 1), _round_to(moved.astype(np.float64), group))
    new_kv = np.where(kv == 1, 1, new_heads // group)
    implicit = v["hidden_size"] == heads * v["head_dim"]
    hidden = np.where(implicit, new_heads * v["head_dim"], v["hidden_size"]) + delta["hidden_size"]
    out = {c: base[c].to_numpy() for c in ("model", "gpu", "dtype", "trace", "head_dim")}
    out.update(prompt_tokens=prompt, generated_tokens=gen,
               batch_size=np.maximum(v["batch_size"] + delta["batch_size"], 1),
               num_layers=np.maximum(v["num_layers"] + delta["num_layers"], 1),
               num_gpus=np.clip(v["num_gpus"] + delta["num_gpus"], 1, max(int(max_gpus), 1)),
               hidden_size=np.maximum(hidden, 1), intermediate_size=np.maximum(v["intermediate_size"] + delta["intermediate_size"], 1),
               num_heads=new_heads, num_kv_heads=new_kv)
    df = _frame(out)
    ok = _placeable_as_is(df, memory_fraction)
    dropped = int((~ok).sum())
    if dropped:
        log.info("fine_grained_sample: dropped %d of %d configurations that no longer fit their GPUs", dropped, n)
    result = df[ok].reset_index(drop=True)
    result.attrs["dropped"] = dropped
    return result


def _placeable_as_is(df: pd.DataFrame, memory_fraction: float) -> NDArray[np.bool_]:
    """Can each row run on its own ``gpu`` x ``num_gpus``?"""
    if not len(df):
        return np.zeros(0, dtype=bool)
    gpu_ids = list(pd.unique(df["gpu"]))
    counts = np.unique(df["num_gpus"].to_numpy(dtype=np.int64))
    gpus = _gpus(gpu_ids, counts.tolist())
    feas = _feasible(df, gpus, DTYPES, memory_fraction)
    g = pd.Index(list(gpus.ids)).get_indexer(df["gpu"].map(lambda x: get_gpu(x).id))
    c = np.searchsorted(gpus.counts, df["num_gpus"].to_numpy(dtype=np.int64))
    return feas[np.arange(len(df)), g, c]


@dataclass
class LoopResult:
    """Outcome of :func:`focused_loop`.

    ``train`` / ``test`` are sample frames with the measured ``target`` column (``test`` is the
    growing test pool TD); ``mape_history[0]`` is the MAPE (percent) on TD after the first fit,
    then one value per round; ``added`` counts the configurations measured in each round.
    """

    train: pd.DataFrame
    test: pd.DataFrame
    mape_history: list[float]
    rounds: int
    converged: bool
    model: Any
    added: list[int] = field(default_factory=list)
    unmeasured: int = 0

    @property
    def final_mape(self) -> float:
        return self.mape_history[-1]

    def metrics(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "converged": self.converged, "mape_history": [round(m, 4) for m in self.mape_history],
                "final_mape": round(self.final_mape, 4), "train_rows": len(self.train), "test_rows": len(self.test),
                "added_per_round": list(self.added), "unmeasured": self.unmeasured}


def _measure(measure: Callable[[pd.DataFrame], Any], X: pd.DataFrame) -> tuple[pd.DataFrame, NDArray[np.float64], int]:
    """Measure ``X``; rows whose value is missing, not finite or not positive are left out."""
    y = np.asarray(measure(X), dtype=np.float64).ravel()
    if y.shape != (len(X),):
        raise InvalidInputError(f"measure returned {y.shape[0]} values for {len(X)} configurations", field="measure")
    ok = np.isfinite(y) & (y > 0)
    bad = int((~ok).sum())
    if bad:
        log.warning("focused_loop: %d of %d configurations have no usable measurement and are left out", bad, len(X))
    return X[ok].reset_index(drop=True), y[ok], bad


def _ape(pred: Any, y: NDArray[np.float64]) -> NDArray[np.float64]:
    p = np.asarray(pred, dtype=np.float64).ravel()
    if p.shape != y.shape:
        raise InvalidInputError(f"predict returned {p.shape[0]} values for {y.shape[0]} configurations", field="predict")
    return np.abs(p - y) / np.abs(y) * 100.0


def focused_loop(initial: pd.DataFrame, fit: Callable[[pd.DataFrame, np.ndarray], Any],
                 predict: Callable[[Any, pd.DataFrame], np.ndarray], measure: Callable[[pd.DataFrame], np.ndarray], *,
                 test_fraction: float = 0.2, top_k: int = 10, b: int = 100, ranges: Mapping[str, int] | None = None,
                 error_threshold: float = 5.0, max_rounds: int = 5, seed: int = 0, memory_fraction: float = 0.9,
                 ) -> LoopResult:
    """Algorithm 1, focused energy data sampling, around any regressor and any measurement.

    1. ``measure`` the ``initial`` configurations (e.g. a :class:`FocusedSampler` draw); split
       them at random into train and the test pool TD (``test_fraction``).
    2. ``model = fit(train_frame, y)``; per-point APE of ``predict(model, TD_frame)`` on TD.
    3. While the MAPE on TD (percent) exceeds ``error_threshold`` and fewer than ``max_rounds``
       rounds ran: take the ``top_k`` TD points with the largest APE (each point is expanded at
       most once), :func:`fine_grained_sample` ``b`` configurations within ``ranges`` (±C) of
       each, measure them, add ``test_fraction`` of them to TD and the rest to train, refit and
       re-test on the whole TD.

    ``fit``/``predict`` see frames of :data:`SAMPLE_COLUMNS`; ``measure`` returns one positive
    value per row (NaN for a failed measurement, which is left out and counted).
    """
    if not 0 < test_fraction < 1:
        raise InvalidInputError(f"must be in (0, 1), got {test_fraction}", field="test_fraction")
    if int(top_k) < 1 or int(max_rounds) < 0:
        raise InvalidInputError("top_k must be >= 1 and max_rounds >= 0", field="top_k")
    rng = np.random.default_rng(seed)
    X, y, unmeasured = _measure(measure, check_samples(initial)[list(SAMPLE_COLUMNS)])
    if len(X) < 2:
        raise InvalidInputError(f"need at least 2 measured initial configurations, got {len(X)}", field="initial")
    perm = rng.permutation(len(X))
    n_test = min(max(1, int(round(test_fraction * len(X)))), len(X) - 1)
    test_x, test_y = X.iloc[perm[:n_test]].reset_index(drop=True), y[perm[:n_test]]
    train_x, train_y = X.iloc[perm[n_test:]].reset_index(drop=True), y[perm[n_test:]]
    model = fit(train_x, train_y)
    ape = _ape(predict(model, test_x), test_y)
    history = [float(ape.mean())]
    expanded = np.zeros(len(test_x), dtype=bool)
    added: list[int] = []
    rounds = 0
    log.info("focused_loop: %d train / %d test, MAPE %.2f%%", len(train_x), len(test_x), history[-1])
    while history[-1] > error_threshold and rounds < int(max_rounds):
        order = np.argsort(-ape, kind="stable")
        worst = order[~expanded[order]][: int(top_k)]
        if not len(worst):
            break
        rounds += 1
        expanded[worst] = True
        new = fine_grained_sample(test_x.iloc[worst], b, ranges, seed=int(rng.integers(2**31)), memory_fraction=memory_fraction)
        new_x, new_y, bad = _measure(measure, new) if len(new) else (new, np.zeros(0), 0)
        unmeasured += bad
        p = rng.permutation(len(new_x))
        k = int(round(test_fraction * len(new_x)))
        test_x = pd.concat([test_x, new_x.iloc[p[:k]]], ignore_index=True)
        test_y = np.concatenate([test_y, new_y[p[:k]]])
        train_x = pd.concat([train_x, new_x.iloc[p[k:]]], ignore_index=True)
        train_y = np.concatenate([train_y, new_y[p[k:]]])
        expanded = np.concatenate([expanded, np.zeros(k, dtype=bool)])
        added.append(len(new_x))
        model = fit(train_x, train_y)
        ape = _ape(predict(model, test_x), test_y)
        history.append(float(ape.mean()))
        log.info("focused_loop round %d: +%d configurations, %d train / %d test, MAPE %.2f%%", rounds, len(new_x),
                 len(train_x), len(test_x), history[-1])
    return LoopResult(train=train_x.assign(**{TARGET: train_y}), test=test_x.assign(**{TARGET: test_y}),
                      mape_history=history, rounds=rounds, converged=history[-1] <= error_threshold, model=model,
                      added=added, unmeasured=unmeasured)


# -- measurements and a demo regressor ---------------------------------------------------------
def _analysis(df: pd.DataFrame) -> Any:
    from llmco2.analytic.layer import LayerBatch, analyze_layers
    from llmco2.analytic.model import model_totals

    batch = LayerBatch.from_items(rows_to_items(df, validate=False), validate=False)
    return batch, model_totals(analyze_layers(batch))


def analytic_measure(df: pd.DataFrame, power_w: float = 300.0) -> NDArray[np.float64]:
    """A **synthetic** energy (J) for tests and demos only — not a measurement and not a model of
    real power: the analytic roofline time of the request (prefill + decode, the whole batch)
    times a constant ``power_w`` per GPU times the GPU count. Deterministic. Use an NVML harness
    (or :func:`lookup_measure` on measured data) for real targets."""
    if not len(df):
        return np.zeros(0)
    _, totals = _analysis(df)
    time_s = totals.totals["prefill"]["time_s"] + totals.totals["decode"]["time_s"]
    return np.asarray(time_s * float(power_w) * df["num_gpus"].to_numpy(dtype=np.float64), dtype=np.float64)


def lookup_measure(table: pd.DataFrame, target: str = "energy_j") -> Callable[[pd.DataFrame], NDArray[np.float64]]:
    """A ``measure`` that looks configurations up in an already measured ``table`` (sample
    columns + ``target``; repeated configurations are averaged); NaN where a row is not there."""
    keys = [c for c in SAMPLE_COLUMNS if c != "trace"]
    if target not in table.columns:
        raise InvalidInputError(f"the table has no column {target!r}", field="target")
    known = check_samples(table.assign(trace=table["trace"] if "trace" in table.columns else "uniform"))
    means = known.groupby(keys, sort=False)[target].mean().rename("_value").reset_index()

    def measure(df: pd.DataFrame) -> NDArray[np.float64]:
        q = check_samples(df)[keys]
        return q.merge(means, on=keys, how="left")["_value"].to_numpy(dtype=np.float64)

    return measure


#: Columns of :func:`analytic_features`.
FEATURE_NAMES = ("log_prefill_ops", "log_decode_ops", "log_prefill_mem_bytes", "log_decode_mem_bytes", "log_net_bytes",
                 "log_prompt_tokens", "log_generated_tokens", "batch_size", "num_gpus", "weight_bits", "log_params",
                 "log_peak_ops_per_s", "log_mem_bw_bytes_per_s")


def analytic_features(df: pd.DataFrame) -> NDArray[np.float64]:
    """A few analytic features per row (:data:`FEATURE_NAMES`) for a quick tabular regressor:
    operation and memory-traffic counts of both phases from the analytic engine, the request and
    the GPU's peaks (no roofline time)."""
    batch, totals = _analysis(df)
    t = totals.totals
    cols = [np.log1p(t["prefill"]["ops"]), np.log1p(t["decode"]["ops"]), np.log1p(t["prefill"]["mem_bytes"]),
            np.log1p(t["decode"]["mem_bytes"]), np.log1p(t["prefill"]["net_bytes"] + t["decode"]["net_bytes"]),
            np.log(batch.prompt), np.log(batch.generated), batch.batch, batch.num_gpus, batch.w_bytes * 8,
            np.log(batch.params), np.log(batch.peak_ops_per_s), np.log(batch.mem_bw_bytes_per_s)]
    return np.column_stack(cols).astype(np.float64)


def sklearn_callables(estimator: Any, features: Callable[[pd.DataFrame], np.ndarray] = analytic_features,
                      log_target: bool = True) -> tuple[Callable[[pd.DataFrame, np.ndarray], Any], Callable[[Any, pd.DataFrame], np.ndarray]]:
    """``(fit, predict)`` for :func:`focused_loop` around a scikit-learn regressor (cloned per
    fit), on ``features`` of the frame, regressing ``log(target)`` when ``log_target``."""
    from sklearn.base import clone

    def fit(X: pd.DataFrame, y: np.ndarray) -> Any:
        est = clone(estimator)
        est.fit(features(X), np.log(y) if log_target else y)
        return est

    def predict(est: Any, X: pd.DataFrame) -> np.ndarray:
        p = np.asarray(est.predict(features(X)), dtype=np.float64)
        return np.exp(p) if log_target else p

    return fit, predict
