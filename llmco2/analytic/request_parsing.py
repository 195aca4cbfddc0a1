"""Parse request rows as columns: numbers converted by Arrow, model / GPU / dtype / engine names
resolved once per distinct value (:class:`Resolver`), validation run once per distinct (model,
GPU, kind, TP, EP, GPUs) combination (:meth:`RequestTable.validate`); and, where a job leaves bad rows
out, find them (:func:`good_rows`). Errors name the line (the header is line 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from llmco2.analytic.arrow_arrays import empty_strings, numpy_values, string_scalar
from llmco2.analytic.table import RequestTable, distinct_rows
from llmco2.errors import InvalidInputError
from llmco2.specs import DEFAULT_ENGINE, GPU, ModelArch, Request, get_gpu, get_model
from llmco2.specs.limits import REQUEST_LIMITS, arch_limit, check_int

REQUIRED_COLUMNS = ("model", "gpu", "batch_size", "prompt_tokens", "generated_tokens")
OPTIONAL_COLUMNS = ("num_gpus", "tensor_parallel", "expert_parallel", "dtype", "flash_attention", "engine", "quantisation")
#: Columns of a row's request kind (its :meth:`Resolver.kind`), in key order.
KIND_COLUMNS = ("dtype", "flash_attention", "engine", "quantisation")
#: Architecture columns that override the catalog model (the sampler writes perturbed variants).
ARCH_COLUMNS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f"}


def _bool(text: str, field: str) -> bool:
    key = text.strip().lower()
    if key in _TRUE:
        return True
    if key in _FALSE:
        return False
    raise InvalidInputError(f"must be true or false, got {text!r}", field=field)


def _integers(values: pa.Array, name: str, lines: NDArray[np.int64], default: int | None = None,
              minimum: int = 1) -> NDArray[np.int64]:
    """Integral column of strings (``default`` for empty cells, when given) from ``minimum`` to the
    column's limit (:data:`~llmco2.specs.limits.REQUEST_LIMITS`); the first bad cell raises."""
    maximum = REQUEST_LIMITS[name]
    text = pc.utf8_trim_whitespace(values)
    if default is not None:
        text = pc.if_else(pc.equal(text, string_scalar("")), string_scalar(str(default)), text)
    try:
        out = numpy_values(pc.cast(text, pa.float64()))
        ok = np.isfinite(out) & (out == np.floor(out)) & (out >= minimum) & (out <= maximum)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        cells = text.to_pylist()
        out, ok = np.zeros(len(cells)), np.zeros(len(cells), dtype=bool)
        for i, v in enumerate(cells):
            try:
                out[i] = float(v)
                ok[i] = bool(np.isfinite(out[i]) and out[i] == int(out[i]) and minimum <= out[i] <= maximum)
            except (ValueError, OverflowError, TypeError):
                pass
    if not ok.all():
        i = int(np.argmin(ok))
        raise InvalidInputError(f"line {lines[i]}: {name}: must be an integer from {minimum:,} to {maximum:,}, "
                                f"got {text[i].as_py()!r}")
    return out.astype(np.int64)


def _encoded(values: pa.Array) -> tuple[NDArray[np.int64], list[str]]:
    """``(per-row code, distinct values)`` of a string column (codes in order of first appearance)."""
    enc = values.dictionary_encode()
    return numpy_values(enc.indices).astype(np.int64), enc.dictionary.to_pylist()


def _with_arch_columns(base: ModelArch, changes_text: dict[str, str]) -> ModelArch:
    """``base`` with the architecture columns of a row applied."""
    changes: dict[str, int] = {}
    for col, text in changes_text.items():
        if not text:
            continue
        value = check_int(text, col, 1, arch_limit(col))
        if value != getattr(base, col):
            changes[col] = value
    if not changes:
        return base
    if ("hidden_size" in changes or "num_heads" in changes) and "head_dim" not in changes \
            and base.head_dim * base.num_heads == base.hidden_size:
        hidden = changes.get("hidden_size", base.hidden_size)
        heads = changes.get("num_heads", base.num_heads)
        if hidden % heads:
            raise InvalidInputError(f"num_heads {heads} does not divide hidden_size {hidden}", field="num_heads")
        changes["head_dim"] = hidden // heads
    return base.with_overrides(**changes)


