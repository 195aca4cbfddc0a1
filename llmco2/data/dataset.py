"""From canonical energy rows to analysable configurations, graphs and per-phase targets.

Rows that describe the same configuration (one prefill and one decode row of a request, or
repeated measurements) share one graph. A row can be modelled when its model and device are in the
catalogs and it has integral batch, prompt and generated tokens; rows that cannot (e.g.
steady-state server averages without prompt lengths) are excluded and counted by reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis, LayerBatch, analyze_layers
from llmco2.analytic.model import ModelTotals, model_totals
from llmco2.data.scope import NODE_WIDE_REASON, node_wide
from llmco2.errors import InvalidInputError
from llmco2.graph.features import GraphArrays, build_graph_arrays
from llmco2.specs import GPU, ModelArch, Request, engine_id, get_gpu, get_model
from llmco2.specs.requests import check_expert_parallel

log = logging.getLogger(__name__)

PHASE_INDEX = {"prefill": 0, "decode": 1, "total": 2}
BITS_TO_DTYPE = {32: "fp32", 16: "fp16", 8: "int8", 4: "int4"}
CONFIG_COLUMNS = ("model", "device", "engine", "num_devices", "tensor_parallel", "batch_size", "prompt_tokens", "generated_tokens",
                  "weight_bits", "kv_bits", "flash_attention", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                  "num_kv_heads")
ARCH_OVERRIDES = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")


@dataclass
class EnergyData:
    """Modelled rows of a canonical table.

    Attributes:
        table: the kept rows (original columns), in order.
        config: configuration index of each kept row into ``items``.
        phase: 0 prefill, 1 decode, 2 total, per kept row.
        energy_j: measured energy per kept row.
        items: one (arch, request, gpu) per distinct configuration.
        excluded: reason -> number of rows left out.
    """

    table: pd.DataFrame
    config: NDArray[np.int64]
    phase: NDArray[np.int64]
    energy_j: NDArray[np.float64]
    items: list[tuple[ModelArch, Request, GPU]]
    excluded: dict[str, int] = field(default_factory=dict)
    _analysis: tuple[LayerAnalysis, ModelTotals] | None = None
    _graphs: GraphArrays | None = None

    def analysis(self) -> tuple[LayerAnalysis, ModelTotals]:
        """Analytic costs of every configuration (computed once)."""
        if self._analysis is None:
            a = analyze_layers(LayerBatch.from_items(self.items, validate=False))
            self._analysis = (a, model_totals(a))
        return self._analysis

    def graphs(self) -> GraphArrays:
        """Graphs of every configuration (built once)."""
        if self._graphs is None:
            self._graphs = build_graph_arrays(*self.analysis())
        return self._graphs

    def rows(self, positions: NDArray[np.int64]) -> EnergyData:
        """The kept rows at ``positions`` (configurations re-indexed, analysis recomputed lazily)."""
        positions = np.asarray(positions, dtype=np.int64)
        used, new_config = np.unique(self.config[positions], return_inverse=True)
        return EnergyData(self.table.iloc[positions].reset_index(drop=True), new_config.astype(np.int64),
                          self.phase[positions], self.energy_j[positions], [self.items[i] for i in used], dict(self.excluded))


def from_items(items: list[tuple[ModelArch, Request, GPU]]) -> EnergyData:
    """Configurations without measurements (for prediction): one row per item, phase "total"."""
    n = len(items)
    return EnergyData(pd.DataFrame(index=range(n)), np.arange(n, dtype=np.int64), np.full(n, 2, dtype=np.int64),
                      np.full(n, np.nan), list(items))


def _int(value: object) -> int | None:
    if value is None or pd.isna(value):
        return None
    f = float(value)  # type: ignore[arg-type]
    return int(f) if f.is_integer() else None


def _row_item(row: pd.Series, models: dict, gpus: dict) -> tuple[ModelArch, Request, GPU] | str:
    """The (arch, request, gpu) of a row, or the reason it cannot be modelled."""
    try:
        base = models.setdefault(row["model"], get_model(str(row["model"])))
        gpu = gpus.setdefault(row["device"], get_gpu(str(row["device"])))
    except InvalidInputError as exc:
        return f"not in the catalogs ({exc})"
    batch, prompt, gen = _int(row.get("batch_size")), _int(row.get("prompt_tokens")), _int(row.get("generated_tokens"))
    if batch is None or prompt is None or gen is None:
        return "no integral batch size, prompt and generated tokens (e.g. steady-state averages)"
    if batch < 1 or prompt < 1 or gen < 1:
        return "zero tokens or batch"
    changes = {c: _int(row.get(c)) for c in ARCH_OVERRIDES}
    changes = {c: v for c, v in changes.items() if v is not None and v != getattr(base, c)}
    if changes:
        if "num_heads" in changes or "hidden_size" in changes:
            heads = changes.get("num_heads", base.num_heads)
            hidden = changes.get("hidden_size", base.hidden_size)
            if base.head_dim * base.num_heads == base.hidden_size and hidden % heads == 0:
                changes["head_dim"] = hidden // heads
        try:
            base = base.with_overrides(**changes)
        except InvalidInputError as exc:
            return f"invalid architecture ({exc})"
    limit = pd.to_numeric(row.get("power_limit_w"), errors="coerce")
    if pd.notna(limit) and 0 < float(limit) != gpu.tdp_w:  # the run's enforced limit caps its power
        gpu = replace(gpu, tdp_w=float(limit))
    bits = _int(row.get("weight_bits")) or 16
    kv_bits = _int(row.get("kv_bits"))
    n = _int(row.get("num_devices")) or 1
    tp = _int(row.get("tensor_parallel"))
    # > 1: the MoE layers ran expert-parallel. ML.ENERGY v3's rows: attention TP = EP = num_gpus, as the importer leaves
    # tensor_parallel null (ml-energy/benchmark starts vLLM with --tensor-parallel-size num_gpus --enable-expert-parallel
    # unless a config names --data-parallel-size: mlenergy/benchmark/llm/benchmark.py)
    ep = _int(row.get("expert_parallel"))
    try:
        req = Request(batch_size=batch, prompt_tokens=prompt, generated_tokens=gen, num_gpus=n,
                      tensor_parallel=tp if tp else None if n == 1 else n, expert_parallel=ep if ep and ep > 1 else None,
                      weight_dtype=BITS_TO_DTYPE.get(bits, "fp16"),
                      kv_dtype=BITS_TO_DTYPE.get(kv_bits, None) if kv_bits in (8, 16, 32) else None,
                      flash_attention=bool(row.get("flash_attention")) if pd.notna(row.get("flash_attention")) else True,
                      engine=engine_id(row.get("engine") if pd.notna(row.get("engine")) else None))
        check_expert_parallel(req, base)
        if not gpu.supports(req.compute_dtype):  # e.g. 16-bit on an INT8-only NPU: the measured kernels ran at its INT8 rate
            alt = "int8" if gpu.supports("int8") else next(iter(gpu.peak_dense_tops))
            req = req.replace(compute_dtype=alt)
    except InvalidInputError as exc:
        return f"invalid request ({exc})"
    return base, req, gpu


def energy_data(table: pd.DataFrame, require_energy: bool = True, node_wide_readings: bool = False) -> EnergyData:
    """Model the rows of a canonical table; rows without positive energy (when required) or that
    cannot be analysed are excluded and counted; readings that sum devices besides those each
    run used are excluded when energy is required (:func:`llmco2.data.scope.node_wide`), unless
    ``node_wide_readings`` keeps them (a test part compared at each reading's scope)."""
    excluded: dict[str, int] = {}
    keep = np.ones(len(table), dtype=bool)
    if require_energy:
        wide = node_wide(table) & (not node_wide_readings)
        if wide.any():
            excluded[NODE_WIDE_REASON] = int(wide.sum())
        keep &= ~wide
        energy = pd.to_numeric(table["energy_j"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        infinite = np.isinf(energy) & ~wide
        bad = ~(energy > 0) & ~np.isinf(energy) & ~wide
        if bad.any():
            excluded["no positive measured energy"] = int(bad.sum())
        if infinite.any():
            excluded["measured energy not finite"] = int(infinite.sum())
        keep &= ~bad & ~infinite
    cols = [c for c in CONFIG_COLUMNS if c in table.columns]
    keys = table[cols].astype("string").fillna("<NA>")
    if "expert_parallel" in table.columns:  # part of the configuration where above 1 (null and 1 are the same layout)
        ep = pd.to_numeric(table["expert_parallel"], errors="coerce")
        keys["expert_parallel"] = ep.where(ep > 1).astype("string").fillna("<NA>")
    key_tuples = list(map(tuple, keys.to_numpy()))
    models: dict = {}
    gpus: dict = {}
    index_of: dict[tuple, int] = {}
    items: list[tuple[ModelArch, Request, GPU]] = []
    config = np.full(len(table), -1, dtype=np.int64)
    reasons: dict[tuple, str] = {}
    for pos in np.flatnonzero(keep):
        key = key_tuples[pos]
        if key in index_of:
            config[pos] = index_of[key]
            continue
        if key in reasons:
            excluded[reasons[key]] = excluded.get(reasons[key], 0) + 1
            keep[pos] = False
            continue
        result = _row_item(table.iloc[pos], models, gpus)
        if isinstance(result, str):
            reasons[key] = result.split(" (")[0]
            excluded[reasons[key]] = excluded.get(reasons[key], 0) + 1
            keep[pos] = False
            continue
        index_of[key] = len(items)
        config[pos] = len(items)
        items.append(result)
    kept = np.flatnonzero(keep)
    phase = table["phase"].astype("string").map(PHASE_INDEX).to_numpy()[kept].astype(np.int64)
    energy = pd.to_numeric(table["energy_j"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)[kept]
    if excluded:
        log.info("left out %s", ", ".join(f"{n} rows: {r}" for r, n in excluded.items()))
    return EnergyData(table.iloc[kept].reset_index(drop=True), config[kept], phase, energy, items, excluded)
