"""TokenPowerBench (Denizdius/TokenPowerBench results): offline vLLM batches, mean of 10 runs.

A row is one (model, workload, parallel config) run: ``workload`` ``bsB_outN`` is the batch size
B and the ``max_tokens`` N; ``config`` is ``Single GPU`` or ``TPn`` / ``PPn`` / ``DPn`` joined
by ``×`` (-> ``num_devices = TP x PP x DP``, ``tensor_parallel``, ``pipeline_parallel``).
``mj_per_token`` is the GPU energy of the run (NVML power of every GPU used, averaged over the
run) divided by its output tokens, i.e. ``gpu_avg_power / throughput``.

How the run is laid out (the repository's ``run_single_node.py`` and benchmark scripts, not the
file): every script runs ``--num-samples 1024`` Alpaca prompts through ``LLM.generate`` in
batches of B (``DPn`` shards the prompts over n replicas), ``duration`` is the wall time of all
1024 requests and ``throughput`` their output tokens per second.

Energy basis: **per batch** (level ``batch``, the schema's energy of the phase for the whole
batch): ``energy_j = mJ/token x tokens of one batch`` where the tokens of one batch are
B x the mean output tokens per request, ``throughput x duration / 1024``. That is the run's GPU
energy x B / 1024; the token count cancels, so the energy does not depend on how tokens were
counted. ``generated_tokens`` is that mean output length. It is below N (generation stops at
the end-of-sequence token) and approximate: the benchmark estimates tokens as 1.3 x words, so
the rows are flagged ``generated_tokens_estimated``. ``latency_s`` = duration x B x DP / 1024
(each replica runs its batches one after the other). Prompt lengths are not recorded.

Engine: the ``_eager`` file ran vLLM with ``enforce_eager=True`` (no CUDA graphs) -> ``vllm-eager``; the
``_noeager`` file ran vLLM's default CUDA-graph decode -> ``vllm`` (it is the slightly faster of the
two at every configuration); a file name that says neither is read as vLLM's default, ``vllm``.

The GPU type is not stated (H100-class: up to ~560 W per GPU): ``h100-sxm``, flagged
``device_assumed``. Qwen3.5-27B is not in the catalog: its rows are dropped and counted.
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
    Source,
    arch_columns,
    finish,
    model_id,
    number,
    read_csv,
    text,
)
from llmco2.specs.engines import engine_id

FORMAT = "tokenpowerbench"
REQUIRED = ("model_name", "workload", "config", "duration", "throughput", "mj_per_token")
NUM_SAMPLES = 1024  # --num-samples of every benchmark script in the repository
RUNS_AVERAGED = 10  # DATA.md: mean of 10 vLLM runs per parallel config
DEVICE = "h100-sxm"
DEVICE_FLAG = "device_assumed"
TOKENS_FLAG = "generated_tokens_estimated"
ZERO_ENERGY = "energy_j == 0"
_WORKLOAD = re.compile(r"bs(\d+)_out(\d+)")
_PART = re.compile(r"(TP|PP|DP)(\d+)")


def engine_for(path: Path) -> str:
    """Engine id of a TokenPowerBench file from its name (``..._eager.csv`` / ``..._noeager.csv``)."""
    name = path.stem.lower()
    if re.search(r"(^|[_-])no-?eager($|[_-])", name):
        return engine_id("vllm")
    if re.search(r"(^|[_-])eager($|[_-])", name):
        return engine_id("vllm-eager")
    return engine_id("vllm")


def parse_config(config: str) -> tuple[int, int, int] | None:
    """``(tp, pp, dp)`` of a config string (``Single GPU``, ``TP2``, ``TP2 × PP2``), ``None`` if not one."""
    if config.strip().lower() == "single gpu":
        return 1, 1, 1
    found: dict[str, int] = {}
    for part in re.split(r"\s*[×xX*]\s*", config.strip()):
        m = _PART.fullmatch(part)
        if not m or m.group(1) in found or int(m.group(2)) < 1:
            return None
        found[m.group(1)] = int(m.group(2))
    return found.get("TP", 1), found.get("PP", 1), found.get("DP", 1)


def _parse_column(src: Source, column: str, parse, what: str) -> list:
    values = text(src, column)
    parsed = [parse(v) for v in values]
    src.fail_first(np.array([p is None for p in parsed]), column, lambda i: f"{values.iloc[i]!r} is not {what}")
    return parsed


def import_tokenpowerbench(path: Path) -> ImportResult:
    src = read_csv(Path(path), required=REQUIRED, kind="tokenpowerbench")
    n = len(src)
    duration, throughput, mj = (number(src, c) for c in ("duration", "throughput", "mj_per_token"))
    work = _parse_column(src, "workload", lambda v: (m := _WORKLOAD.fullmatch(v)) and (int(m.group(1)), int(m.group(2))),
                         "a workload 'bs<B>_out<N>'")
    par = _parse_column(src, "config", parse_config, "a parallel config ('Single GPU', 'TP2', 'TP2 × PP2', ...)")
    batch = np.array([w[0] for w in work], dtype=float)
    tp, pp, dp = (np.array([p[k] for p in par], dtype=float) for k in range(3))

    rows = Rows(n)
    model_names = text(src, "model_name")
    models = model_names.map({m: model_id(m) for m in pd.unique(model_names)})
    rows.drop_unresolved(models, model_names, "model")
    rows.drop(mj == 0, ZERO_ENERGY)
    rows.flag(np.ones(n, dtype=bool), DEVICE_FLAG)
    rows.flag(np.ones(n, dtype=bool), TOKENS_FLAG)

    tokens_per_request = throughput * duration / NUM_SAMPLES
    arch = arch_columns(models.where(rows.keep))
    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": DEVICE,
        "num_devices": tp * pp * dp,
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "engine": engine_for(Path(path)),
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "weight_bits": 16,  # dtype auto on the bf16 checkpoints
        "kv_bits": 16,
        "kv_cache": True,
        "batch_size": batch,
        "prompt_tokens": None,
        "generated_tokens": tokens_per_request,
        "phase": "total",
        "level": "batch",
        "energy_j": mj / 1000.0 * batch * tokens_per_request,
        "latency_s": duration * batch * dp / NUM_SAMPLES,
        "repeats": RUNS_AVERAGED,
        "measurement": "nvml_power",
    })
    return finish(raw, rows, FORMAT, Path(path), n)
