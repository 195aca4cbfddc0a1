"""Wilkins et al. energy-inference (grantwilkins/energy-inference): one request, batch 1.

Hugging Face ``pipeline`` generation in bf16 **without a KV cache** (``use_cache=False``: every
step recomputes the whole prefix, so energy grows super-linearly with output length) and with
the layers split over the GPUs by ``device_map="auto"`` (pipeline stages, not tensor parallel).
GPU energy from NVML counters through pyJoules. A row is one request: phase ``total``, level
``request``, ``kv_cache = false``, ``pipeline_parallel = num_gpus``, ``tensor_parallel = 1``,
``energy_j = gpu_energy_J``, ``latency_s = runtime_s``.

* ``generated_tokens = max_new_tokens``: the repository's scripts also set
  ``min_new_tokens = 0.9 * max_new_tokens``, so the real output is between 90% and 100% of it
  (sampling may stop early at the end-of-sequence token).
* Devices are read from ``gpu`` without its parenthesised host note (``V100-16GB (Palmetto,
  Intel host)`` -> ``v100``). The Apple M1 Pro rows are not an NVIDIA GPU and not in the
  catalog: dropped and counted. ``load model`` rows (model loading, not inference) are dropped.
* Outliers. The ~1e6 J rows (Llama-2-70B and Falcon-40B, 2048-4096 new tokens on 3-4 A100s) are
  real: repeats agree to within 1% and the implied power is about 150 W per GPU; they are the
  super-linear no-KV-cache regime and are kept unflagged. What does stand out are runs far from
  the other repeats of the same configuration: mostly the first iteration (warm-up: 2-18x the
  runtime of the later repeats) and a few sub-second runs where the energy counter's resolution
  shows. A row whose energy is more than 1.5x above or below the median of its configuration's
  repeats (at least 3) is kept and flagged ``repeat_outlier``. Tiny energies (< 5 J) occur only
  in the dropped M1 ``load model`` rows; a zero energy would be dropped and counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.data.importers.base import (
    ARCH_FIELDS,
    ImportResult,
    Rows,
    arch_columns,
    finish,
    number,
    read_csv,
    resolve_ids,
    text,
)
from llmco2.specs.engines import engine_id

FORMAT = "wilkins"
REQUIRED = ("model", "system", "gpu", "num_gpus", "input_tokens", "max_new_tokens", "runtime_s", "gpu_energy_J", "phase_tag")
OUTLIER_FACTOR = 1.5
OUTLIER_MIN_REPEATS = 3
OUTLIER_FLAG = "repeat_outlier"
ZERO_ENERGY = "energy_j == 0"
LOAD_MODEL = "model-loading measurement (phase_tag 'load model'), not inference"


def import_wilkins(path: Path) -> ImportResult:
    src = read_csv(Path(path), required=REQUIRED, kind="wilkins")
    n = len(src)
    gpus, prompt, new_tokens = (number(src, c, integer=True) for c in ("num_gpus", "input_tokens", "max_new_tokens"))
    runtime, energy = number(src, "runtime_s"), number(src, "gpu_energy_J")

    rows = Rows(n)
    gpu_names, model_names = text(src, "gpu"), text(src, "model")
    bare = gpu_names.str.replace(r"\s*\(.*\)\s*$", "", regex=True)
    devices, models = resolve_ids(rows, bare, model_names, device_labels=gpu_names)
    rows.drop(text(src, "phase_tag").str.lower().str.startswith("load model").to_numpy(), LOAD_MODEL)
    rows.drop(energy == 0, ZERO_ENERGY)

    prefix = src.data["prompt_prefix"].fillna("").astype(str) if "prompt_prefix" in src.data else pd.Series("", index=src.data.index)
    config = pd.DataFrame({"model": model_names, "system": text(src, "system"), "gpu": gpu_names, "n": gpus, "p": prompt,
                           "g": new_tokens, "prefix": prefix.to_numpy()})
    kept = pd.Series(np.where(rows.keep, energy, np.nan))
    groups = config.groupby(list(config.columns), sort=False, dropna=False).ngroup()
    median = kept.groupby(groups).transform("median").to_numpy()
    repeats = kept.notna().groupby(groups).transform("sum").to_numpy()
    ratio = energy / median
    rows.flag(rows.keep & (repeats >= OUTLIER_MIN_REPEATS) & ((ratio > OUTLIER_FACTOR) | (ratio < 1 / OUTLIER_FACTOR)), OUTLIER_FLAG)

    arch = arch_columns(models.where(rows.keep))
    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": devices,
        "num_devices": gpus,
        "tensor_parallel": 1,
        "pipeline_parallel": gpus,
        "engine": engine_id("hf"),
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "weight_bits": 16,
        "kv_cache": False,
        "batch_size": 1,
        "prompt_tokens": prompt,
        "generated_tokens": new_tokens,
        "phase": "total",
        "level": "request",
        "energy_j": energy,
        "latency_s": runtime,
        "measurement": "nvml_energy",
    })
    return finish(raw, rows, FORMAT, Path(path), n)
