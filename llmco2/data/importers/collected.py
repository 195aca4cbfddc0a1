"""Measurements collected from public repositories in one common layout
(``shared/data/collected/*.csv``: ``energy_code_eval.csv``, ``hb_thesis_a100pcie.csv``,
``mlenergy_v1_legacy.csv``).

Columns: ``source_repo, source_path, source_commit, model_hf, gpu, num_gpus, tensor_parallel,
engine, dtype, batch_size, prompt_tokens, generated_tokens, phase, energy_j, latency_s,
avg_power_w, notes``. One row = one batch of ``batch_size`` requests; ``energy_j`` (J) is the GPU
energy of that batch on all ``num_gpus`` GPUs, ``latency_s`` (s) its wall time, ``avg_power_w``
(W) the mean power per GPU. Where a source reported a run of several sequential waves, the
converted row is the run divided by the number of waves (the raw totals are in ``notes``).
Every row is phase ``total``. ``source_row`` is the line of the collected CSV (line 1 = header),
``source`` is ``collected`` (the three files are told apart by ``source_file``).

The judgements are read from each row's strings and ``notes``, not from the file name, so that a
new file of the same layout gets the same treatment:

* **FLAG rows.** A note containing ``FLAG:`` marks a row that failed the collector's physics check;
  it is kept and flagged (:data:`UNRELIABLE`, energy not to be fitted): ``avg power ... is near
  idle`` -> ``power_near_idle`` (energy_code_eval: DeepSeek-Coder-V2-Lite at 59-79 W on an
  A100, launch/CPU-bound), ``avg power ... > TDP ...`` -> ``power_exceeds_tdp`` (hb_thesis: 3
  rows at 268-295 W per 250 W GPU), any other ``FLAG:`` text -> ``flagged_in_source`` (with a
  warning). ``power_exceeds_tdp`` is already one of the flags that ``usable_rows``
  (``llmco2.data.usable.UNRELIABLE_FLAGS``) leaves out of fits; ``power_near_idle`` and
  ``flagged_in_source`` have to be listed there too (and in ``exclude_flags`` of a data config).
* **Batch cap** (energy_code_eval): ``batch_size`` is vLLM's ``max_num_seqs`` (``min(mns, n)``),
  a cap on the concurrency, not the concurrency itself (lower when the KV cache is short). Kept
  as ``batch_size`` and flagged ``batch_is_cap`` (informational: the rows stay usable).
* **Mean request** (mlenergy_v1_legacy): each row is the mean over about 3,000 ShareGPT prompts
  run one at a time (batch 1): ``level`` ``request`` (the mean request), ``generated_tokens`` the
  mean response length. Prompt lengths were not published (ShareGPT first turn + a system
  prompt): ``prompt_tokens`` stays null (no sourced estimate) and the rows are flagged
  ``prompt_tokens_unknown``. Every other row is ``level`` ``batch``.
* **Measurement** from the notes: ``CodeCarbon`` -> ``codecarbon`` (hb_thesis: the converted
  row uses one of the four per-process readings, each of which meters all four GPUs, divided by
  the batches of the run), ``NVML`` / ``Zeus`` -> ``nvml_energy`` (energy_code_eval: NVML energy
  counter of GPU 0, the only GPU; ML.ENERGY v1: Zeus, which reads the NVML energy counter).
* **Parallelism.** Every row of these files has ``num_gpus`` = ``tensor_parallel`` = 1; then
  ``pipeline_parallel``, ``data_parallel`` and ``expert_parallel`` are 1 (and left null for
  multi-GPU rows, which the layout does not describe). The hb_thesis runs were data parallel:
  four replicas (accelerate, NO_SHARD, one full model per GPU) on four GPUs of one host, and the
  converted row is one replica's batch on one GPU (``num_devices`` 1, ``data_parallel`` 1); its
  energy is the run's four-GPU energy divided by the run's batches, i.e. the mean per GPU.
* **Consistency.** ``avg_power_w x num_gpus`` must equal ``energy_j / latency_s`` within 2% + 1 W
  (it does on every row of the three files); a row that does not, or with a number that is not
  one, raises with file and line.

* **Enforced power limit.** Where a source's runs were held below the catalog part's limit
  (:data:`ENFORCED_LIMITS_W`, keyed by repository and GPU name, with the evidence), ``power_limit_w``
  carries the limit; the physics caps the rows' power there.

Catalog mappings (the evidence is at each table): GPUs :data:`DEVICES`, engines
:func:`engine_for`, precision :func:`precision_for`, models :data:`MODELS` (fine-tunes with the
published architecture of a catalog model) and otherwise the catalog's own name resolution.
A GPU or model the catalog does not have drops the row, counted under ``device not in catalog:
<name>`` / ``model not in catalog: <name>``.
"""

