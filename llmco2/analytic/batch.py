"""Many requests at once: read a request CSV, analyse every row in one vectorised pass."""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmco2.analytic.layer import PHASES, LayerBatch, analyze_layers
from llmco2.analytic.model import QUANTITIES, model_totals
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request, get_gpu, get_model, validate_request

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("model", "gpu", "batch_size", "prompt_tokens", "generated_tokens")
OPTIONAL_COLUMNS = ("num_gpus", "tensor_parallel", "dtype", "flash_attention")
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


def _with_arch_columns(base: ModelArch, row: dict[str, str], cache: dict[tuple, ModelArch]) -> ModelArch:
    """``base`` with the architecture columns of ``row`` applied (cached per distinct variant)."""
    changes: dict[str, int] = {}
    for col in ARCH_COLUMNS:
        text = row.get(col, "")
        if text:
            try:
                value = float(text)
            except ValueError:
                raise InvalidInputError(f"must be an integer, got {text!r}", field=col) from None
            if not value.is_integer():
                raise InvalidInputError(f"must be an integer, got {text!r}", field=col)
            if int(value) != getattr(base, col):
                changes[col] = int(value)
    if not changes:
        return base
    if ("hidden_size" in changes or "num_heads" in changes) and "head_dim" not in changes and base.head_dim * base.num_heads == base.hidden_size:
        hidden = changes.get("hidden_size", base.hidden_size)
        heads = changes.get("num_heads", base.num_heads)
        if hidden % heads:
            raise InvalidInputError(f"num_heads {heads} does not divide hidden_size {hidden}", field="num_heads")
        changes["head_dim"] = hidden // heads
    key = (base.id, tuple(sorted(changes.items())))
    if key not in cache:
        cache[key] = base.with_overrides(**changes)
    return cache[key]


def read_request_csv(path: Path, defaults: Any = None) -> list[tuple[ModelArch, Request, GPU]]:
    """Parse and validate a request CSV; an invalid row raises `InvalidInputError` with its line.

    ``defaults`` (an argparse namespace or None) supplies dtype / flash-attention / context options
    for columns the file does not have.
    """
    if not path.is_file():
        raise InvalidInputError(f"no such file {str(path)!r}", field="--requests")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise InvalidInputError(f"{path}: missing columns {', '.join(missing)} (need {', '.join(REQUIRED_COLUMNS)})",
                                    field="--requests")
        models: dict[str, ModelArch] = {}
        variants: dict[tuple, ModelArch] = {}
        gpus: dict[str, GPU] = {}
        items: list[tuple[ModelArch, Request, GPU]] = []
        for line, raw in enumerate(reader, start=2):
            row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
            try:
                base = models.get(row["model"]) or models.setdefault(row["model"], get_model(row["model"]))
                arch = _with_arch_columns(base, row, variants)
                gpu = gpus.get(row["gpu"]) or gpus.setdefault(row["gpu"], get_gpu(row["gpu"]))
                flash = _bool(row["flash_attention"], "flash_attention") if row.get("flash_attention") else (
                    getattr(defaults, "flash_attention", True))
                num_gpus = row.get("num_gpus") or 1
                req = Request(
                    batch_size=row["batch_size"], prompt_tokens=row["prompt_tokens"],  # type: ignore[arg-type]
                    generated_tokens=row["generated_tokens"], num_gpus=num_gpus,  # type: ignore[arg-type]
                    tensor_parallel=row.get("tensor_parallel") or None,  # type: ignore[arg-type]
                    weight_dtype=row.get("dtype") or getattr(defaults, "dtype", "fp16"),
                    activation_dtype=getattr(defaults, "act_dtype", None), kv_dtype=getattr(defaults, "kv_dtype", None),
                    flash_attention=flash, causal=getattr(defaults, "causal", False),
                )
                validate_request(req, arch, gpu, check_context=not getattr(defaults, "ignore_context", False))
            except InvalidInputError as exc:
                raise InvalidInputError(f"{path}, line {line}: {exc}", field=None) from None
            items.append((arch, req, gpu))
    if not items:
        raise InvalidInputError(f"{path} has a header but no requests", field="--requests")
    return items


def analyze_request_table(items: Sequence[tuple[ModelArch, Request, GPU]]) -> pd.DataFrame:
    """One row per request: its inputs and whole-model ops, bytes and roofline time per phase."""
    batch = LayerBatch.from_items(items, validate=False)
    analysis = analyze_layers(batch)
    totals = model_totals(analysis)
    frame = pd.DataFrame({
        "model": [a.id for a, _, _ in items],
        "gpu": [g.id for _, _, g in items],
        "num_gpus": batch.num_gpus.astype(int),
        "tensor_parallel": batch.tp.astype(int),
        "batch_size": batch.batch.astype(int),
        "prompt_tokens": batch.prompt.astype(int),
        "generated_tokens": batch.generated.astype(int),
        "dtype": [r.weight_dtype for _, r, _ in items],
        "flash_attention": batch.flash,
    })
    for phase in PHASES:
        for q in QUANTITIES:
            frame[f"{phase}_{q}"] = totals.totals[phase][q]
    frame["weight_bytes_per_gpu"] = totals.weight_bytes_per_gpu
    frame["kv_cache_bytes_per_gpu"] = totals.kv_cache_bytes_per_gpu
    frame["fits_in_memory"] = np.asarray(totals.fits_in_memory, dtype=bool)
    return frame
