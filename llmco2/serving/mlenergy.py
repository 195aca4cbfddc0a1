"""ML.ENERGY steady-state rows (:func:`load_rows`) as servers to simulate, and as observations to
fit the step physics on.

Every imported text row of ML.ENERGY v2 (2024, vLLM V0: A100-40GB, H100) and v3 (2025, vLLM V1:
H100) is a vLLM server at a batch cap (``max_num_seqs``) kept full by a queue of requests. Lengths:
ML.ENERGY publishes no prompt lengths, so prompts are drawn from the Azure conv trace for
chat-like tasks (v2 ``chat`` = ShareGPT, v3 ``lm-arena-chat`` and ``gpqa``) and from the Azure code
trace for code tasks (v2 ``code``, v3 ``sourcegraph-fim``), rescaled to the mean prompt of the
task's own prompt set where that is known (:data:`TASK_PROMPT_TOKENS`); output lengths are the same
trace's output distribution rescaled to the row's published mean output length. Whole prefills for
V0 (the v2 servers ran ``--enable-chunked-prefill False``), chunked prefill for V1.

Observables: J per output token (every row); v2 the mean time per decode round (``round_time_s``:
mean running batch / output tokens per s, from the run's totals as its J per output token is; its
per-request mean time per output token, ``avg_tpot_s``, is up to 1.6x shorter at large batch caps
and cannot be fitted together with the J per token of the same run); v3 the median inter-token
latency (``median_itl_ms``) and the average power of all GPUs (``avg_power_w``).

Parallelism as the rows ran it: ``tensor_parallel`` (all GPUs where the importer leaves it null) and
``expert_parallel`` (v3's MoE rows: vLLM's ``--enable-expert-parallel`` over all GPUs, so EP = TP,
each GPU holding whole experts; :mod:`llmco2.analytic.experts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmco2.errors import InvalidInputError
from llmco2.physics.step_fit import Observation
from llmco2.physics.step_physics import StepParams, overhead_arrays
from llmco2.physics.step_work import StepShapes
from llmco2.serving.costs import memory_budget
from llmco2.serving.steady import PER_SERVER_FIELDS, ServerCase, SteadyShapes, steady_shapes, steady_state
from llmco2.serving.workload import trace_lengths

BITS_DTYPE = {16: "bf16", 8: "fp8", 4: "fp4"}
TASK_TRACE = {"chat": "conv", "lm-arena-chat": "conv", "gpqa": "conv", "code": "code", "sourcegraph-fim": "code"}
LENGTH_SAMPLES = 2000
#: Mean prompt (tokens, as sent: system prompt and chat template included) of the tasks whose prompt
#: sets are public, from the ML.ENERGY benchmark's code (github.com/ml-energy/benchmark):
#:
#: * v2 ``chat``: the first human turn of 500 ShareGPT V3 conversations kept at 4-800 tokens
#:   (``benchmark/llm_text_generation/chat/sharegpt/ShareGPT_V3_filtered_500.json`` at d0311acf):
#:   80 tokens of text on average (Llama-3 and Qwen tokenisers), plus an 18-token system prompt and
#:   the chat template's tokens (about 25, estimated);
#: * v2 ``code``: the 164 HumanEval prompts sent raw to the completions API (``code/scripts/
#:   benchmark_client.py``; ``openai/human-eval`` ``data/HumanEval.jsonl.gz``): 132 tokens on average;
#: * v3 ``gpqa``: the 198 GPQA-diamond questions in the benchmark's template with four choices
#:   (``llm/datasets.py`` ``GPQADataset`` at c1d6557f): 224.6 tokens on average (Qwen tokeniser;
#:   its ``results.json`` ``total_input_tokens`` 44,473 / 198 gives the same), plus about 8 tokens
#:   of chat template.
#:
#: * v3 ``lm-arena-chat``: 1,024 (conversation, turn) requests of ``lmarena-ai/arena-human-preference-100k``,
#:   turn ``k`` carrying the ``k`` user prompts and ``k - 1`` dataset responses before it (``llm/datasets.py``
#:   at c1d6557f). No length statistic is published for it; from Chatbot Arena's own (arXiv 2403.04132,
#:   Table 1: 1.3 turns per conversation, 94.9 tokens per prompt, 269.0 per response), a request
#:   carries ``(E[T^2] + E[T]) / (2 E[T])`` prompts and ``(E[T^2] - E[T]) / (2 E[T])`` responses:
#:   204-249 tokens for ``E[T^2]`` between a geometric count's 2.08 and 2.4, plus about 20 tokens of
#:   chat template (1.8 messages a request): 250, uncertain by about a third.
#:
#: v3 ``sourcegraph-fim`` (code prefix and suffix) publishes no length statistics: it keeps the
#: trace's prompts, which a fit may rescale (``prompt_scale``).
TASK_PROMPT_TOKENS = {"chat": 125.0, "code": 132.0, "gpqa": 233.0, "lm-arena-chat": 250.0}


def load_rows() -> tuple[pd.DataFrame, dict[str, int]]:
    """Every ML.ENERGY v2 and v3 serving row (the shared data's ``datacenter/mlenergy_v2_2024.csv``
    and ``mlenergy_v3_2025.csv``) with ``release`` and ``row_id`` columns, and the rows the
    importers dropped, by reason."""
    from llmco2.data.importers.mlenergy_v2 import serving_rows as v2_rows
    from llmco2.data.importers.mlenergy_v3 import serving_rows as v3_rows
    from llmco2.data.paths import shared_data

    frames, dropped = [], {}
    for release, fn, name in (("v2", v2_rows, "mlenergy_v2_2024.csv"), ("v3", v3_rows, "mlenergy_v3_2025.csv")):
        t, d = fn(shared_data("datacenter", name))
        t["release"] = release
        frames.append(t)
        for reason, n in d.items():
            dropped[f"{release}: {reason}"] = n
    rows = pd.concat(frames, ignore_index=True)
    rows["row_id"] = rows["release"] + ":" + rows["source_row"].astype(str)
    return rows, dropped


def lengths(task: str, mean_output: float, n: int, seed: int, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths (tokens) for ``n`` requests of ``task`` (see the module docstring)."""
    prompt, output, _ = trace_lengths(TASK_TRACE[task], n, seed)
    output = np.maximum(np.rint(output * (mean_output / output.mean())), 1).astype(np.int64)
    if task in TASK_PROMPT_TOKENS:
        prompt = np.maximum(np.rint(prompt * (TASK_PROMPT_TOKENS[task] / prompt.mean())), 1).astype(np.int64)
    prompt = np.minimum(prompt, max_tokens // 2)
    output = np.minimum(output, max_tokens - prompt)
    return prompt, output


def row_engine(row: pd.Series) -> str:
    """The engine the row ran: the importer's label (``vllm-v0`` for v2, ``vllm`` for v3)."""
    return str(row.get("engine") or "vllm")


def server_case(row: pd.Series, prompt_scale: float = 1.0) -> ServerCase:
    """The server of one ML.ENERGY row; raises :class:`InvalidInputError` where it cannot be built."""
    from llmco2.serving.api import server_setup

    bits = int(row["weight_bits"])
    dtype = BITS_DTYPE.get(bits)
    if dtype is None:
        raise InvalidInputError(f"weight precision {bits} bits not in the catalog")
    num = int(row["num_devices"])
    tp = None if pd.isna(row["tensor_parallel"]) else int(row["tensor_parallel"])
    ep = None if pd.isna(row.get("expert_parallel")) or int(row["expert_parallel"]) <= 1 else int(row["expert_parallel"])
    engine = row_engine(row)
    arch, gpu, req = server_setup(row["model"], row["device"], num, tp, engine, dtype, ep=ep)
    memory = memory_budget(arch, gpu, req)
    max_tokens = min(arch.max_context, int(memory["kv_capacity_tokens"]))
    prompt, output = lengths(str(row["task"]), float(row["generated_tokens"]), LENGTH_SAMPLES, int(row["source_row"]), max_tokens)
    prompt = np.maximum(np.rint(prompt * prompt_scale), 1).astype(np.int64)
    return ServerCase(arch, gpu, req, int(row["max_batch"]), float(memory["kv_capacity_tokens"]), prompt, output,
                      chunked=engine != "vllm-v0")


@dataclass(frozen=True)
class ServingRows:
    """Rows that could be built as servers, their steady-state shapes and the skipped rows' reasons."""

    rows: pd.DataFrame
    shapes: SteadyShapes
    skipped: dict[str, str]

    def observations(self, mask: np.ndarray | None = None, prefix: str = "") -> list[Observation]:
        """Observation groups (J per token, latency, power per release) of the rows under ``mask``."""
        mask = np.ones(len(self.rows), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        out = []
        release = self.rows["release"].to_numpy()
        for rel in sorted(set(release[mask])):
            sel = mask & (release == rel)
            idx = np.flatnonzero(sel)
            sub = take_shapes(self.shapes, idx)
            ohs: dict = {}

            def state(p: StepParams, sub: SteadyShapes = sub, ohs: dict = ohs):
                if ohs.get("params") is not p:  # one evaluation per parameter set for all observables
                    ohs["params"], ohs["state"] = p, steady_state(sub, p, overhead_arrays(sub.decode.engines, p, online=True, num_gpus=sub.decode.num_gpus))
                return ohs["state"]

            jpt = self.rows["j_per_output_token"].to_numpy(float)[idx]
            out.append(Observation(f"{prefix}{rel} J/token", jpt, lambda p, s=state: s(p).j_per_output_token))
            for col, scale, attr in (("round_time_s", 1.0, "tpot_s"), ("median_itl_ms", 1e-3, "itl_median_s"),
                                     ("avg_power_w", 1.0, "power_w")):
                if col not in self.rows:
                    continue
                v = pd.to_numeric(self.rows[col], errors="coerce").to_numpy(float)[idx] * scale
                ok = np.isfinite(v) & (v > 0)
                if ok.sum() >= 5:
                    out.append(Observation(f"{prefix}{rel} {col}", v[ok],
                                           lambda p, s=state, a=attr, ok=ok: getattr(s(p), a)[ok], weight=0.5))
        return out


def mix_builds(builds: dict[float, ServingRows], choice: np.ndarray) -> ServingRows:
    """Rows taken row by row from builds of the same rows at different prompt scales (``choice``: a scale per row)."""
    first = next(iter(builds.values()))
    idx = np.arange(len(first.rows))
    parts = {k: take_shapes(b.shapes, idx[choice == k]) for k, b in builds.items() if (choice == k).any()}
    order = np.concatenate([idx[choice == k] for k in parts])
    inv = np.argsort(order)
    cat = _concat(list(parts.values()))
    return ServingRows(first.rows, take_shapes(cat, inv), first.skipped)


def _concat(xs: list[SteadyShapes]) -> SteadyShapes:
    def steps(name: str) -> StepShapes:
        s = [getattr(x, name) for x in xs]
        return StepShapes(*(np.concatenate([getattr(v, f) for v in s]) for f in ("compute_s", "memory_s", "network_s", "weight_s",
                                                                                 "kernels", "collectives", "sequences", "num_gpus",
                                                                                 "tdp_w", "idle_w", "mem_bw_bytes_per_s", "moe")),
                          [e for v in s for e in v.engines],
                          *(np.concatenate([getattr(v, f) for v in s]) for f in ("node_nm", "peak16_ops_per_s", "dram_pj_per_byte")),
                          np.concatenate([v.linear_rate if v.linear_rate is not None else np.ones(len(v)) for v in s]),
                          np.concatenate([v.host_synced if v.host_synced is not None else np.zeros(len(v)) for v in s]))
    return SteadyShapes(steps("decode"), steps("prefill"), *(np.concatenate([getattr(x, f) for x in xs])
                                                             for f in PER_SERVER_FIELDS))


def take_shapes(x: SteadyShapes, idx: np.ndarray) -> SteadyShapes:
    """The servers ``idx`` of ``x``."""
    return SteadyShapes(x.decode.take(idx), x.prefill.take(idx), *(getattr(x, f)[idx] for f in PER_SERVER_FIELDS))


def serving_rows(rows: pd.DataFrame, prompt_scale: float = 1.0) -> ServingRows:
    """Build every row as a server, prompts scaled by ``prompt_scale`` (rows that cannot be built
    are skipped with their reason)."""
    cases, keep, skipped = [], [], {}
    for i, (_, row) in enumerate(rows.iterrows()):
        try:
            cases.append(server_case(row, prompt_scale))
            keep.append(i)
        except InvalidInputError as exc:
            skipped[str(row.get("row_id", i))] = str(exc).split(";")[0]
    kept = rows.iloc[keep].reset_index(drop=True)
    return ServingRows(kept, steady_shapes(cases), skipped)