from __future__ import annotations

import logging
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
    gpu_id,
    model_id,
    number,
    read_csv,
    text,
)
from llmco2.data.schema import PHASES

log = logging.getLogger(__name__)

FORMAT = "collected"
REQUIRED = ("source_repo", "source_path", "source_commit", "model_hf", "gpu", "num_gpus", "tensor_parallel", "engine",
            "dtype", "batch_size", "prompt_tokens", "generated_tokens", "phase", "energy_j", "latency_s", "avg_power_w",
            "notes")
ZERO_ENERGY = "energy_j == 0"
#: Relative and absolute tolerance of ``avg_power_w x num_gpus`` against ``energy_j / latency_s``.
POWER_TOLERANCE = (0.02, 1.0)

# -- flags ------------------------------------------------------------------------------------------
NEAR_IDLE = "power_near_idle"
EXCEEDS_TDP = "power_exceeds_tdp"
FLAGGED = "flagged_in_source"
BATCH_CAP = "batch_is_cap"
PROMPT_UNKNOWN = "prompt_tokens_unknown"
VARIANT_UNSTATED = "gpu_variant_unstated"
DEVICE_PROXY = "device_proxy"
BITS_ASSUMED = "weight_bits_assumed"
MULTI_STEP = "vllm_multi_step"
CHUNKED_PREFILL = "vllm_chunked_prefill"
#: Flags that mark a row's energy as unusable for fitting (a ``FLAG:`` note of the collector).
UNRELIABLE = (NEAR_IDLE, EXCEEDS_TDP, FLAGGED)
#: ``FLAG:`` texts -> flag; any other ``FLAG:`` text is flagged :data:`FLAGGED`.
FLAG_PATTERNS = ((re.compile(r"near idle", re.I), NEAR_IDLE),
                 (re.compile(r">\s*TDP|above (?:the )?(?:power )?limit", re.I), EXCEEDS_TDP))

# -- devices ----------------------------------------------------------------------------------------
#: Source GPU name -> catalog ids in order of preference: the first one the GPU catalog has is used
#: (a later one is a stand-in and the row is flagged ``device_proxy``); none -> the row is dropped.
DEVICES: dict[str, tuple[str, ...]] = {
    # energy_code_eval (Orange "marcel" cluster, slurm/*.sh: --gpus-per-node=GA100:1
    # --constraint=gpu_mem_80, so an 80 GB A100). SXM4 rather than PCIe: the run's own power logs
    # (results/*/power/*.csv @476280cc, 0.1 s NVML samples) reach 454 W and exceed 300 W in 1,840
    # of 2,405 runs, above the 300 W limit of the A100 80GB PCIe and within the SXM4's 400 W.
    # (Their mean power is nonetheless held at 300 W: :data:`ENFORCED_LIMITS_W`.)
    "A100-SXM4-80GB": ("a100-80gb",),
    "A40": ("a40",),
    # hb_thesis: 4 x A100-PCIE-40GB (250 W), as the source's results name them.
    "A100-PCIE-40GB": ("a100-pcie-40gb",),
    # ML.ENERGY leaderboard v1 (2023). Its about page (ml-energy/leaderboard-v2, LEADERBOARD.md
    # @55aeee4c and @1a899dbb, July 2023, while these results were produced) thanks "Chameleon Cloud
    # for the A100 80GB GPU nodes (`gpu_a100_pcie`)": Chameleon's gpu_a100_pcie nodes carry NVIDIA
    # A100 80GB PCIe (300 W, 1,935 GB/s). Later versions of the page only say "NVIDIA A100 GPU" and
    # the per-row files never name the variant, hence gpu_variant_unstated. The catalog's
    # a100-pcie-80gb is used (a100-80gb, the SXM4 part with a 400 W limit, only as a stand-in flagged
    # device_proxy for a catalog without it). The generic "a100" alias would also give
    # a100-80gb, but only by accident.
    "A100 (variant unstated)": ("a100-pcie-80gb", "a100-80gb"),
    # The same page thanks "CloudLab for the V100 GPU nodes (`r7525`)": CloudLab's r7525 nodes
    # (Clemson) are listed in CloudLab's hardware documentation (docs.cloudlab.us/hardware.html) with
    # two NVIDIA GV100GL, i.e. Tesla V100S PCIe 32GB (250 W, 1,134 GB/s), which the collector's "32GB"
    # agrees with. The catalog's v100s-pcie-32gb is used (v100-pcie-32gb,
    # same board power and memory, 900 GB/s, lower clocks, only as a stand-in flagged device_proxy). Not v100 (the SXM2 16GB part: the 13B fp16
    # models of these rows need 26 GB).
    "V100-32GB (variant unstated)": ("v100s-pcie-32gb", "v100-pcie-32gb"),
}

