"""Sample frames: one row per configuration with the columns of
:data:`~llmco2.data.sampling.common.SAMPLE_COLUMNS` (checked, written to and read from CSV), and
their ``(ModelArch, Request, GPU)`` triples for the analytic engine or a measurement harness.

Token counts are tokens per sequence; ``batch_size`` sequences; ``num_gpus`` GPUs of kind ``gpu``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmco2.data.sampling.architectures import arch_variants
from llmco2.data.sampling.common import DTYPES, INT_COLUMNS, SAMPLE_COLUMNS, SAMPLE_TRACES
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request, get_gpu, validate_request


def config_frame(cols: Mapping[str, Any]) -> pd.DataFrame:
    """A sample frame from column arrays (or scalars), with canonical column types."""
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
    return pd.concat([config_frame({c: df[c].to_numpy() for c in SAMPLE_COLUMNS}), df[extra].reset_index(drop=True)], axis=1)


def to_csv(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a sample frame (checked; extra columns such as a target kept after the sample columns)."""
    p = Path(path)
    if p.suffix.lower() != ".csv":
        raise InvalidInputError(f"{p}: sample files are .csv", field="out")
    table = check_samples(df)
    p.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(p, index=False)
    return p


def write_blocks(frames: Iterable[pd.DataFrame], out: str | Path) -> int:
    """Write sample frames (:meth:`~llmco2.data.sampling.samplers.Sampler.sample_blocks`) one after
    the other to a temporary file beside ``out``, renamed to ``out`` when complete and removed if
    anything stops it (Ctrl-C, SIGTERM, an error), so that memory is one frame whatever the total
    and ``out`` is either whole or untouched. The first frame's file is byte for byte what
    :func:`to_csv` writes for it. Returns the rows written."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.sample.tmp")
    first = tmp.with_suffix(".csv")
    rows = 0
    try:
        for frame in frames:
            if rows == 0:
                to_csv(frame, first)
                os.replace(first, tmp)
            else:
                check_samples(frame).to_csv(tmp, mode="a", header=False, index=False)
            rows += len(frame)
            del frame
        os.replace(tmp, out)
    finally:
        for leftover in (tmp, first):
            leftover.unlink(missing_ok=True)
    return rows


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
    codes, archs = arch_variants(df)
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
