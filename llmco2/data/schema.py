"""The canonical energy table: one row per measured (configuration, phase).

A typed schema (:data:`COLUMNS`) with units, validated on load and on write. A row that breaks
the schema is reported with its source file and line; what happens to it is an explicit policy
(``on_error``): ``"raise"`` (default: the first problem becomes one clear error), ``"drop"`` or
``"keep"`` — and the count is always reported, never silent.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_input_file

log = logging.getLogger(__name__)

PHASES = ("prefill", "decode", "total")
LEVELS = ("request", "batch", "steady_state")
ON_ERROR = ("raise", "drop", "keep")
WINDOW_METHODS = ("single", "amortised", "lengthened")
QUANTISATIONS = ("none", "awq", "gptq", "hqq", "bnb-int8", "bnb-nf4", "bnb-fp4", "fp8", "fp8-marlin", "mxfp4", "nvfp4", "gguf", "other",
                 "gguf-q3-k-m", "gguf-q3-k-l", "gguf-q4-0", "gguf-q4-1", "gguf-q4-k-s", "gguf-q4-k-m",
                 "gguf-q5-0", "gguf-q5-1", "gguf-q5-k-s", "gguf-q5-k-m", "gguf-q6-k", "gguf-q8-0")


@dataclass(frozen=True)
class Column:
    """One column: name, type (``str``, ``int``, ``float``, ``bool``), unit and constraints."""

    name: str
    dtype: str
    description: str
    unit: str = ""
    required: bool = False
    minimum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] | None = None


COLUMNS: tuple[Column, ...] = (
    Column("source", "str", "dataset the row comes from (co2meter, argonne, mlenergy_v2, ..., llmco2)", required=True),
    Column("source_file", "str", "file name inside the source"),
    Column("source_row", "int", "line of the source file the row was read from (1 = first line)", required=True, minimum=1),
    Column("device", "str", "GPU catalog id", required=True),
    Column("num_devices", "int", "devices serving the request", "count", required=True, minimum=1),
    Column("tensor_parallel", "int", "tensor-parallel degree", "count", minimum=1),
    Column("pipeline_parallel", "int", "pipeline-parallel degree", "count", minimum=1),
    Column("data_parallel", "int", "data-parallel replicas (engine instances, each with the whole model) among the row's "
           "devices; 1 = one replica", "count", minimum=1),
    Column("expert_parallel", "int", "expert-parallel degree: devices the experts of one MoE layer are spread over "
           "(1 = none; as the source states it)", "count", minimum=1),
    Column("engine", "str", "serving engine, a catalog id of llmco2.specs.engines (hf, hf-static, vllm, vllm-eager, "
           "tensorrt-llm, deepspeed, edge, unknown, ...)"),
    Column("model", "str", "model catalog id", required=True),
    Column("hidden_size", "int", "hidden size", "elements", minimum=1),
    Column("intermediate_size", "int", "MLP (expert) width", "elements", minimum=1),
    Column("num_layers", "int", "transformer layers", "count", minimum=1),
    Column("num_heads", "int", "attention heads", "count", minimum=1),
    Column("num_kv_heads", "int", "key/value heads", "count", minimum=1),
    Column("vocab_size", "int", "vocabulary size", "tokens", minimum=1),
    Column("activation", "str", "MLP activation"),
    Column("mlp_gated", "bool", "gated MLP (SwiGLU/GeGLU)"),
    Column("num_experts", "int", "experts per MoE layer (1 = dense)", "count", minimum=1),
    Column("experts_per_token", "int", "active experts per token", "count", minimum=1),
    Column("weight_bits", "int", "bits per weight", "bits", minimum=1),
    Column("quantisation", "str", "weight quantisation method, i.e. the kernel path the weights take: none (weights in the "
           "compute dtype), awq / gptq / hqq (weight-only low-bit kernels such as Marlin that dequantise in registers "
           "and multiply in 16-bit, faster than fp16 when memory-bound), bnb-int8 / bnb-nf4 / bnb-fp4 (bitsandbytes: "
           "LLM.int8 with outlier decomposition, or 4-bit tiles dequantised to 16-bit before each matmul; slower than "
           "fp16), fp8 / mxfp4 / nvfp4 (low-precision tensor-core formats), gguf, other; null where the source does not "
           "say", choices=QUANTISATIONS),
    Column("kv_bits", "int", "bits per KV-cache element", "bits", minimum=1),
    Column("flash_attention", "bool", "fused attention kernel"),
    Column("kv_cache", "bool", "generation reuses a KV cache (false: every step recomputes the whole prefix)"),
    Column("batch_size", "float", "sequences per batch (an average at steady state)", "sequences", required=True,
           minimum=0, exclusive_minimum=True),
    Column("prompt_tokens", "float", "prompt tokens per sequence (mean where the source gives one)", "tokens", minimum=0),
    Column("generated_tokens", "float", "generated tokens per sequence, the first from prefill", "tokens", minimum=0),
    Column("phase", "str", "prefill, decode or total (both)", required=True, choices=PHASES),
    Column("level", "str", "request (one request), batch (one batch run), steady_state (per request in a loaded server)",
           required=True, choices=LEVELS),
    Column("energy_j", "float", "GPU energy of the phase for the whole batch (per request at steady state)", "J",
           minimum=0, exclusive_minimum=True),
    Column("latency_s", "float", "wall time of the phase", "s", minimum=0),
    Column("repeats", "int", "measurements averaged into the row", "count", minimum=1),
    Column("energy_std_j", "float", "standard deviation over the repeats", "J", minimum=0),
    Column("measurement", "str", "how energy was measured (nvml_energy, nvml_power, jtop, codecarbon, power_x_latency, ...)"),
    Column("trace", "str", "workload the configuration was drawn from (code, conv, uniform)"),
    Column("flag", "str", "known data problem, ';'-separated (e.g. power_includes_idle_gpus)"),
    # How a row was measured (llmco2 measure fills these; null for sources that do not say).
    Column("attention", "str", "attention implementation (sdpa, eager, flash_attention_2, ...)"),
    Column("sm_clock_mhz", "float", "mean streaming-multiprocessor clock at the ends of the measured windows", "MHz", minimum=0),
    Column("mem_clock_mhz", "float", "mean memory clock at the ends of the measured windows", "MHz", minimum=0),
    Column("power_limit_w", "float", "enforced power limit per device", "W", minimum=0, exclusive_minimum=True),
    Column("metered_devices", "int", "devices whose power the energy reading sums, used by the run or not (a node-wide "
           "probe); null = the devices the run used", "count", minimum=1),
    Column("idle_power_w", "float", "idle power per device, measured before the run", "W", minimum=0),
    Column("window_method", "str", "single (one pass per window), amortised (k passes back to back, divided by k) or "
           "lengthened (k x prefill+decode, divided by k, minus the prefill measured apart)", choices=WINDOW_METHODS),
    Column("window_passes", "int", "passes of the phase per measurement window (k)", "count", minimum=1),
    Column("window_s", "float", "mean length of one measurement window", "s", minimum=0),
    Column("quantisation_bound", "float", "energy-counter increment / (k x the phase's energy): bound on the relative "
           "error from the counter's quantisation (rows above 2% are flagged counter_quantised)", "fraction", minimum=0),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
REQUIRED: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.required)
_BY_NAME = {c.name: c for c in COLUMNS}
_PANDAS_DTYPES = {"str": "string", "int": "Int64", "float": "Float64", "bool": "boolean"}


@dataclass(frozen=True)
class RowProblem:
    """A schema violation: where (source file and line) and what."""

    source_file: str
    line: int
    column: str
    message: str

    def __str__(self) -> str:
        return f"{self.source_file}, line {self.line}: {self.column}: {self.message}"


@dataclass
class ValidationReport:
    """What validation found: rows checked, problems (with file and line), rows dropped/kept bad."""

    rows: int = 0
    problems: list[RowProblem] = field(default_factory=list)
    dropped: int = 0
    kept_bad: int = 0

    @property
    def bad_rows(self) -> int:
        return len({(p.source_file, p.line) for p in self.problems})

    def summary(self) -> str:
        text = f"{self.rows} rows checked, {self.bad_rows} invalid"
        if self.dropped:
            text += f", {self.dropped} dropped"
        if self.kept_bad:
            text += f", {self.kept_bad} kept although invalid"
        return text


def empty_table() -> pd.DataFrame:
    """An empty canonical table with every column typed."""
    return conform(pd.DataFrame({name: [] for name in COLUMN_NAMES}))


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Add missing optional columns (null), order columns canonically and cast to nullable dtypes.

    Values that cannot be cast become nulls here and are reported by :func:`validate` only where
    the column is required; use :func:`validate` on raw frames to see every cast failure.
    """
    out = pd.DataFrame(index=df.index)
    for col in COLUMNS:
        values = df[col.name] if col.name in df.columns else pd.Series([None] * len(df), index=df.index, dtype="object")
        out[col.name] = _cast(values, col)
    extra = [c for c in df.columns if c not in _BY_NAME]
    if extra:
        raise InvalidInputError(f"unknown columns {', '.join(map(str, extra))}; the canonical table has {', '.join(COLUMN_NAMES)}",
                                field="columns")
    return out.reset_index(drop=True)


