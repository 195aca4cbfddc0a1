"""Splitwise performance model (Mutinifni/splitwise-sim ``perf_model.csv``): latency only.

A row is one measured batch of Llama2-70B or BLOOM-176B on a DGX A100 / H100 node with tensor
parallelism 2-8: ``prompt_time`` (the prefill of ``batch_size`` prompts of ``prompt_size``
tokens), ``token_time`` (one decode iteration) and ``e2e_time``, all in **milliseconds**
(Llama2-70B, 512 tokens, TP 2 on A100: prompt_time 196, token_time 55, e2e 7169 =
196 + 127 x 55). The power columns are fractions of TDP and zero in most rows, so there is no
energy: each line gives two rows with ``energy_j`` null and ``measurement = latency_only``,
useful to check latency models, excluded by anything that needs energy.

* prefill: ``latency_s = prompt_time / 1000``, ``generated_tokens = 1``;
* decode: ``latency_s = (e2e_time - prompt_time) / 1000``, ``generated_tokens = token_size``
  (the requested length, first token included). Where that decode time disagrees by more than
  10% with ``token_time x (token_size - 1)`` — generation stopped early, or the batch was
  preempted and queued (the 64-sequence runs) — the decode row is flagged
  ``decode_time_inconsistent``: its true length or per-token time is not known.

Devices: ``a100-80gb`` and ``h100-80gb`` (the SXM part of the DGX H100) ->
``a100-80gb`` / ``h100-sxm``; ``h100-80gb-pcap`` is the same H100 under a power cap: mapped to
``h100-sxm`` and flagged ``power_capped``.
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
    gpu_id,
    interleave,
    model_id,
    number,
    read_csv,
    text,
)
from llmco2.specs.engines import engine_id

FORMAT = "splitwise"
REQUIRED = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "e2e_time",
            "tensor_parallel")
DEVICES = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm", "h100-80gb-pcap": "h100-sxm"}
POWER_CAPPED = {"h100-80gb-pcap"}
MS = 1e-3
DECODE_TOLERANCE = 0.10
CAP_FLAG = "power_capped"
DECODE_FLAG = "decode_time_inconsistent"


def import_splitwise(path: Path) -> ImportResult:
    src = read_csv(Path(path), required=REQUIRED, kind="splitwise")
    n = len(src)
    prompt, batch, tokens, tp = (number(src, c, integer=True) for c in ("prompt_size", "batch_size", "token_size", "tensor_parallel"))
    prompt_ms, token_ms, e2e_ms = (number(src, c) for c in ("prompt_time", "token_time", "e2e_time"))
    src.fail_first(e2e_ms < prompt_ms, "e2e_time", lambda i: f"{e2e_ms[i]:g} ms is shorter than prompt_time {prompt_ms[i]:g} ms")

    hardware, model_names = text(src, "hardware"), text(src, "model")
    devices = hardware.map({h: gpu_id(h, DEVICES) for h in pd.unique(hardware)})
    models = model_names.map({m: model_id(m) for m in pd.unique(model_names)})
    arch = arch_columns(models)
    decode_ms = e2e_ms - prompt_ms
    expected = token_ms * (tokens - 1)
    inconsistent = np.abs(decode_ms - expected) > DECODE_TOLERANCE * expected
    capped = hardware.isin(list(POWER_CAPPED)).to_numpy()

    frames = []
    for phase, generated, latency, bad in (("prefill", np.ones(n), prompt_ms * MS, np.zeros(n, dtype=bool)),
                                           ("decode", tokens, decode_ms * MS, inconsistent)):
        frames.append(pd.DataFrame({
            "source_row": src.lines,
            "device": devices,
            "num_devices": tp,
            "tensor_parallel": tp,
            "pipeline_parallel": 1,
            "engine": engine_id(None),  # the perf model does not say which engine was profiled: "unknown"
            "model": models,
            **{c: arch[c] for c in ARCH_FIELDS},
            "kv_cache": True,
            "batch_size": batch,
            "prompt_tokens": prompt,
            "generated_tokens": generated,
            "phase": phase,
            "level": "batch",
            "energy_j": np.nan,
            "latency_s": latency,
            "measurement": "latency_only",
            "_capped": capped,
            "_inconsistent": bad,
            "_hardware": hardware.to_numpy(),
            "_model_name": model_names.to_numpy(),
        }))
    raw = interleave(frames)

    rows = Rows(len(raw))
    rows.drop_unresolved(raw["device"], raw["_hardware"], "device")
    rows.drop_unresolved(raw["model"], raw["_model_name"], "model")
    rows.flag(raw["_capped"].to_numpy(bool), CAP_FLAG)
    rows.flag(raw["_inconsistent"].to_numpy(bool), DECODE_FLAG)
    return finish(raw.drop(columns=["_capped", "_inconsistent", "_hardware", "_model_name"]), rows, FORMAT, Path(path), n)
