"""Argonne LLM-Inference-Bench (argonne-lcf/LLM-Inference-Bench): one batch run per row.

A row is one offline batch (``batch_size`` sequences, ``input_len`` prompt and ``output_len``
generated tokens each, ``input_len == output_len``) on 1-4 devices. Energy is the sampled
average power times the latency (``energy_J_est``): phase ``total``, level ``batch`` (the
energy of the whole batch), measurement ``power_x_latency``.

* ``avg_power_W`` is already in watts for every row; ``power_unit_in_file`` records the unit
  the original results file used (W or mW, converted when the combined file was made). Every
  row's power per device is checked to be plausible in watts (:data:`WATTS_PER_DEVICE`), so a
  value left in mW or kW raises instead of being imported 1000x off; ``energy_J_est`` is checked
  against power x latency.
* Rows from the superseded commit ``943daf64`` whose file used W and ran on one device read
  about 190-240 W higher than the same configurations in later files (the node's idle GPUs
  appear to be included): kept, flagged ``power_includes_idle_gpus``. The Gaudi2 one-device rows
  of that commit (711-866 W, above the 600 W TDP of one Gaudi2) are of the same kind.
* Measurement scope (:func:`probe_devices`): that commit's rows in W read power with probes that sum
  every accelerator of the node, used or not: ``habanaPowerProbe`` with ``all_hpu=True`` (the sum over
  ``hlmlDeviceGetCount()``, ``Deepspeed-MII/Gaudi2/habana_power.py``, an HLS-Gaudi2 node of 8 HL-225H)
  and ``gpuPowerProbe`` with ``gpu_id=-1`` (the sum over ``nvmlDeviceGetCount()``,
  ``TensorRT-LLM/H100/power_utils.py``, 4 GPUs per H100 node), argonne-lcf/LLM-Inference-Bench at
  4664215b and 4a63dd42. The A100 rows of that commit in W (one device each, flagged) are counted at a
  Polaris node's 4 GPUs from their 190-240 W excess alone (their probe is not checked). Every other row reads the devices the run
  used. The energy columns are kept as published; the scope, read from the rows' ``source`` and
  ``power_unit_in_file`` fields, is written as ``metered_devices`` (the devices each reading sums),
  from which every fit and evaluation takes the unused cards' static power out
  (:func:`llmco2.data.scope.device_scope`).
* Devices resolve through the GPU catalog (ids, aliases, close matches: ``Nvidia H100 GPU`` ->
  ``h100-sxm``, ``Nvidia GH200 GPU`` -> ``gh200``, ``Habana Gaudi2`` -> ``gaudi2``), except the
  A100, whose generic name the catalog reads as the 80 GB part: the Argonne A100s are ALCF
  Polaris nodes (A100-SXM4 40 GB), so ``Nvidia A100 GPU`` -> ``a100-40gb`` (:data:`DEVICES`).
  Names the catalog does not know are dropped and counted.
* ``engine`` is the framework's catalog id (:func:`~llmco2.specs.engines.engine_id`), with the
  version or port the benchmark ran (:data:`ENGINE_VERSIONS`): vLLM -> ``vllm-v0`` (the benchmark's
  paper, arXiv 2411.00136, November 2024, ran vLLM 0.5-0.6, before V1 became vLLM's default engine
  in 0.8, 2025), TensorRT-LLM -> ``tensorrt-llm``, DeepSpeed and DeepSpeed-MII -> ``deepspeed``, and
  on Gaudi2 -> ``optimum-habana`` (its ``Deepspeed-MII/Gaudi2/run-power-bench.sh`` runs Optimum
  Habana's generation with HabanaAI's DeepSpeed and ``--use_hpu_graphs``).
* Multi-device runs use tensor parallelism (vLLM ``tensor_parallel_size``, TensorRT-LLM
  ``tp_size``, DeepSpeed tensor slicing): ``tensor_parallel = num_devices``.
* Models the catalog does not have (DeciLM-7B, Aquila-7B) are dropped and counted.
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

FORMAT = "argonne"
REQUIRED = ("source", "hardware", "num_devices", "framework", "model", "input_len", "output_len", "batch_size", "latency_s",
            "avg_power_W", "power_unit_in_file", "energy_J_est")
DEVICES = {"Nvidia A100 GPU": "a100-40gb"}  # Polaris: A100-SXM4 40 GB (the catalog's generic "a100" is the 80 GB part)
POWER_UNITS = ("W", "mW", "kW")
WATTS_PER_DEVICE = (10.0, 2000.0)
SUPERSEDED_COMMIT = "943daf64"
IDLE_FLAG = "power_includes_idle_gpus"
#: Accelerators in one node, per device id, that the superseded commit's probes summed (module docstring).
NODE_DEVICES = {"gaudi2": 8, "h100-sxm": 4, "a100-40gb": 4}
ZERO_ENERGY = "energy_j == 0"
#: (engine id, device id or "*") -> the engine version or port the benchmark ran (module docstring).
ENGINE_VERSIONS = {("vllm", "*"): "vllm-v0", ("deepspeed", "gaudi2"): "optimum-habana"}


def _engine_versions(engines: pd.Series, devices: pd.Series) -> pd.Series:
    """Each row's engine id as the version or port of :data:`ENGINE_VERSIONS` that it ran."""
    out = engines.copy()
    for (engine, device), version in ENGINE_VERSIONS.items():
        mask = (engines == engine) & ((devices == device) if device != "*" else True)
        out[mask] = version
    return out