@dataclass(frozen=True)
class RowDefaults:
    """What a request row takes where the file has no column of its own (precisions, attention
    kernel, engine), and whether rows longer than the model's context are predicted anyway."""

    dtype: str | None = "fp16"
    act_dtype: str | None = None
    kv_dtype: str | None = None
    flash_attention: bool = True
    causal: bool = False
    engine: str = DEFAULT_ENGINE
    ignore_context: bool = False
    quantisation: str | None = None


class Resolver:
    """Catalog look-ups cached across chunks."""

    def __init__(self, defaults: RowDefaults | None = None) -> None:
        self.defaults = defaults or RowDefaults()
        self.models: dict[str, ModelArch] = {}
        self.variants: dict[tuple, ModelArch] = {}
        self.gpus: dict[str, GPU] = {}
        self.kinds: dict[tuple, Request] = {}

    def model(self, key: tuple[str, ...], arch_cols: tuple[str, ...]) -> ModelArch:
        if key not in self.variants:
            name = key[0].strip()
            base = self.models.get(name) or self.models.setdefault(name, get_model(name))
            self.variants[key] = _with_arch_columns(base, dict(zip(arch_cols, (v.strip() for v in key[1:]), strict=True)))
        return self.variants[key]

    def gpu(self, name: str) -> GPU:
        if name not in self.gpus:
            self.gpus[name] = get_gpu(name.strip())
        return self.gpus[name]

    def kind(self, key: tuple[str, str, str, str]) -> Request:
        """A request of the row's dtype, attention kernel, engine and quantisation (:data:`KIND_COLUMNS`;
        its counts are placeholders)."""
        if key not in self.kinds:
            d = self.defaults
            dtype, flash, engine, quant = (v.strip() for v in key)
            self.kinds[key] = Request(
                weight_dtype=dtype or d.dtype, activation_dtype=d.act_dtype, kv_dtype=d.kv_dtype,
                flash_attention=_bool(flash, "flash_attention") if flash else d.flash_attention,
                causal=d.causal, engine=engine or d.engine or DEFAULT_ENGINE, quantisation=quant or d.quantisation)
        return self.kinds[key]


def _resolve(values: list[Any], fn: Any, first: NDArray[np.int64], lines: NDArray[np.int64]) -> list[Any]:
    out = []
    for v, row in zip(values, first, strict=True):
        try:
            out.append(fn(v))
        except InvalidInputError as exc:
            raise InvalidInputError(f"line {lines[int(row)]}: {exc}") from None
    return out


def _groups(columns: list[tuple[NDArray[np.int64], list[str]]]) -> tuple[NDArray[np.int64], list[tuple[str, ...]], NDArray[np.int64]]:
    """Distinct combinations of encoded columns: ``(per-row group, the values of each group, first row of each)``."""
    first, group = distinct_rows(*(codes for codes, _ in columns))
    keys = [tuple(values[int(codes[i])] for codes, values in columns) for i in first]
    return group, keys, first