#: (source repository, source GPU name) -> the power limit (W per GPU) its runs were held to, where the
#: runs' own readings show one below the catalog part's limit; written to ``power_limit_w`` (the physics
#: caps power there instead of at the catalog's ``tdp_w``).
ENFORCED_LIMITS_W: dict[tuple[str, str], float] = {
    # energy_code_eval's A100 runs are held at 300 W, not at the SXM4's 400 W: the mean power of
    # every one of the 1,437 rows (energy_j / latency_s of a run) is at most 299.1 W, and 354 of them
    # lie within 290-300 W with none above (a wall, where an uncapped 400 W part running CodeLlama-34B
    # in bf16 at 512 sequences would pass it); the runs' 0.1 s NVML samples (results/*/power/*.csv
    # @476280cc) hold a median of 297-302 W through the heavy runs, with excursions to 330-450 W of
    # the kind a power-capped board shows between limiter updates. Whether the board is an SXM4 with
    # its limit lowered or the 300 W A100 80GB PCIe, the limit its energy is capped at is 300 W.
    ("nhathuy25/energy-code-eval", "A100-SXM4-80GB"): 300.0,
}

# -- models -----------------------------------------------------------------------------------------
#: Fine-tunes whose published architecture is that of a catalog model (the collected notes name
#: each leaderboard model's base). LLaMA-1 13B (hidden 5120, MLP 13824, 40 layers, 40 heads,
#: vocabulary 32,000: huggyllama/llama-13b config.json) has the dimensions of Llama-2-13B
#: (meta-llama/Llama-2-13b-hf config.json; only the 4,096-token context differs), so its fine-tunes
#: map to llama2-13b. OpenLLaMA-7B reproduces the LLaMA-7B architecture and vocabulary size
#: (openlm-research/open_llama_7b config.json). Fine-tunes with another vocabulary are not mapped
#: (BiLLa-7B extends the LLaMA vocabulary with Chinese tokens; XGen-7B has a 51,200-token one).
MODELS = {
    "BAIR/koala-7b": "llama-7b",
    "lmsys/vicuna-7B": "llama-7b",
    "tatsu-lab/alpaca-7B": "llama-7b",
    "project-baize/baize-v2-7B": "llama-7b",
    "h2oai/h2ogpt-gm-oasst1-en-2048-open-llama-7b-preview-300bt-v2": "llama-7b",
    "metaai/llama-13B": "llama2-13b",
    "BAIR/koala-13b": "llama2-13b",
    "lmsys/vicuna-13B": "llama2-13b",
    "camel-ai/CAMEL-13B-Combined-Data": "llama2-13b",
    "nomic-ai/gpt4all-13b-snoozy": "llama2-13b",
    "openaccess-ai-collective/manticore-13b-chat-pyg": "llama2-13b",
}
#: Why a model without a catalog id is not one (appended to its drop reason).
MODEL_NOTES = {
    "RWKV/rwkv-raven-7b": "RNN, not a transformer",
    "lmsys/fastchat-t5-3b-v1.0": "encoder-decoder",
    "Neutralzz/BiLLa-7B-SFT": "LLaMA-7B with an extended vocabulary",
    "Salesforce/xgen-7b-8k-inst": "LLaMA architecture with a 51,200-token vocabulary",
}