def _cast(values: pd.Series, col: Column) -> pd.Series:
    if col.dtype == "str":
        return values.astype("object").where(values.notna(), None).astype("string")
    if col.dtype == "bool":
        mapped = values.map(_to_bool, na_action="ignore")
        return mapped.astype("boolean")
    numeric = pd.to_numeric(values, errors="coerce")
    if col.dtype == "int":
        whole = numeric.where(numeric.isna() | (numeric == np.floor(numeric)))
        return whole.astype("Float64").astype("Int64")
    return numeric.astype("Float64")


_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _to_bool(value: object) -> object:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return bool(value) if value in (0, 1) else np.nan
    key = str(value).strip().lower()
    return True if key in _TRUE else False if key in _FALSE else np.nan


def _problems_for(df: pd.DataFrame, raw: pd.DataFrame, check_catalog: bool) -> list[tuple[int, str, str]]:
    """(row index, column, message) of every violation; ``raw`` is the frame before casting."""
    found: list[tuple[int, str, str]] = []
    for col in COLUMNS:
        typed = df[col.name]
        if col.name in raw.columns:
            original = raw[col.name]
            lost = typed.isna() & original.notna() & (original.astype("string").str.strip() != "")
            for i in np.flatnonzero(lost.to_numpy()):
                found.append((int(i), col.name, f"{original.iloc[i]!r} is not a valid {col.dtype}"))
        if col.required:
            for i in np.flatnonzero(typed.isna().to_numpy()):
                if not (col.name in raw.columns and lost.iloc[i]):
                    found.append((int(i), col.name, "is required"))
        if col.minimum is not None and col.dtype in ("int", "float"):
            values = typed.astype("Float64")
            bad = values <= col.minimum if col.exclusive_minimum else values < col.minimum
            op = ">" if col.exclusive_minimum else ">="
            for i in np.flatnonzero(bad.fillna(False).to_numpy()):
                found.append((int(i), col.name, f"must be {op} {col.minimum:g}, got {values.iloc[i]}"))
        if col.choices is not None:
            bad = typed.notna() & ~typed.isin(col.choices)
            for i in np.flatnonzero(bad.fillna(False).to_numpy()):
                found.append((int(i), col.name, f"{typed.iloc[i]!r} is not one of {', '.join(col.choices)}"))
    if check_catalog and len(df):
        from llmco2.specs import gpu_catalog, model_catalog

        gpus, models = gpu_catalog(), model_catalog()
        for name, cat in (("device", gpus), ("model", models)):
            values = df[name]
            unknown = {v for v in values.dropna().unique() if v not in cat}
            for i in np.flatnonzero(values.isin(list(unknown)).fillna(False).to_numpy()):
                found.append((int(i), name, f"{values.iloc[i]!r} is not a catalog id"))
    return found