def parse_chunk(header: list[str], batch: pa.RecordBatch, lines: NDArray[np.int64], resolver: Resolver,
                check_context: bool = True) -> RequestTable:
    """The requests of ``batch`` (string cells; ``lines``: their file lines), validated. Names are
    resolved once per distinct value; nothing runs once per row in Python."""
    n = batch.num_rows
    cols = dict(zip(header, batch.columns, strict=True))
    empty = empty_strings(n) if any(c not in cols for c in (*KIND_COLUMNS, "num_gpus")) else None
    arch_cols = tuple(c for c in ARCH_COLUMNS if c in cols)
    arch, model_keys, model_first = _groups([_encoded(cols["model"]), *(_encoded(cols[c]) for c in arch_cols)])
    archs = _resolve(model_keys, lambda k: resolver.model(k, arch_cols), model_first, lines)
    gpu, gpu_keys, gpu_first = _groups([_encoded(cols["gpu"])])
    gpus = _resolve([k[0] for k in gpu_keys], resolver.gpu, gpu_first, lines)
    kind, kind_keys, kind_first = _groups([_encoded(cols.get(c, empty)) for c in KIND_COLUMNS])
    kinds = _resolve(kind_keys, resolver.kind, kind_first, lines)
    batch_size = _integers(cols["batch_size"], "batch_size", lines)
    prompt = _integers(cols["prompt_tokens"], "prompt_tokens", lines)
    generated = _integers(cols["generated_tokens"], "generated_tokens", lines)
    num_gpus = _integers(cols.get("num_gpus", empty), "num_gpus", lines, default=1)
    tp = num_gpus.copy()
    if "tensor_parallel" in cols:
        tp_text = pc.utf8_trim_whitespace(cols["tensor_parallel"])
        mask = pc.not_equal(tp_text, string_scalar(""))
        given = numpy_values(mask)
        if given.any():
            tp[given] = _integers(tp_text.filter(mask), "tensor_parallel", lines[given])
        bad = num_gpus % tp != 0
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidInputError(f"line {lines[i]}: tensor_parallel: tensor_parallel {tp[i]} must divide "
                                    f"num_gpus {num_gpus[i]}")
    ep = _expert_parallel(cols, num_gpus, tp, lines)
    table = RequestTable(archs, gpus, kinds, arch, gpu, kind, batch_size, prompt, generated, num_gpus, tp, ep)
    table.validate(check_context=check_context, line=lines)
    return table


def _expert_parallel(cols: dict[str, pa.Array], num_gpus: NDArray[np.int64], tp: NDArray[np.int64],
                     lines: NDArray[np.int64]) -> NDArray[np.int64]:
    """The ``expert_parallel`` column (1 where absent or empty), checked as :class:`~llmco2.specs.Request`
    checks it: a multiple of ``tensor_parallel`` (above 1) that divides ``num_gpus``."""
    ep = np.ones_like(num_gpus)
    if "expert_parallel" not in cols:
        return ep
    text = pc.utf8_trim_whitespace(cols["expert_parallel"])
    mask = pc.not_equal(text, string_scalar(""))
    given = numpy_values(mask)
    if given.any():
        ep[given] = _integers(text.filter(mask), "expert_parallel", lines[given])
    for bad, why in (((ep > 1) & (ep % tp != 0), "be a multiple of tensor_parallel {tp}"), (num_gpus % ep != 0, "divide num_gpus {n}")):
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidInputError(f"line {lines[i]}: expert_parallel: expert_parallel {ep[i]} must "
                                    + why.format(tp=tp[i], n=num_gpus[i]))
    return ep


@dataclass(frozen=True)
class Reject:
    """A row of a request file left out (``on_error="skip"``): its line (the header is line 1) and why."""

    line: int
    reason: str


def good_rows(header: list[str], batch: pa.RecordBatch, lines: NDArray[np.int64], resolver: Resolver, check_context: bool,
              rejects: list[Reject]) -> NDArray[np.int64]:
    """Indices of the rows of ``batch`` that pass their checks; each other row is appended to
    ``rejects`` with the reason its own check gave. Halves of the batch are checked in turn, so a
    few bad rows among thousands cost a few dozen checks, not one per row."""
    def check(lo: int, hi: int) -> list[int]:
        part = batch.slice(lo, hi - lo)
        try:
            parse_chunk(header, part, lines[lo:hi], resolver, check_context)
            return list(range(lo, hi))
        except InvalidInputError as exc:
            if hi - lo == 1:
                text = str(exc)
                prefix = f"line {int(lines[lo])}: "
                rejects.append(Reject(int(lines[lo]), text[len(prefix):] if text.startswith(prefix) else text))
                return []
        mid = (lo + hi) // 2
        return check(lo, mid) + check(mid, hi)

    return np.asarray(check(0, batch.num_rows), dtype=np.int64)