# -- engines and precision ----------------------------------------------------------------------------
def engine_for(name: str) -> tuple[str, tuple[str, ...]] | None:
    """Catalog engine id of a source's engine string and the flags it implies, or ``None``.

    * vLLM with ``enforce_eager`` -> ``vllm-eager``. energy_code_eval ran vLLM 0.8.4 with the V0
      engine and ``enforce_eager``; the catalog has no "V0 and eager" entry. ``vllm-eager``
      (``cuda_graphs = false``: every decode kernel launched from Python) is the closer one:
      without CUDA graphs the per-kernel launch cost dominates a decode step at small batches,
      whereas ``vllm-v0`` assumes CUDA-graph replay (2 us per kernel instead of 10). What V0 adds
      (per-step and per-sequence Python in the scheduler loop) enters through the refitted step and
      sequence overheads. The multi-step scheduler and chunked prefill variants are flagged
      ``vllm_multi_step`` / ``vllm_chunked_prefill`` (engine options the engine id does not carry).
    * vLLM without ``enforce_eager``: ``vllm-v0`` for releases before 0.8 (V0 was the default
      engine), ``vllm`` otherwise.
    * HF transformers (``generate``, accelerate data parallel) and FastChat's model code (which
      runs transformers models in PyTorch eager mode with a dynamic KV cache) -> ``hf``.
    """
    low = name.lower()
    if "vllm" in low:
        flags = tuple(flag for word, flag in (("multi-step", MULTI_STEP), ("chunked prefill", CHUNKED_PREFILL)) if word in low)
        if "eager" in low:  # enforce_eager
            return "vllm-eager", flags
        version = re.search(r"vllm\s+v?(\d+)\.(\d+)", low)
        if version and (int(version[1]), int(version[2])) < (0, 8):
            return "vllm-v0", flags
        return "vllm", flags
    if "transformers" in low or "fastchat" in low:
        return "hf", ()
    return None


#: (pattern on the lowercased dtype string, weight bits, quantisation, KV-cache bits). First match wins.
#: vLLM runs AWQ, GPTQ and HQQ checkpoints with weight-only kernels (AWQ/GPTQ Marlin, HQQ Marlin on
#: Ampere) in fp16 activations, so their KV cache is 16-bit; bitsandbytes runs its int8 and 4-bit
#: weights with a float16 compute dtype ("compute float16" in the hb_thesis strings).
_PRECISION = (
    (re.compile(r"\bawq\b"), 4, "awq", 16),
    (re.compile(r"\bgptq\b"), 4, "gptq", 16),
    (re.compile(r"\bhqq\b"), 4, "hqq", 16),
    (re.compile(r"(bitsandbytes|\bbnb\b).*(int8|8-?bit)|(int8|8-?bit).*(bitsandbytes|\bbnb\b)"), 8, "bnb-int8", 16),
    (re.compile(r"(bitsandbytes|\bbnb\b).*fp4|fp4.*(bitsandbytes|\bbnb\b)"), 4, "bnb-fp4", 16),
    # "4-bit bitsandbytes (compute float16)" (hb_thesis) does not name the 4-bit type: DATA.md says
    # nf4, and the thesis's quant_4bit configuration sets bnb_4bit_quant_type: nf4. nf4 and fp4 take
    # the same kernel path (4-bit tiles dequantised to fp16 before each matmul).
    (re.compile(r"nf4|(bitsandbytes|\bbnb\b).*4-?bit|4-?bit.*(bitsandbytes|\bbnb\b)"), 4, "bnb-nf4", 16),
    (re.compile(r"^(float32|fp32)\b"), 32, "none", 32),
    (re.compile(r"^(float16|fp16|half)\b"), 16, "none", 16),
    (re.compile(r"^(bf16|bfloat16)\b"), 16, "none", 16),
)
_STATED_BITS = re.compile(r"(?:int|w)(\d)\b|(\d)-?bits?\b")