def probe_devices(table: pd.DataFrame, path: Path) -> np.ndarray:
    """Accelerators whose power each row's reading sums (a count): the node's (:data:`NODE_DEVICES`) for the
    rows of :data:`SUPERSEDED_COMMIT` whose file used W, the devices the run used (``num_devices``) otherwise.

    ``table``: rows imported from the Argonne file at ``path`` (``source_row``, ``device``, ``num_devices``);
    the commit and unit are read from that file's ``source`` and ``power_unit_in_file`` at each row's line.
    """
    raw = pd.read_csv(Path(path), usecols=["source", "power_unit_in_file"])
    line = pd.to_numeric(table["source_row"]).to_numpy(np.int64) - 2  # line 1 is the header
    commit = raw["source"].astype(str).str.split().str[0].to_numpy()[line]
    unit = raw["power_unit_in_file"].astype(str).str.strip().to_numpy()[line]
    return metered_devices(commit, unit, table["device"], pd.to_numeric(table["num_devices"]).to_numpy(np.int64))


def metered_devices(commit: np.ndarray, unit: np.ndarray, devices: pd.Series, used: np.ndarray) -> np.ndarray:
    """Per row, the accelerators its power reading sums (:func:`probe_devices`) from the row's
    commit, the unit its file used, its device id and the devices it ``used``."""
    node = devices.astype(str).map(NODE_DEVICES).fillna(0).to_numpy(np.int64)
    node_wide = (np.asarray(commit) == SUPERSEDED_COMMIT) & (np.asarray(unit) == "W") & (node > 0)
    return np.where(node_wide, np.maximum(node, used), used)


def import_argonne(path: Path) -> ImportResult:
    src = read_csv(Path(path), required=REQUIRED, kind="argonne")
    n = len(src)
    num = {c: number(src, c, integer=c in ("num_devices", "input_len", "output_len", "batch_size"))
           for c in ("num_devices", "input_len", "output_len", "batch_size", "latency_s", "avg_power_W", "energy_J_est")}
    unit = text(src, "power_unit_in_file")
    src.fail_first(~unit.isin(POWER_UNITS).to_numpy(), "power_unit_in_file",
                   lambda i: f"{unit.iloc[i]!r} is not one of {', '.join(POWER_UNITS)}")
    per_device = num["avg_power_W"] / num["num_devices"]
    lo, hi = WATTS_PER_DEVICE
    src.fail_first((per_device < lo) | (per_device > hi), "avg_power_W",
                   lambda i: f"{num['avg_power_W'][i]:g} W over {num['num_devices'][i]:g} devices is not a plausible power in "
                   f"watts ({lo:g}-{hi:g} W per device); the file says its source used {unit.iloc[i]}")
    expected = num["avg_power_W"] * num["latency_s"]
    src.fail_first(np.abs(num["energy_J_est"] - expected) > 0.01 * expected + 0.5, "energy_J_est",
                   lambda i: f"{num['energy_J_est'][i]:g} J disagrees with avg_power_W x latency_s = {expected[i]:g} J")

    rows = Rows(n)
    hardware, model_names = text(src, "hardware"), text(src, "model")
    devices, models = resolve_ids(rows, hardware, model_names, devices=DEVICES)
    rows.drop(num["energy_J_est"] == 0, ZERO_ENERGY)

    commit = text(src, "source").str.split().str[0]
    rows.flag((commit == SUPERSEDED_COMMIT).to_numpy() & (unit == "W").to_numpy() & (num["num_devices"] == 1), IDLE_FLAG)

    framework = text(src, "framework")
    arch = arch_columns(models.where(rows.keep))
    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": devices,
        "num_devices": num["num_devices"],
        "tensor_parallel": num["num_devices"],
        "pipeline_parallel": 1,
        "engine": _engine_versions(framework.map(engine_id), devices),
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "kv_cache": True,  # vLLM, TensorRT-LLM and DeepSpeed(-MII) all decode with a KV cache
        "batch_size": num["batch_size"],
        "prompt_tokens": num["input_len"],
        "generated_tokens": num["output_len"],
        "phase": "total",
        "level": "batch",
        "energy_j": num["energy_J_est"],
        "latency_s": num["latency_s"],
        "measurement": "power_x_latency",
        "metered_devices": metered_devices(commit.to_numpy(), unit.str.strip().to_numpy(), devices,
                                           np.nan_to_num(num["num_devices"], nan=1.0).astype(np.int64)),
    })
    return finish(raw, rows, FORMAT, Path(path), n)
