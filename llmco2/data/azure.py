"""Azure LLM inference traces 2023 (code completion and conversation): the paper's inference prior.

The public traces (Azure/AzurePublicDataset, CC-BY 4.0, about one hour of production requests on
2023-11-16) have three columns: ``TIMESTAMP``, ``ContextTokens`` (prompt tokens) and
``GeneratedTokens`` (output tokens). :func:`load_trace` reads and validates one of them into
``timestamp, prompt_tokens, generated_tokens``; :func:`trace_stats`, :func:`ecdf` and
:func:`plot_figure6` reproduce the paper's Figure 6.

A trace file is read at most once per process (:func:`load_trace` caches by path, size and
modification time) and callers get a fresh copy each time.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)

TRACES = ("code", "conv")
TRACE_FILES = {"code": "AzureLLMInferenceTrace_code.csv", "conv": "AzureLLMInferenceTrace_conv.csv"}
TRACE_TITLES = {"code": "code completion", "conv": "conversation"}
RAW_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
COLUMNS = ("timestamp", "prompt_tokens", "generated_tokens")
TOKEN_COLUMNS = ("prompt_tokens", "generated_tokens")
PERCENTILES = (10, 25, 75, 90, 99)
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def trace_path(which: str) -> Path:
    """Path of the shared copy of trace ``which`` (``code`` or ``conv``)."""
    from llmco2.data.paths import shared_data

    return shared_data("azure", TRACE_FILES[_check_which(which)])


def _check_which(which: str) -> str:
    if which not in TRACES:
        raise InvalidInputError(f"unknown Azure trace {which!r}; expected one of {', '.join(TRACES)}", field="trace")
    return which


def load_trace(which: str, path: str | Path | None = None) -> pd.DataFrame:
    """The Azure trace ``which`` (``code`` or ``conv``) as ``timestamp`` (datetime64),
    ``prompt_tokens`` and ``generated_tokens`` (int64), one row per request in file order.

    ``path`` defaults to the shared data folder (:func:`trace_path`). A missing column, a
    timestamp that does not parse or a token count that is not a non-negative integer raises
    `InvalidInputError` naming the file and line (line 1 is the header).
    """
    _check_which(which)
    p = Path(path) if path is not None else trace_path(which)
    if not p.is_file():
        raise InvalidInputError(f"no such file {str(p)!r}", field="path")
    stat = p.stat()
    return _read_trace_file(str(p.resolve()), stat.st_size, stat.st_mtime_ns).copy()


@functools.lru_cache(maxsize=8)
def _read_trace_file(path: str, size: int, mtime_ns: int) -> pd.DataFrame:
    """Read and validate one trace file (cached: the key includes size and mtime, so an edited
    file is read again)."""
    del size, mtime_ns  # part of the cache key only
    log.debug("reading Azure trace %s", path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInputError(f"{path}: cannot be read as CSV ({first})", field="path") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    missing = [c for c in RAW_COLUMNS if c not in raw.columns]
    if missing:
        raise InvalidInputError(f"{path}, line 1: missing columns {', '.join(missing)}; an Azure LLM inference trace has "
                                f"{', '.join(RAW_COLUMNS)}", field="columns")
    lines = np.arange(len(raw)) + 2  # header is line 1
    out = pd.DataFrame(index=raw.index)
    stamps = raw["TIMESTAMP"].str.strip()
    ts = pd.to_datetime(stamps, format="ISO8601", errors="coerce")
    bad = ts.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"{path}, line {lines[i]}: TIMESTAMP {stamps.iloc[i]!r} is not a date-time "
                                f"(YYYY-MM-DD HH:MM:SS.fffffff){_more(bad)}", field="TIMESTAMP")
    out["timestamp"] = ts.astype("datetime64[ns]")
    for src, dst in (("ContextTokens", "prompt_tokens"), ("GeneratedTokens", "generated_tokens")):
        text = raw[src].str.strip()
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values) | (values < 0) | (values != np.floor(values))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"{path}, line {lines[i]}: {src} {text.iloc[i]!r} is not a non-negative integer"
                                    f"{_more(bad)}", field=src)
        out[dst] = values.astype(np.int64)
    return out.reset_index(drop=True)


def _more(bad: NDArray[np.bool_]) -> str:
    count = int(bad.sum())
    return f" ({count} invalid rows in all)" if count > 1 else ""


def clear_cache() -> None:
    """Forget the traces read so far (the next :func:`load_trace` reads the file again)."""
    _read_trace_file.cache_clear()


def trace_stats(df: pd.DataFrame) -> dict[str, Any]:
    """Request count and, for ``prompt_tokens`` and ``generated_tokens``: mean, median,
    p10/p25/p75/p90/p99 and max (plain Python numbers)."""
    missing = [c for c in TOKEN_COLUMNS if c not in df.columns]
    if missing:
        raise InvalidInputError(f"the frame has no column {', '.join(missing)}; use load_trace", field="columns")
    out: dict[str, Any] = {"count": int(len(df))}
    for col in TOKEN_COLUMNS:
        v = df[col].to_numpy(dtype=np.float64)
        if not len(v):
            raise InvalidInputError("the trace has no rows", field=col)
        rec: dict[str, float] = {"mean": float(v.mean()), "median": float(np.median(v))}
        for q in PERCENTILES:
            rec[f"p{q}"] = float(np.percentile(v, q))
        rec["max"] = float(v.max())
        rec["min"] = float(v.min())
        out[col] = rec
    return out


def ecdf(values: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Empirical CDF: the distinct values ``x`` (ascending) and ``F[i]`` = share of values <= ``x[i]``."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if not len(v):
        raise InvalidInputError("no finite values", field="values")
    x, counts = np.unique(v, return_counts=True)
    return x, np.cumsum(counts) / len(v)


def plot_figure6(out_path: str | Path, code_df: pd.DataFrame | None = None, conv_df: pd.DataFrame | None = None) -> Path:
    """The paper's Figure 6: prompt and generated token distributions of the code and the
    conversation traces, four panels ((a) code prompt, (b) chat prompt, (c) code generation,
    (d) chat generation). Each panel is a histogram over log-spaced bins with the ECDF on the
    right axis and the median marked. Frames default to the shared traces. The format follows
    the suffix (``.png``, ``.pdf``, ``.svg``); drawn with the Agg canvas (no display needed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(out_path)
    if out.suffix.lower() not in FIGURE_SUFFIXES:
        raise InvalidInputError(f"{out}: unknown figure format {out.suffix!r}; use {', '.join(FIGURE_SUFFIXES)}",
                                field="out_path")
    if not out.parent.exists():
        raise InvalidInputError(f"folder {str(out.parent)!r} does not exist", field="out_path")
    frames = {"code": code_df if code_df is not None else load_trace("code"),
              "conv": conv_df if conv_df is not None else load_trace("conv")}
    fig = Figure(figsize=(10, 7), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    panels = [("code", "prompt_tokens", "(a) code prompt"), ("conv", "prompt_tokens", "(b) chat prompt"),
              ("code", "generated_tokens", "(c) code generation"), ("conv", "generated_tokens", "(d) chat generation")]
    colours = {"code": "tab:blue", "conv": "tab:orange"}
    for ax, (which, col, title) in zip(axes.ravel(), panels, strict=True):
        values = frames[which][col].to_numpy(dtype=np.float64)
        values = np.maximum(values, 1.0)  # log axis: a 0-token count is drawn at 1
        bins = np.logspace(0, np.log10(values.max() * 1.05 + 1), 50)
        ax.hist(values, bins=bins, color=colours[which], alpha=0.75, label="requests")
        ax.set_xscale("log")
        med = float(np.median(values))
        ax.axvline(med, color="black", linestyle="--", linewidth=1.2, label=f"median {med:,.0f}")
        kind = "prompt" if col == "prompt_tokens" else "generated"
        ax.set_title(f"{title} — {TRACE_TITLES[which]}, {len(values):,} requests")
        ax.set_xlabel(f"{kind} tokens per request (tokens, log scale)")
        ax.set_ylabel("requests per bin (count)")
        right = ax.twinx()
        x, f = ecdf(values)
        right.step(x, f, where="post", color="dimgray", linewidth=1.0, label="ECDF")
        right.set_ylim(0, 1.02)
        right.set_ylabel("cumulative share of requests")
        handles = ax.get_legend_handles_labels()
        rh = right.get_legend_handles_labels()
        ax.legend(handles[0] + rh[0], handles[1] + rh[1], loc="upper left", fontsize=8)
    fig.suptitle("Azure LLM inference traces 2023: prompt and generated tokens (LLMCO2 Figure 6)")
    fig.savefig(out, dpi=120)
    return out