def validate(raw: pd.DataFrame, on_error: str = "raise", origin: str = "<table>", check_catalog: bool = True,
             ) -> tuple[pd.DataFrame, ValidationReport]:
    """Cast ``raw`` to the canonical schema and check every row.

    Returns the typed table and a report. ``on_error``: ``raise`` (an `InvalidInputError` naming
    the first bad row's file and line and the number of bad rows), ``drop`` (bad rows removed) or
    ``keep`` (bad rows kept); the report counts them in every case.
    """
    if on_error not in ON_ERROR:
        raise InvalidInputError(f"must be one of {', '.join(ON_ERROR)}, got {on_error!r}", field="on_error")
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise InvalidInputError(f"{origin}: missing required columns {', '.join(missing)}", field="columns")
    raw = raw.reset_index(drop=True)
    typed = conform(raw)
    found = _problems_for(typed, raw, check_catalog)
    files = typed["source_file"].fillna(origin)
    lines = typed["source_row"].fillna(0).astype("int64")
    report = ValidationReport(rows=len(typed))
    report.problems = [RowProblem(str(files.iloc[i]), int(lines.iloc[i]), col, msg) for i, col, msg in sorted(found)]
    bad_index = sorted({i for i, _, _ in found})
    if bad_index:
        if on_error == "raise":
            first = report.problems[0]
            more = f" ({report.bad_rows} invalid rows in all)" if report.bad_rows > 1 else ""
            raise InvalidInputError(f"{first}{more}", field=None)
        if on_error == "drop":
            typed = typed.drop(index=bad_index).reset_index(drop=True)
            report.dropped = len(bad_index)
        else:
            report.kept_bad = len(bad_index)
        log.warning("%s: %s", origin, report.summary())
    return typed, report


