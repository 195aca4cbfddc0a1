"""Isolated batch runs as observations of the step physics (training side).

An isolated run (one batch of ``B`` requests, each with ``P`` prompt and ``G`` generated tokens,
nothing else on the GPUs) is one prefill step and ``G - 1`` decode steps. Its latency and energy
follow from :func:`llmco2.physics.step_physics.step_cost` on the shapes of both phases (the decode
phase's work averaged over its steps), so the same constants that describe a server's steady state
describe it too. These rows pin what serving averages cannot: the batch size is known, lengths are
known, and latency and power are read per run on several GPUs and engines (A100, H100, Gaudi2;
vLLM, TensorRT-LLM, DeepSpeed, Hugging Face transformers).

Which rows enter (per source: latency of every row with one; power, ``energy / latency``, only of
rows whose energy is usable, :func:`llmco2.data.usable.usable_rows`):

* Argonne LLM-Inference-Bench (whole runs, ``phase == total``);
* this project's H100 Hugging Face rows (decode phase, NVML);
* Splitwise (prefill and decode latency of Llama-2-70B / BLOOM-176B at TP 2-8; no energy);
* Delavande (HF decode latency of Llama-3.1-8B on an H100; its energies counted other GPUs);
* the collected rows (``../shared/data/collected``: vLLM 0.8 eager on an A100-80GB SXM and an A40,
  ML.ENERGY v1's HF runs where their prompt length is known), flagged rows left out as everywhere
  (:data:`llmco2.data.usable.UNRELIABLE_FLAGS`), bitsandbytes rows left out
  (:data:`UNMODELLED_QUANTISATION`) and host-bound runs left out (:data:`HOST_BOUND_FILES`: the
  thesis rows on four A100-PCIe-40GB).

A batch whose KV cache does not fit beside the weights cannot run at once under a continuous-batching
engine: it keeps the sequences that fit resident and the others wait (vLLM, TensorRT-LLM and DeepSpeed
page their caches; a static-batching engine would have run out of memory instead). Such a row is
costed as the waves of resident sequences it takes (:func:`resident_sequences`): Argonne's Llama-2-7B
at batch 64 with 1,024 + 1,024 tokens holds 20 sequences on an A100-40GB, and energy_code_eval's
CodeLlama-34B in bf16 with 512 generated tokens 35 on an A100-80GB, whatever its cap.

Engine versions come from the importers (Argonne's vLLM rows are ``vllm-v0``, its Gaudi2 DeepSpeed
rows ``optimum-habana``: :mod:`llmco2.data.importers.argonne`). Splitwise does not name its engine: its rows run as the catalog's ``unknown`` engine,
whose overheads the fit may set from them but which are never shipped (an unknown engine keeps its
catalog priors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from llmco2.analytic.model import sequences_at_once
from llmco2.data.dataset import EnergyData, energy_data
from llmco2.data.scope import node_wide
from llmco2.data.usable import usable_rows
from llmco2.physics.step_fit import Observation
from llmco2.physics.step_physics import StepParams, overhead_arrays, step_cost
from llmco2.physics.step_work import StepShapes, step_shapes
from llmco2.specs import get_engine
from llmco2.specs.engines import GPU_MEMORY_UTILIZATION

log = logging.getLogger(__name__)

#: Sources whose isolated runs enter the fit, and the phases they report.
SOURCES = ("argonne", "h100_hf", "splitwise", "delavande", "collected", "llmco2")
#: Weight quantisations whose kernels the analytic engine does not model: bitsandbytes dequantises the
#: weights before every 16-bit product, which is slower than fp16, while the engine would run its int8
#: weights at the int8 peak; HQQ's default backend dequantises too (the collected vLLM rows in HQQ ran
#: at about 0.35x the speed the engine gives 4-bit weights) (``quantisation`` column of the canonical table).
UNMODELLED_QUANTISATION = ("bnb-int8", "bnb-nf4", "bnb-fp4", "hqq", "other")
#: Source files whose runs the host, not the GPU, sets, with the reason (``source_file`` -> reason).
HOST_BOUND_FILES = {
    "hb_thesis_a100pcie.csv": "HF generate with accelerate on four processes: about 75 ms per decode step of a 1B model "
                              "whose GPU work takes about 5 ms (fp32 weights, batch 16); the host's speed, which no catalog "
                              "describes, sets latency and the GPUs mostly wait",
}
#: Sources whose energy is not usable for power (latency only), with the reason.
LATENCY_ONLY = {"splitwise": "latency only", "delavande": "codecarbon counted other GPUs of the node"}
SPLITWISE_ENGINE = "unknown"


@dataclass(frozen=True)
class IsolatedRows:
    """Modelled isolated rows: the canonical rows kept, their prefill and decode step shapes and
    the number of decode steps of each (0 where the row is a prefill). A batch larger than its
    KV cache holds runs as ``waves`` batches of the sequences that fit, one after the other (its
    shapes are those of one such batch)."""

    rows: pd.DataFrame
    prefill: StepShapes
    decode: StepShapes
    decode_steps: np.ndarray
    has_prefill: np.ndarray
    usable_energy: np.ndarray
    waves: np.ndarray  # B / resident sequences (:func:`resident_sequences`): 1 where the whole batch runs at once
    # rows whose energy would be usable but sums devices the run did not use (llmco2.data.scope): no fit
    # reads it; a comparison at the reading's scope may
    node_wide_energy: np.ndarray

    def cost(self, p: StepParams) -> tuple[np.ndarray, np.ndarray]:
        """(latency s, energy J) of every row under ``p``."""
        pre = step_cost(self.prefill, p, overhead_arrays(self.prefill.engines, p))
        dec = step_cost(self.decode, p, overhead_arrays(self.decode.engines, p))
        lat = np.where(self.has_prefill, pre.time_s, 0.0) + self.decode_steps * dec.time_s
        energy = np.where(self.has_prefill, pre.energy_j, 0.0) + self.decode_steps * dec.energy_j
        return lat * self.waves, energy * self.waves

    def observations(self, mask: np.ndarray | None = None) -> list[Observation]:
        """Latency and power observation groups per source of the rows under ``mask``."""
        mask = np.ones(len(self.rows), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        cache: dict = {}

        def cost(p: StepParams) -> tuple[np.ndarray, np.ndarray]:
            if cache.get("p") is not p:
                cache["p"], cache["c"] = p, self.cost(p)
            return cache["c"]

        lat_meas = pd.to_numeric(self.rows["latency_s"], errors="coerce").to_numpy(float)
        energy_meas = pd.to_numeric(self.rows["energy_j"], errors="coerce").to_numpy(float)
        source = self.rows["source"].to_numpy()
        out = []
        device = self.rows["device"].astype(str).to_numpy()
        group = np.array([f"{s} {d}" for s, d in zip(source, device, strict=True)])
        for src in sorted(set(group[mask])):  # one group per source and GPU: every GPU weighs the same
            sel = mask & (group == src) & np.isfinite(lat_meas) & (lat_meas > 0)
            if sel.sum() >= 5:
                out.append(Observation(f"{src} latency", lat_meas[sel], lambda p, s=sel: cost(p)[0][s]))
            psel = sel & self.usable_energy & np.isfinite(energy_meas) & (energy_meas > 0)
            if psel.sum() >= 5:
                out.append(Observation(f"{src} power", energy_meas[psel] / lat_meas[psel],
                                       lambda p, s=psel: cost(p)[1][s] / cost(p)[0][s]))
        return out


def _engine_ids(rows: pd.DataFrame) -> list[str]:
    out = []
    for src, eng in zip(rows["source"].astype(str), rows["engine"].astype(str), strict=True):
        out.append(SPLITWISE_ENGINE if src == "splitwise" else eng)
    return out


def isolated_rows(table: pd.DataFrame, host_bound: bool = False) -> IsolatedRows:
    """Model the isolated rows of ``table`` (a canonical table, e.g. from
    :func:`llmco2.data.importers.import_all`) that :data:`SOURCES` names; ``host_bound`` keeps the
    runs of :data:`HOST_BOUND_FILES` (never fitted on; a validation may still predict them)."""
    keep = table["source"].isin(SOURCES) & (table["level"] != "steady_state")
    if "quantisation" in table.columns:
        keep &= ~table["quantisation"].isin(UNMODELLED_QUANTISATION).fillna(False).to_numpy(bool)
    if "source_file" in table.columns and not host_bound:
        keep &= ~table["source_file"].isin(list(HOST_BOUND_FILES)).fillna(False).to_numpy(bool)
    table = table[keep].reset_index(drop=True)
    usable, _ = usable_rows(table)
    usable_ids = set(zip(*(usable[c].astype(str) for c in row_key(usable)), strict=True))
    data = energy_data(table, require_energy=False)
    rows = data.table.reset_index(drop=True)
    engines = _engine_ids(rows)
    items = [data.items[c] for c in data.config]
    phase = rows["phase"].astype(str).to_numpy()
    concurrency = resident_sequences(data, engines, phase)
    waves = np.array([it[1].batch_size for it in items], dtype=float) / concurrency
    items = [(a, r.replace(batch_size=int(c)), g) if c < r.batch_size else (a, r, g)
             for (a, r, g), c in zip(items, concurrency, strict=True)]
    gen = np.array([it[1].generated_tokens for it in items], dtype=float)
    steps = np.where(phase == "prefill", 0.0, np.maximum(gen - 1.0, 0.0))
    pre = step_shapes(items, "prefill")
    dec = step_shapes(items, "decode", np.maximum(steps, 1.0))
    pre = replace(pre, engines=engines)
    dec = replace(dec, engines=engines)
    ok = np.array([key in usable_ids for key in zip(*(rows[c].astype(str) for c in row_key(rows)), strict=True)])
    ok &= ~rows["source"].isin(list(LATENCY_ONLY)).to_numpy()
    wide = ok & node_wide(rows)  # a reading of devices the run did not use besides its own: latency only
    ok &= ~wide
    log.info("isolated rows: %d modelled (%s); %d run in waves their KV cache allows", len(rows), data.excluded,
             int((waves > 1).sum()))
    return IsolatedRows(rows, pre, dec, steps, phase != "decode", ok, waves, wide)


def resident_sequences(data: EnergyData, engines: list[str], phase: np.ndarray) -> np.ndarray:
    """Per row, the sequences that run at once: a continuous-batching engine with a paged KV cache
    (``continuous_batching`` in the engine catalog) keeps as many of a batch's ``B`` sequences
    resident as the cache holds at their full length ``P + G`` beside the weights
    (:data:`llmco2.specs.engines.GPU_MEMORY_UTILIZATION` of the GPU's memory), the rest waiting for
    them; all ``B`` where they fit, and in a prefill row or under an engine that batches statically."""
    analysis, totals = data.analysis()
    fit = sequences_at_once(totals.weight_bytes_per_gpu, totals.kv_cache_bytes_per_gpu, analysis.batch.mem_capacity_bytes,
                            analysis.batch.batch, GPU_MEMORY_UTILIZATION)[data.config]
    batch = np.array([data.items[c][1].batch_size for c in data.config], dtype=float)
    paged = np.array([get_engine(e).continuous_batching for e in engines], dtype=bool) & (phase != "prefill")
    return np.where(paged, fit, batch)


def tensor_parallel_engines(iso: IsolatedRows, mask: np.ndarray, min_rows: int = 5) -> list[str]:
    """Engines with at least ``min_rows`` tensor-parallel isolated rows under ``mask``: their own
    latency per all-reduce is fitted (:func:`fit_isolated_rows`)."""
    collectives = np.asarray(iso.decode.collectives) > 0
    engines = np.asarray(iso.decode.engines, dtype=object)
    sel = np.asarray(mask, dtype=bool) & collectives
    names, counts = np.unique(engines[sel], return_counts=True) if sel.any() else (np.array([]), np.array([]))
    return sorted(str(e) for e, c in zip(names, counts, strict=True) if c >= min_rows)


def row_key(table: pd.DataFrame) -> list[str]:
    """The columns that name one measured row of a canonical table: its source, file, row and
    phase (two files of one source, such as the collected ones, number their rows alike)."""
    return [c for c in ("source", "source_file", "source_row", "phase") if c in table.columns]


#: Bounds of the isolated-run fit that differ from :data:`llmco2.physics.step_fit.BOUNDS`: with no busy
#: term (see :func:`fit_isolated`), compute utilisation is the model's only measure of activity.
ISOLATED_BOUNDS: dict[str, tuple[float, float]] = {}


def fit_isolated(table: pd.DataFrame, source: str = "") -> StepParams | None:
    """Step constants fitted on the isolated data-centre runs of ``table`` (a canonical table),
    with the overheads of every engine those runs name; ``None`` when no source of
    :data:`SOURCES` has a group of at least five rows to fit on. The grouped-GEMM efficiency of
    mixture-of-experts layers (``eta_expert``) stays at 1: these runs hold one or two MoE models on
    three software stacks (vLLM, TensorRT-LLM, DeepSpeed on Gaudi2), too few to tell a property of
    the expert kernels from one of a stack; held out, fitting it made the H100 worse
    (``experiments/results/serving_physics.md``). The busy power (``power_busy``) stays at 0 too:
    at batches of 1-64 a kernel's running share follows its memory traffic, so these runs cannot
    tell it from the per-byte energy; fitted here, it moved held-out A100 request-level median APE
    from 12.8% to 14.0% (seed 0). The energy per operation keeps the bound of the joint fit (at most
    1.3 pJ at 7 nm, what an A100's whole board spends per operation at its peak): at 3 pJ, the
    former bound, the fit without the A100-80GB rows (the only isolated runs with compute-bound
    batches of 128-512) reached it and over-predicted their power by 33% held out
    (``experiments/step_lodo.py``)."""
    table = table.drop_duplicates(subset=row_key(table))
    if not table["source"].isin(SOURCES).any():
        return None
    iso = isolated_rows(table)
    if not iso.observations():
        return None
    return fit_isolated_rows(iso, source=source or f"isolated runs of {sorted(set(iso.rows['source']))}")


def fit_isolated_rows(iso: IsolatedRows, mask: np.ndarray | None = None, source: str = "") -> StepParams:
    """Step constants fitted on the isolated rows under ``mask`` (default: all) with
    :func:`fit_isolated`'s settings (no expert efficiency, no busy power, :data:`ISOLATED_BOUNDS`),
    and the overheads of the engines those rows ran (every other engine keeps its catalog priors).
    The latency per all-reduce is each engine's own where its rows were tensor-parallel
    (:func:`tensor_parallel_engines`); the global figure keeps its base value: fitted, it was set by
    whichever engine's multi-GPU rows a split left (Gaudi2's under optimum-habana when the H100 was
    held out) and reached its 200 us bound in one seed of three.
    A leave-one-GPU-out fit passes the mask of every other GPU's rows."""
    from llmco2.physics.step_bounds import BOUNDS
    from llmco2.physics.step_fit import fit_step_params

    mask = np.ones(len(iso.rows), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    engines = sorted({iso.decode.engines[i] for i in np.flatnonzero(mask)})
    fitted, report = fit_step_params(iso.observations(mask), engines, source=source or "isolated runs", online_engines=[],
                                     names=tuple(n for n in BOUNDS if n not in ("eta_expert", "power_busy", "collective_s")),
                                     bounds=ISOLATED_BOUNDS, collective_engines=tensor_parallel_engines(iso, mask))
    log.info("step constants fitted on %d isolated rows: %s", int(mask.sum()), report)
    return fitted
