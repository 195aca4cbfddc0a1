"""ML.ENERGY leaderboard v2 (ml-energy/benchmark, 2024): one vLLM configuration at steady state.

A row is a (model, GPU, TP, PP, batch cap) run of a loaded vLLM server: energy per request
(all GPUs, measured with Zeus from NVML energy counters), the average number of output tokens
and the average running batch. Phase ``total`` (prefill folded in), level ``steady_state``
(``energy_j`` per request), ``batch_size`` = average batch, ``generated_tokens`` = average
output tokens, ``prompt_tokens`` null (ShareGPT prompts, lengths not recorded), engine ``vllm-v0``:
the leaderboard's v2 data was collected in 2024, before vLLM's V1 engine was first released (January
2025, vLLM blog "vLLM V1: A Major Upgrade to vLLM's Core Architecture") and with whole prefills,
V0's default.
Weights and KV cache are 16-bit (vLLM ``dtype=auto`` on the bf16/fp16 checkpoints).

* ``task_type == mllm_text_generation`` rows (image + text prompts to LLaVA, Chameleon,
  Phi-3-vision) are not text generation: dropped and counted.
* ``model_dir`` quirk: Mixtral-8x22B runs kept in ``...-Instruct-v0.1-pp1`` are the same model
  run with PP 1; the model is read from ``Model`` and the suffix must agree with ``PP``.
* Models the catalog does not have are dropped and counted (every text model of the 2024 file,
  Phi-3-small included, is in the catalog).
"""

from __future__ import annotations

import re
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

FORMAT = "mlenergy_v2"
REQUIRED = ("task_type", "task", "model_dir", "Model", "GPU", "TP", "PP", "Energy/req (J)", "Avg Output Tokens", "Avg BS (reqs)",
            "num_gpus")
TEXT_TASK_TYPES = ("llm_text_generation",)
MODELS = {"mistralai/Mixtral-8x22B-Instruct-v0.1": "mixtral-8x22b"}
ZERO_ENERGY = "energy_j == 0"


def import_mlenergy_v2(path: Path) -> ImportResult:
    src = read_csv(Path(path), required=REQUIRED, kind="mlenergy_v2")
    n = len(src)
    tp, pp, gpus = (number(src, c, integer=True) for c in ("TP", "PP", "num_gpus"))
    energy, out_tokens, batch = (number(src, c) for c in ("Energy/req (J)", "Avg Output Tokens", "Avg BS (reqs)"))
    src.fail_first(gpus != tp * pp, "num_gpus", lambda i: f"{gpus[i]:g} is not TP x PP = {tp[i]:g} x {pp[i]:g}")

    model_names, model_dir = text(src, "Model"), text(src, "model_dir")
    suffix = [_dir_suffix(d, m) for d, m in zip(model_dir, model_names, strict=True)]
    src.fail_first(np.array([s is None for s in suffix]), "model_dir",
                   lambda i: f"{model_dir.iloc[i]!r} is neither Model ({model_names.iloc[i]!r}) nor Model + '-pp<N>'")
    src.fail_first(np.array([s not in ("", None) and int(s) != pp[i] for i, s in enumerate(suffix)]), "model_dir",
                   lambda i: f"{model_dir.iloc[i]!r} says pp{suffix[i]} but PP is {pp[i]:g}")

    rows = Rows(n)
    task_type = text(src, "task_type")
    for kind in sorted(set(pd.unique(task_type)) - set(TEXT_TASK_TYPES)):
        rows.drop((task_type == kind).to_numpy(), f"multimodal task ({kind})" if kind.startswith("mllm") else f"task type {kind}")
    gpu_names = text(src, "GPU")
    devices, models = resolve_ids(rows, gpu_names, model_names, models=MODELS)
    rows.drop(energy == 0, ZERO_ENERGY)

    arch = arch_columns(models.where(rows.keep))
    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": devices,
        "num_devices": gpus,
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "engine": "vllm-v0",
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "weight_bits": 16,
        "kv_bits": 16,
        "kv_cache": True,
        "batch_size": batch,
        "prompt_tokens": None,
        "generated_tokens": out_tokens,
        "phase": "total",
        "level": "steady_state",
        "energy_j": energy,
        "measurement": "nvml_energy",
    })
    return finish(raw, rows, FORMAT, Path(path), n)


def _dir_suffix(model_dir: str, model: str) -> str | None:
    """``""`` when ``model_dir`` is the model, the N of a ``-ppN`` suffix, ``None`` otherwise."""
    if model_dir == model:
        return ""
    m = re.fullmatch(re.escape(model) + r"-pp(\d+)", model_dir)
    return m.group(1) if m else None


SERVING_COLUMNS = {"task": "task", "file_bs": "max_batch", "energy_per_output_token_J": "j_per_output_token",
                   "Avg TPOT (s)": "avg_tpot_s", "Max BS (reqs)": "max_batch_seen", "Token tput (tok/s)": "token_tput_per_s"}


def serving_rows(path: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The imported rows as serving measurements: the canonical columns plus the source's batch cap
    (``max_batch`` = the configured maximum batch ``file_bs`` times PP: with pipeline parallelism
    the file's cap is per stage, and the server holds PP micro-batches, as its ``Max BS`` shows),
    task (``chat`` = ShareGPT conversations, ``code``), J per output token (steady state), mean
    time per output token (s), the largest batch seen, output tokens per second, the run's average
    power of all its GPUs (``implied_power_w`` = J per output token x output tokens per s, W; v2
    publishes no power) and its mean time per decode round (``round_time_s`` = mean running batch /
    output tokens per s: every running request gets one token a round). Both come from the run's
    totals, as J per output token does; ``Avg TPOT`` is a mean over requests of their own decode
    time per token, up to 1.6x shorter than the round at large batch caps. Also returns the
    import's drop counts by reason."""
    result = import_mlenergy_v2(path)
    out = with_source_columns(result, Path(path), SERVING_COLUMNS)
    tput = pd.to_numeric(out["token_tput_per_s"], errors="coerce")
    out["implied_power_w"] = pd.to_numeric(out["j_per_output_token"], errors="coerce") * tput
    out["round_time_s"] = pd.to_numeric(out["batch_size"], errors="coerce") / tput
    out["max_batch"] = out["max_batch"].to_numpy(dtype=np.int64) * out["pipeline_parallel"].to_numpy(dtype=np.int64)
    return out, dict(result.dropped)
