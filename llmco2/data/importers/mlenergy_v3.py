"""ML.ENERGY leaderboard v3 (ml-energy/leaderboard ``public/data``, 2025): one vLLM configuration
at steady state on H100.

As v2: phase ``total``, level ``steady_state``, ``energy_j`` = energy per request,
``generated_tokens`` = average output length, ``batch_size`` = average batch, prompt null,
engine ``vllm`` (the V1 engine: the benchmark's
README runs the server image ``vllm/vllm-openai:v0.11.1``, a release without the V0 engine; the
data was released in December 2025), Zeus/NVML energy.

* Text tasks only (``gpqa``, ``lm-arena-chat``, ``sourcegraph-fim``): ``image-chat`` and
  ``video-chat`` rows are dropped and counted under ``multimodal task (<task>)``.
* ``weight_precision`` -> ``weight_bits`` (bfloat16 16, fp8 8, mxfp4 4; anything else raises).
  ``kv_bits`` is 16 for bf16 runs and left null otherwise (the file does not say whether the
  fp8 / mxfp4 runs quantised the KV cache).
* ``num_devices`` = ``num_gpus`` always; ``expert_parallel`` and ``data_parallel`` are kept as the
  file states them (``data_parallel`` is optional in the file: null where the column is absent;
  the 2025 release has ``data_parallel`` 1 on every row and ``expert_parallel`` = ``num_gpus`` on
  the expert-parallel runs). ``tensor_parallel`` is the file's value only when
  ``expert_parallel`` is 1 (with EP the attention layout is not stated, so it is left null).
* Fine-tunes and re-quantisations with the architecture of a catalog model are mapped to it
  (:data:`MODELS`, or a quantisation suffix the name resolver strips); models the catalog does
  not have are dropped and counted (the Qwen3-VL, Qwen3-Omni and Nemotron-Nano-12B-v2-VL runs are
  all multimodal tasks).
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
    with_source_columns,
)

FORMAT = "mlenergy_v3"
REQUIRED = ("task", "model_id", "gpu_model", "num_gpus", "tensor_parallel", "expert_parallel", "avg_batch_size", "avg_output_len",
            "energy_per_request_joules", "weight_precision")
MULTIMODAL_TASKS = ("image-chat", "video-chat")
PRECISION_BITS = {"bfloat16": 16, "fp8": 8, "mxfp4": 4}
# Same architecture as the catalog entry (published configs): thinking / coder fine-tunes and
# FP8 re-quantisations (the precision goes to weight_bits).
MODELS = {
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen3-30b-a3b",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "qwen3-30b-a3b",
    "meta-llama/Llama-3.1-405B-Instruct-FP8": "llama3.1-405b",
}
ZERO_ENERGY = "energy_j == 0"


def import_mlenergy_v3(path: Path) -> ImportResult:
    src = read_csv(Path(path), required=REQUIRED, kind="mlenergy_v3")
    n = len(src)
    gpus, tp, ep = (number(src, c, integer=True) for c in ("num_gpus", "tensor_parallel", "expert_parallel"))
    dp = number(src, "data_parallel", integer=True) if "data_parallel" in src.data.columns else np.full(n, np.nan)
    energy, out_len, batch = (number(src, c) for c in ("energy_per_request_joules", "avg_output_len", "avg_batch_size"))
    precision = text(src, "weight_precision").str.lower()
    src.fail_first(~precision.isin(list(PRECISION_BITS)).to_numpy(), "weight_precision",
                   lambda i: f"{precision.iloc[i]!r} is not one of {', '.join(PRECISION_BITS)}")
    bits = precision.map(PRECISION_BITS).to_numpy(dtype=float)

    rows = Rows(n)
    task = text(src, "task")
    for kind in MULTIMODAL_TASKS:
        rows.drop((task == kind).to_numpy(), f"multimodal task ({kind})")
    gpu_names, model_names = text(src, "gpu_model"), text(src, "model_id")
    devices, models = resolve_ids(rows, gpu_names, model_names, models=MODELS)
    rows.drop(energy == 0, ZERO_ENERGY)

    arch = arch_columns(models.where(rows.keep))
    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": devices,
        "num_devices": gpus,
        "tensor_parallel": np.where(ep == 1, tp, np.nan),
        "pipeline_parallel": 1,
        "data_parallel": dp,
        "expert_parallel": ep,
        "engine": "vllm",
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "weight_bits": bits,
        "kv_bits": np.where(bits == 16, 16, np.nan),
        "kv_cache": True,
        "batch_size": batch,
        "prompt_tokens": None,
        "generated_tokens": out_len,
        "phase": "total",
        "level": "steady_state",
        "energy_j": energy,
        "measurement": "nvml_energy",
    })
    return finish(raw, rows, FORMAT, Path(path), n)


SERVING_COLUMNS = {"task": "task", "max_num_seqs": "max_batch", "energy_per_token_joules": "j_per_output_token",
                   "avg_power_watts": "avg_power_w", "median_itl_ms": "median_itl_ms", "expert_parallel": "expert_parallel",
                   "weight_precision": "weight_precision"}


def serving_rows(path: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The imported rows as serving measurements: the canonical columns plus the source's batch cap
    (``max_batch`` = vLLM ``max_num_seqs``), task (the dataset), J per output token (steady state),
    average power (W, all GPUs), median inter-token latency (ms), expert parallelism and weight
    precision. Also returns the import's drop counts by reason."""
    result = import_mlenergy_v3(path)
    out = with_source_columns(result, Path(path), SERVING_COLUMNS)
    return out, dict(result.dropped)
