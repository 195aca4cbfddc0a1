"""CO2-Meter (fuzhenxiao/CO2-Meter, AAAI 2026): per-request energy on edge accelerators, prefill
and decode separated.

No header; 19 columns (:data:`COLUMNS`). One row is one request (batch 1, one device) and one
phase: a prefill row was measured as a generation of exactly one token; a decode row is a full
generation of ``generated_tokens`` tokens minus the prefill run of the same prompt (so its
``generated_tokens`` counts the first token too, as the canonical schema does).

* ``is_code, is_conv`` -> ``trace`` (``code`` / ``conv``). In ``train_uniform.csv`` the lengths
  were drawn uniformly, but the flags still say which trace's prior the row belongs to; they are
  kept, and ``source_file`` (the file name) tells trace-sampled from uniform rows.
* ``energy_j == 0`` rows are recording failures (the authors drop them too): dropped and counted.
* The file records the architecture (hidden, intermediate, layers, heads, vocabulary, activation)
  but not the KV heads, which come from the catalog (the published configs). Every recorded
  field is checked against the catalog; a disagreement raises with file and line, except the
  known erratum in :data:`ERRATA`.
* The repository does not say how power was read (Jetson INA3221 rails via jtop, the RK3588's
  PMIC...), so ``measurement`` is the generic ``device_power_sensor``; ``engine`` is ``edge`` (the
  vendors' edge runtimes, one request at a time).
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

FORMAT = "co2meter"
COLUMNS = ("is_code", "is_conv", "is_prefill", "is_decode", "device", "num_devices", "model", "bits", "activation", "hidden_size",
           "intermediate_size", "num_layers", "num_heads", "vocab_size", "batch_size", "prompt_tokens", "generated_tokens",
           "latency_s", "energy_j")
INTEGER_COLUMNS = ("is_code", "is_conv", "is_prefill", "is_decode", "num_devices", "bits", "hidden_size", "intermediate_size",
                   "num_layers", "num_heads", "vocab_size", "batch_size", "prompt_tokens")
# generated_tokens is not always whole: 848 RK3588 decode rows of train_trace.csv hold values such
# as 55.2 or 93.25 (apparently averages). They are kept as they are (the canonical column is a
# float) and flagged, so that a consumer that needs whole token counts can see them.
FRACTIONAL_TOKENS = "fractional_generated_tokens"
CHECKED_ARCH = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "vocab_size", "activation")

# Source names that are not catalog aliases.
DEVICES = {"Nvidia-Orin": "jetson-orin", "RK3588-NPU": "rk3588-npu"}
MODELS = {"tinyllama": "tinyllama-1.1b", "internlm": "internlm2-1.8b"}  # qwen1.5-0.5b, qwen2-1.5b are catalog ids

# Known errors in the file's architecture columns: (catalog id, field, value in the file) -> flag.
# The repository's build_dataset.py maps "tinyllama" to TinyLlama/TinyLlama-1.1B-Chat-v1.0, whose
# config.json has num_hidden_layers = 22 (32 layers would make a 1.5B model); the file says 32.
# The rows are kept with the catalog's 22 layers and flagged.
ERRATA = {("tinyllama-1.1b", "num_layers", 32): "file_num_layers_32_catalog_22"}

ZERO_ENERGY = "energy_j == 0 (recording failure)"


def import_co2meter(path: Path) -> ImportResult:
    src = read_csv(Path(path), columns=COLUMNS, kind="co2meter")
    n = len(src)
    num = {c: number(src, c, integer=c in INTEGER_COLUMNS) for c in COLUMNS if c not in ("device", "model", "activation")}

    for a, b, what in (("is_code", "is_conv", "trace"), ("is_prefill", "is_decode", "phase")):
        ok = np.isin(num[a], (0, 1)) & np.isin(num[b], (0, 1)) & (num[a] + num[b] == 1)
        src.fail_first(~ok, f"{a},{b}", lambda i, a=a, b=b, what=what:
                       f"({num[a][i]:g}, {num[b][i]:g}) is not a one-hot {what} (exactly one of the two must be 1)")
    prefill = num["is_prefill"] == 1
    src.fail_first(prefill & (num["generated_tokens"] != 1), "generated_tokens",
                   lambda i: f"a prefill row must generate exactly 1 token, got {num['generated_tokens'][i]:g}")

    rows = Rows(n)
    device_names, model_names = text(src, "device"), text(src, "model")
    devices, models = resolve_ids(rows, device_names, model_names, devices=DEVICES, models=MODELS)

    arch = arch_columns(models.where(rows.keep))
    file_arch = {c: (text(src, c).str.lower() if c == "activation" else pd.Series(num[c])) for c in CHECKED_ARCH}
    for col in CHECKED_ARCH:
        catalog = arch[col]
        differs = rows.keep & (file_arch[col].to_numpy() != catalog.to_numpy())
        for (mid, fld, value), flag in ERRATA.items():
            if fld == col:
                known = differs & (models == mid).to_numpy() & (file_arch[col].to_numpy() == value)
                rows.flag(known, flag)
                differs &= ~known
        src.fail_first(differs, col, lambda i, col=col, catalog=catalog: f"{_show(file_arch[col].iloc[i])} for "
                       f"{model_names.iloc[i]} but the catalog ({models.iloc[i]}, its published config) has {catalog.iloc[i]}")

    rows.flag(num["generated_tokens"] != np.floor(num["generated_tokens"]), FRACTIONAL_TOKENS)
    rows.drop(num["energy_j"] == 0, ZERO_ENERGY)

    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": devices,
        "num_devices": num["num_devices"],
        "tensor_parallel": 1,
        "pipeline_parallel": 1,
        "engine": engine_id("edge"),
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "weight_bits": num["bits"],
        "kv_bits": num["bits"],
        "batch_size": num["batch_size"],
        "prompt_tokens": num["prompt_tokens"],
        "generated_tokens": num["generated_tokens"],
        "phase": np.where(prefill, "prefill", "decode"),
        "level": "request",
        "energy_j": num["energy_j"],
        "latency_s": num["latency_s"],
        "measurement": "device_power_sensor",
        "trace": np.where(num["is_code"] == 1, "code", "conv"),
    })
    return finish(raw, rows, FORMAT, Path(path), n)


def _show(value: object) -> str:
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)