def precision_for(dtype: str) -> tuple[int, str, int, bool] | None:
    """``(weight_bits, quantisation, kv_bits, bits_assumed)`` of a source's dtype string, or ``None``.

    The bit width of a quantised checkpoint is read from the string (``int4``, ``4bit``, ``w4a16``);
    where the string does not state it (``gptq (bits not stated; TheBloke-style, likely int4)``) the
    method's usual 4 bits are assumed and ``bits_assumed`` is true (TheBloke's GPTQ repositories'
    main branches hold the 4-bit, group-size-128 quantisation)."""
    low = dtype.strip().lower()
    for pattern, bits, method, kv in _PRECISION:
        if pattern.search(low):
            if method in ("gptq", "awq", "hqq"):
                stated = _STATED_BITS.search(low)
                if stated is None or "not stated" in low:  # "likely int4" is the collector's guess
                    return bits, method, kv, True
                return int(stated[1] or stated[2]), method, kv, False
            return bits, method, kv, False
    return None


def _devices(rows: Rows, names: pd.Series) -> pd.Series:
    """Catalog id per row (:data:`DEVICES`, else the catalog's name resolution); rows whose GPU has
    no catalog id are dropped and counted; stand-ins are flagged ``device_proxy``."""
    from llmco2.specs import gpu_catalog

    ids = set(gpu_catalog().ids)
    resolved: dict[str, str | None] = {}
    proxies: set[str] = set()
    for name in pd.unique(names):
        candidates = DEVICES.get(name)
        if candidates is None:
            resolved[name] = gpu_id(name)
            continue
        found = next((c for c in candidates if c in ids), None)
        resolved[name] = found
        if found is not None and found != candidates[0]:
            proxies.add(name)
    devices = names.map(resolved)

    def note(name: str) -> str:
        candidates = DEVICES.get(name)
        return f"the catalog has none of {', '.join(candidates)}" if candidates else ""

    rows.drop_unresolved(devices, names, "device", note)
    rows.flag(names.isin(list(proxies)).to_numpy(), DEVICE_PROXY)
    return devices


def _flag_notes(rows: Rows, notes: pd.Series, src_lines: np.ndarray) -> None:
    """Flag the rows whose notes carry the collector's ``FLAG:`` (see :data:`FLAG_PATTERNS`)."""
    flagged = notes.str.contains("FLAG:", regex=False).to_numpy()
    known = np.zeros(len(notes), dtype=bool)
    tail = notes.where(flagged, "").str.split("FLAG:", n=1).str[-1]
    for pattern, flag in FLAG_PATTERNS:
        mask = flagged & tail.str.contains(pattern).to_numpy()
        rows.flag(mask, flag)
        known |= mask
    other = flagged & ~known
    if other.any():
        first = int(np.flatnonzero(other)[0])
        log.warning("%d collected rows carry a FLAG: note of an unknown kind (first: line %d: %r); flagged %s",
                    int(other.sum()), int(src_lines[first]), tail.iloc[first].strip()[:120], FLAGGED)
        rows.flag(other, FLAGGED)


