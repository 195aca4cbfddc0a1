"""Many requests at once: read a request CSV, analyse every row in one vectorised pass."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import PHASES, LayerBatch, analyze_layers
from llmco2.analytic.model import QUANTITIES, model_totals
from llmco2.analytic.request_files import iter_request_chunks
from llmco2.analytic.request_parsing import ARCH_COLUMNS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS, RowDefaults
from llmco2.specs import GPU, ModelArch, Request

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)
__all__ = ["ANALYSIS_COLUMNS", "ARCH_COLUMNS", "OPTIONAL_COLUMNS", "REQUIRED_COLUMNS", "analysis_columns", "analyze_request_table",
           "read_request_csv"]

#: The columns the analysis of a request adds: whole-model ops, bytes and roofline time per phase,
#: then the weights and KV cache each GPU holds (bytes) and whether they fit its memory.
ANALYSIS_COLUMNS = (*(f"{phase}_{q}" for phase in PHASES for q in QUANTITIES), "weight_bytes_per_gpu",
                    "kv_cache_bytes_per_gpu", "fits_in_memory")


def read_request_csv(path: Path, defaults: RowDefaults | None = None) -> list[tuple[ModelArch, Request, GPU]]:
    """Parse and validate a request CSV (or Parquet) file; an invalid row raises `InvalidInputError`
    with its line. ``defaults`` supplies dtype / flash-attention / engine / context options for
    columns the file does not have."""
    items: list[tuple[ModelArch, Request, GPU]] = []
    for chunk in iter_request_chunks(Path(path), defaults):
        items += chunk.table.items()
    return items


def analyze_request_table(items: Sequence[tuple[ModelArch, Request, GPU]]) -> pd.DataFrame:
    """One row per request: its inputs and whole-model ops, bytes and roofline time per phase."""
    import pandas as pd

    batch = LayerBatch.from_items(items, validate=False)
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
    if (batch.ep > 1).any():  # expert parallelism: its column beside the tensor-parallel degree
        frame.insert(frame.columns.get_loc("tensor_parallel") + 1, "expert_parallel", batch.ep.astype(int))
    for name, values in analysis_columns(batch).items():
        frame[name] = values
    return frame


def analysis_columns(batch: LayerBatch) -> dict[str, NDArray[Any]]:
    """The :data:`ANALYSIS_COLUMNS` of every request of ``batch``, in that order (float64; the last bool)."""
    totals = model_totals(analyze_layers(batch))
    columns: dict[str, NDArray[Any]] = {f"{phase}_{q}": np.asarray(totals.totals[phase][q], dtype=np.float64)
                                        for phase in PHASES for q in QUANTITIES}
    columns["weight_bytes_per_gpu"] = np.asarray(totals.weight_bytes_per_gpu, dtype=np.float64)
    columns["kv_cache_bytes_per_gpu"] = np.asarray(totals.kv_cache_bytes_per_gpu, dtype=np.float64)
    columns["fits_in_memory"] = np.asarray(totals.fits_in_memory, dtype=bool)
    return columns