# -- files --------------------------------------------------------------------------------------
def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix == ".csv":
        return "csv"
    raise InvalidInputError(f"{path}: unknown table format {suffix!r}; use .parquet or .csv", field="path")


def read_table(path: str | Path, on_error: str = "raise", check_catalog: bool = True) -> tuple[pd.DataFrame, ValidationReport]:
    """Read and validate a canonical table (``.parquet`` or ``.csv``)."""
    p = Path(path)
    check_input_file(p, "path")
    kind = _format(p)
    try:
        raw = pd.read_parquet(p) if kind == "parquet" else pd.read_csv(p, dtype="object", keep_default_na=True)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise InvalidInputError(f"{p}: cannot be read as {kind} ({str(exc).splitlines()[0]})", field="path") from None
    return validate(raw, on_error=on_error, origin=str(p), check_catalog=check_catalog)


def write_table(df: pd.DataFrame, path: str | Path, check_catalog: bool = True) -> Path:
    """Validate ``df`` (any invalid row is an error) and write it atomically: a failure never
    leaves a partial file behind."""
    p = Path(path)
    kind = _format(p)
    table, _ = validate(df, on_error="raise", origin=str(p), check_catalog=check_catalog)
    if not p.parent.exists():
        raise InvalidInputError(f"folder {str(p.parent)!r} does not exist", field="path")
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if kind == "parquet":
            table.to_parquet(tmp, index=False)
        else:
            table.to_csv(tmp, index=False)
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p


def concat_tables(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate canonical tables (typed columns kept)."""
    frames = [t for t in tables if len(t)]
    return conform(pd.concat(frames, ignore_index=True)) if frames else empty_table()