def import_collected(path: Path) -> ImportResult:
    """Import one ``collected/*.csv`` file (module docstring: what a row is, every judgement)."""
    path = Path(path)
    src = read_csv(path, required=REQUIRED, kind="collected")
    n = len(src)
    gpus, tp = (number(src, c, integer=True) for c in ("num_gpus", "tensor_parallel"))
    batch, gen, energy, latency, power = (number(src, c) for c in ("batch_size", "generated_tokens", "energy_j",
                                                                   "latency_s", "avg_power_w"))
    prompt = number(src, "prompt_tokens", required=False)
    src.fail_first(~(gpus >= 1), "num_gpus", lambda i: f"{gpus[i]:g} is not a GPU count (>= 1)")
    src.fail_first(~(latency > 0), "latency_s", lambda i: f"{latency[i]:g} s is not a positive wall time")
    src.fail_first(energy < 0, "energy_j", lambda i: f"{energy[i]:g} J is negative")
    rel, absolute = POWER_TOLERANCE
    implied = energy / latency
    src.fail_first(np.abs(power * gpus - implied) > rel * implied + absolute, "avg_power_w",
                   lambda i: f"{power[i]:g} W x {gpus[i]:g} GPUs disagrees with energy_j / latency_s = {implied[i]:g} W")
    phase = text(src, "phase").str.lower()
    src.fail_first(~phase.isin(PHASES).to_numpy(), "phase", lambda i: f"{phase.iloc[i]!r} is not one of {', '.join(PHASES)}")

    engine_names, dtypes, notes = text(src, "engine"), text(src, "dtype"), text(src, "notes", required=False)
    engines = {e: engine_for(e) for e in pd.unique(engine_names)}
    src.fail_first(engine_names.map(lambda e: engines[e] is None).to_numpy(dtype=bool), "engine",
                   lambda i: f"{engine_names.iloc[i]!r} is not an engine this importer knows (vLLM, HF transformers, FastChat)")
    precisions = {d: precision_for(d) for d in pd.unique(dtypes)}
    src.fail_first(dtypes.map(lambda d: precisions[d] is None).to_numpy(dtype=bool), "dtype",
                   lambda i: f"{dtypes.iloc[i]!r} is not a precision this importer knows (fp32/fp16/bf16, AWQ, GPTQ, HQQ, "
                   f"bitsandbytes int8/4-bit)")

    rows = Rows(n)
    gpu_names, model_names = text(src, "gpu"), text(src, "model_hf")
    devices = _devices(rows, gpu_names)
    models = model_names.map({m: model_id(m, MODELS) for m in pd.unique(model_names)})
    rows.drop_unresolved(models, model_names, "model", lambda m: MODEL_NOTES.get(m, ""))
    rows.drop(energy == 0, ZERO_ENERGY)

    _flag_notes(rows, notes, src.lines)
    rows.flag(notes.str.contains("batch_size is a cap", case=False, regex=False).to_numpy(), BATCH_CAP)
    rows.flag(np.isnan(prompt), PROMPT_UNKNOWN)
    rows.flag(gpu_names.str.contains("variant unstated", case=False, regex=False).to_numpy(), VARIANT_UNSTATED)
    engine_info = engine_names.map(engines)
    for flag in (MULTI_STEP, CHUNKED_PREFILL):
        rows.flag(engine_info.map(lambda e, f=flag: f in e[1]).to_numpy(dtype=bool), flag)
    precision = dtypes.map(precisions)
    rows.flag(precision.map(lambda p: p[3]).to_numpy(dtype=bool), BITS_ASSUMED)

    codecarbon = notes.str.contains("codecarbon", case=False, regex=False)
    nvml = notes.str.contains(r"nvml|zeus", case=False, regex=True)
    measurement = np.where(codecarbon, "codecarbon", np.where(nvml, "nvml_energy", None))
    mean_request = notes.str.contains("MEAN over", regex=False).to_numpy() & (batch == 1)
    single = (gpus == 1) & (tp == 1)
    engine_ids = engine_info.map(lambda e: e[0])
    # vLLM (FlashAttention backend on Ampere) and transformers >= 4.36 (SDPA by default; Llama-3.2
    # needs >= 4.45) fuse attention; FastChat's 2023 transformers (PyTorch 2.0.1) ran Llama/NeoX
    # attention as separate matmul / softmax kernels.
    fused = np.where(notes.str.contains("FastChat", case=False, regex=False).to_numpy() |
                     engine_names.str.contains("FastChat", case=False, regex=False).to_numpy(), False, True)

    arch = arch_columns(models.where(rows.keep))
    raw = pd.DataFrame({
        "source_row": src.lines,
        "device": devices,
        "num_devices": gpus,
        "tensor_parallel": tp,
        "pipeline_parallel": np.where(single, 1, np.nan),
        "data_parallel": np.where(single, 1, np.nan),
        "expert_parallel": np.where(single, 1, np.nan),
        "engine": engine_ids,
        "model": models,
        **{c: arch[c] for c in ARCH_FIELDS},
        "weight_bits": precision.map(lambda p: p[0]),
        "quantisation": precision.map(lambda p: p[1]),
        "kv_bits": precision.map(lambda p: p[2]),
        "flash_attention": fused,
        "kv_cache": True,  # vLLM, transformers generate() and FastChat all decode with a KV cache
        "batch_size": batch,
        "prompt_tokens": prompt,
        "generated_tokens": gen,
        "phase": phase,
        "level": np.where(mean_request, "request", "batch"),
        "energy_j": energy,
        "latency_s": latency,
        "measurement": measurement,
        "power_limit_w": [ENFORCED_LIMITS_W.get((r, g), np.nan) for r, g in zip(text(src, "source_repo"), gpu_names, strict=True)],
    })
    return finish(raw, rows, FORMAT, path, n)
