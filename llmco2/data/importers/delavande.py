"""Delavande benchlab (JulienDelavande/benchlab): prefill and decode energy of single requests.

Llama-3.1-8B-Instruct with Hugging Face transformers (``generate``, KV cache on) on one H100
SXM, batch 1, energy measured with codecarbon. Each source line gives two canonical rows:

* prefill: ``energy_prefill_gpu_J`` / ``duration_prefill_s`` (a generation of one token),
  ``generated_tokens = 1``;
* decode: ``energy_gpu_decode_J`` / ``duration_decode_s`` (the full generation minus the prefill
  run), ``generated_tokens = response_tokens`` (the canonical count includes the first token).

The implied GPU power (energy / duration) exceeds the H100's 700 W TDP in every prefill row and
in many decode rows: codecarbon probably summed other GPUs of the node. Such rows are kept and
flagged ``power_exceeds_tdp``. A response of a single token has no decode phase: its decode row
is dropped and counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.data.importers.base import ARCH_FIELDS, ImportResult, Rows, arch_columns, finish, interleave, number, read_csv
from llmco2.specs.engines import engine_id

FORMAT = "delavande"
REQUIRED = ("prompt_tokens", "response_tokens", "duration_prefill_s", "duration_decode_s", "energy_prefill_gpu_J",
            "energy_gpu_decode_J")
DEVICE = "h100-sxm"
MODEL = "llama3.1-8b"
TDP_FLAG = "power_exceeds_tdp"
ZERO_ENERGY = "energy_j == 0"
NO_DECODE = "decode row of a one-token response (no decode phase)"


def import_delavande(path: Path) -> ImportResult:
    from llmco2.specs import get_gpu

    src = read_csv(Path(path), required=REQUIRED, kind="delavande")
    n = len(src)
    prompt, response = number(src, "prompt_tokens", integer=True), number(src, "response_tokens", integer=True)
    src.fail_first(response < 1, "response_tokens", lambda i: f"{response[i]:g}: a response has at least one token")
    phases = {
        "prefill": (number(src, "energy_prefill_gpu_J"), number(src, "duration_prefill_s"), np.ones(n)),
        "decode": (number(src, "energy_gpu_decode_J"), number(src, "duration_decode_s"), response),
    }
    arch = arch_columns(pd.Series(MODEL, index=range(n)))
    frames = []
    for phase, (energy, duration, generated) in phases.items():
        frames.append(pd.DataFrame({
            "source_row": src.lines,
            "device": DEVICE,
            "num_devices": 1,
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "engine": engine_id("hf"),
            "model": MODEL,
            **{c: arch[c] for c in ARCH_FIELDS},
            "kv_cache": True,
            "batch_size": 1,
            "prompt_tokens": prompt,
            "generated_tokens": generated,
            "phase": phase,
            "level": "request",
            "energy_j": energy,
            "latency_s": duration,
            "measurement": "codecarbon",
        }))
    raw = interleave(frames)

    rows = Rows(len(raw))
    energy, latency = raw["energy_j"].to_numpy(float), raw["latency_s"].to_numpy(float)
    decode = (raw["phase"] == "decode").to_numpy()
    rows.drop(decode & (raw["generated_tokens"].to_numpy(float) <= 1), NO_DECODE)
    rows.drop(energy == 0, ZERO_ENERGY)
    with np.errstate(divide="ignore", invalid="ignore"):
        watts = energy / latency
    rows.flag(watts > get_gpu(DEVICE).tdp_w, TDP_FLAG)
    return finish(raw, rows, FORMAT, Path(path), n)
