"""Tensor parallelism over PCIe: predicted time to first token and time per output token of
Llama-3.1-8B (bf16) and Llama-3.1-70B (4-bit weights, 16-bit activations) on 1, 2, 4 and 8 RTX 4090s (no peer-to-peer: NCCL
goes through host memory) and L40S (PCIe peer-to-peer), before and after the all-reduce took the
GPUs' actual link (``llmco2.specs.links``).

"Before" is the same GPU with ``link_kind = "fabric"``: the network term then uses the catalog's
``interconnect_bandwidth_gb_s`` with no latency beyond NVLink's, exactly as before the change.

    .venv/bin/python experiments/pcie_tp.py > experiments/results/pcie_tp.md
"""

from __future__ import annotations

import dataclasses

import llmco2
from llmco2.errors import InvalidInputError
from llmco2.serving.costs import memory_budget
from llmco2.specs import Request, get_gpu, get_model
from llmco2.specs.links import allreduce_bandwidth_bytes_per_s, allreduce_latency_s, allreduce_path

MODELS = (("llama3.1-8b", "bf16"), ("llama3.1-70b", "int4"))  # (model, weight dtype); activations and KV in 16 bits
GPUS = ("rtx-4090", "l40s")
DEGREES = (1, 2, 4, 8)
PROMPT, GENERATED = 1000, 201  # TTFT: the prefill of 1000 tokens; TPOT: the decode phase over its 200 steps

MEASURED = """\
## Reading the table

Only rows with more than one GPU change. Through host memory (RTX 4090) an all-reduce gets half the
PCIe figure and 2 (tp - 1) x 1.9 us more latency than over NVLink; with peer-to-peer (L40S) the bandwidth
is unchanged and the latency grows by 2 (tp - 1) x 0.4 us. On every link the network term charges what a
ring all-reduce sends: 2 (tp - 1) / tp x S for a message of S bytes, over one direction of the link (half
the quoted bidirectional figure) at eta_network 0.7 (`llmco2.specs.links`). "Before" runs the same network
term over the catalog's interconnect figure as if it were NVLink.

## Published measurements beside these

No published batch-1 TTFT or TPOT of vLLM with tensor parallelism on several RTX 4090s or L40S was
found, so nothing above is compared with a measurement, and no constant was tuned to one. The one
vLLM comparison found measures a loaded server, which a batch-1 prediction does not describe:

- Database Mart, "vLLM Distributed Inference Optimization" (blog, 2025),
  https://www.databasemart.com/blog/vllm-distributed-inference-optimization-guide: DeepSeek-R1-Distill-Llama-8B
  (the Llama-3.1-8B architecture) in bf16 on RTX 4090s, 300 requests of 100 prompt tokens (about 550 generated
  tokens each): one GPU at TP 1 took 72.4 s (2285 output tokens/s, median TTFT 1.93 s), two GPUs at TP 2 took
  49.2 s (3350 output tokens/s, median TTFT 2.45 s). Its TTFTs are queueing under load, not one prefill.
"""


def fits(model: str, dtype: str, gpu: object, tp: int) -> bool:
    """Whether the weights leave room for the request's KV cache on ``tp`` GPUs (the serving memory model)."""
    req = Request(batch_size=1, prompt_tokens=PROMPT, generated_tokens=GENERATED, num_gpus=tp, tensor_parallel=tp,
                  weight_dtype=dtype)
    try:
        return memory_budget(get_model(model), gpu, req)["kv_capacity_tokens"] >= PROMPT + GENERATED  # type: ignore[arg-type]
    except InvalidInputError:
        return False


def predict_ms(model: str, dtype: str, gpu: object, tp: int) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of one request at batch 1 with vLLM, weights in ``dtype``, activations and KV cache in 16 bits."""
    p = llmco2.predict(model, gpu, batch_size=1, prompt_tokens=PROMPT, generated_tokens=GENERATED, gpus=tp, engine="vllm",
                       dtype=dtype, act_dtype="bf16", kv_dtype="bf16")
    return p.latency_s["prefill"] * 1e3, p.latency_s["decode"] / (GENERATED - 1) * 1e3


def main() -> None:
    print("# Tensor parallelism over PCIe: TTFT and TPOT before and after per-link all-reduces\n")
    print(f"Batch 1, {PROMPT} prompt tokens, {GENERATED - 1} decode steps, vLLM; `llmco2.predict` with the shipped "
          "checkpoint. Link: the all-reduce's path, its bandwidth in the network term's unit (total bidirectional "
          "GB/s per GPU, as the catalog quotes links) and its small-message latency (NCCL's ring model). Before: "
          "the catalog's interconnect figure, no latency beyond NVLink's.\n")
    print("| model | GPU | TP | path | link GB/s (before) | all-reduce latency us | TTFT ms before | TTFT ms after | "
          "TPOT ms before | TPOT ms after |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for model, dtype in MODELS:
        for gid in GPUS:
            gpu = get_gpu(gid)
            before_gpu = dataclasses.replace(gpu, link_kind="fabric")
            for tp in DEGREES:
                name = f"{model} {dtype}"
                if not fits(model, dtype, gpu, tp):
                    print(f"| {name} | {gid} | {tp} | does not fit in memory | | | | | | |")
                    continue
                try:
                    after = predict_ms(model, dtype, gpu, tp)
                    before = predict_ms(model, dtype, before_gpu, tp)
                except InvalidInputError as exc:
                    print(f"| {name} | {gid} | {tp} | does not fit: {str(exc).splitlines()[0][:80]} |||||||")
                    continue
                path = allreduce_path(gpu, tp) if tp > 1 else "-"
                link = (f"{allreduce_bandwidth_bytes_per_s(gpu, tp) / 1e9:g} ({gpu.interconnect_bandwidth_gb_s:g})"
                        if tp > 1 else "-")
                lat = f"{allreduce_latency_s(gpu, tp) * 1e6:.1f}" if tp > 1 else "-"
                print(f"| {name} | {gid} | {tp} | {path} | {link} | {lat} | {before[0]:.1f} | {after[0]:.1f} | "
                      f"{before[1]:.2f} | {after[1]:.2f} |")
    print()
    print(MEASURED)


if __name__ == "__main__":
    main()
