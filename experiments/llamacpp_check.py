"""llama.cpp with GGUF weights: predicted single-sequence decode speed against published llama-bench runs.

Rows: the text-generation column ``tg 512`` (tokens/s generating 512 tokens from an empty prompt, one
sequence, ``llama-bench -n 512``) of XiongjieDai/GPU-Benchmarks-on-LLM-Inference (README.md at
00dd2bdeb240, "LLaMA 3, NVIDIA GPUs ... snapshots in May 2024"), for the GPUs the catalog holds. Multi-GPU
rows are llama.cpp's default layer split (each GPU holds a contiguous share of the layers:
``tensor_parallel=1``, the GPUs as pipeline stages). Predicted: ``llmco2.predict(..., engine="llama-cpp",
quantisation="gguf-q4-k-m")`` (or ``dtype="fp16"``), 1 prompt token and 513 generated, decode tokens per
second; and the ``pp 512`` column (a 512-token prompt) against the predicted prefill. Nothing is fitted to these rows: the shipped checkpoint, the catalog's llama.cpp priors and the GGUF
types' bits per weight (``llmco2.specs.quantisation.GGUF_BITS_PER_WEIGHT``).

    python experiments/llamacpp_check.py            # prints the Markdown table
"""

from __future__ import annotations

import numpy as np

import llmco2

SOURCE = ("XiongjieDai/GPU-Benchmarks-on-LLM-Inference, README.md at 00dd2bdeb240 (LLaMA 3, NVIDIA GPUs, snapshots in May "
          "2024), columns tg 512 and pp 512")
#: (GPU id, GPUs, model, weights, measured tg 512 and pp 512 tokens/s: 512 tokens generated, a 512-token prompt) of that
#: table.
ROWS = (
    ("rtx-3090", 1, "llama3-8b", "Q4_K_M", 115.42, 4030.40),
    ("rtx-3090", 1, "llama3-8b", "F16", 47.40, 4444.65),
    ("rtx-4090", 1, "llama3-8b", "Q4_K_M", 130.58, 7138.99),
    ("rtx-4090", 1, "llama3-8b", "F16", 54.84, 9382.00),
    ("rtx-3090", 2, "llama3-8b", "Q4_K_M", 111.67, 3336.37),
    ("rtx-3090", 2, "llama3-8b", "F16", 47.72, 4122.66),
    ("rtx-3090", 2, "llama3-70b", "Q4_K_M", 16.57, 357.32),
    ("rtx-4090", 2, "llama3-8b", "Q4_K_M", 124.65, 7003.51),
    ("rtx-4090", 2, "llama3-8b", "F16", 53.64, 9177.92),
    ("rtx-4090", 2, "llama3-70b", "Q4_K_M", 19.22, 839.43),
    ("rtx-3090", 4, "llama3-8b", "Q4_K_M", 108.66, 3742.66),
    ("rtx-3090", 4, "llama3-8b", "F16", 47.07, 4608.40),
    ("rtx-3090", 4, "llama3-70b", "Q4_K_M", 17.07, 300.79),
    ("rtx-4090", 4, "llama3-8b", "Q4_K_M", 120.32, 6748.96),
    ("rtx-4090", 4, "llama3-8b", "F16", 53.10, 8750.57),
    ("rtx-4090", 4, "llama3-70b", "Q4_K_M", 19.80, 834.74),
    ("rtx-3090", 6, "llama3-70b", "Q4_K_M", 17.09, 456.95),
    ("rtx-3090", 6, "llama3-70b", "F16", 5.85, 579.00),
    ("rtx-4090", 8, "llama3-8b", "Q4_K_M", 118.09, 6172.06),
    ("rtx-4090", 8, "llama3-8b", "F16", 52.51, 7889.26),
    ("rtx-4090", 8, "llama3-70b", "Q4_K_M", 18.94, 812.95),
    ("rtx-4090", 8, "llama3-70b", "F16", 6.47, 1183.87),
)


def predicted_tokens_per_s(gpu: str, gpus: int, model: str, weights: str, as_int4: bool = False, prompt: bool = False) -> float:
    """Decode tokens per second of one sequence under llama.cpp (llmco2's prediction), or with ``prompt`` the
    tokens per second of a 512-token prompt; ``as_int4``: a quantised file given as 4-bit weights
    (``dtype="int4"``), as before the GGUF types."""
    how = {"dtype": "fp16"} if weights == "F16" else {"dtype": "int4"} if as_int4 else {"quantisation": "gguf-" + weights.lower()}
    lengths = {"prompt_tokens": 512, "gen_tokens": 1} if prompt else {"prompt_tokens": 1, "gen_tokens": 513}
    p = llmco2.predict(model, gpu, gpus=gpus, tp=1, batch_size=1, engine="llama-cpp", **lengths, **how)
    return 512.0 / p.latency_s["prefill" if prompt else "decode"]


def table_markdown() -> str:
    lines = ["| GPU | GPUs | model | weights | measured tokens/s | predicted | predicted / measured | as int4: predicted / measured |",
             "|---|---|---|---|---|---|---|---|"]
    ratios, quantised = [], []
    for gpu, n, model, weights, measured, _ in ROWS:
        pred = predicted_tokens_per_s(gpu, n, model, weights)
        ratios.append(pred / measured)
        old = ""
        if weights != "F16":
            as_int4 = predicted_tokens_per_s(gpu, n, model, weights, as_int4=True) / measured
            quantised.append((pred / measured, as_int4))
            old = f"{as_int4:.2f}"
        lines.append(f"| {gpu} | {n} | {model} | {weights} | {measured:.2f} | {pred:.2f} | {pred / measured:.2f} | {old} |")
    ape = np.abs(np.array(ratios) - 1.0) * 100
    q = np.abs(np.array(quantised) - 1.0) * 100
    lines += ["", f"{len(ROWS)} rows: median APE {np.median(ape):.1f}%, largest {ape.max():.1f}%; predicted / measured "
              f"{min(ratios):.2f}-{max(ratios):.2f}. The {len(q)} Q4_K_M rows: median APE {np.median(q[:, 0]):.1f}% with the GGUF "
              f"type, {np.median(q[:, 1]):.1f}% given as 4-bit weights. Source: {SOURCE}."]
    lines += ["", "Prompt processing (pp 512: one 512-token prompt):", "",
              "| GPU | GPUs | model | weights | measured tokens/s | predicted | predicted / measured |", "|---|---|---|---|---|---|---|"]
    pp = []
    for gpu, n, model, weights, _, measured in ROWS:
        pred = predicted_tokens_per_s(gpu, n, model, weights, prompt=True)
        pp.append(pred / measured)
        lines.append(f"| {gpu} | {n} | {model} | {weights} | {measured:.2f} | {pred:.2f} | {pred / measured:.2f} |")
    ape = np.abs(np.array(pp) - 1.0) * 100
    lines += ["", f"{len(ROWS)} rows: median APE {np.median(ape):.1f}%, largest {ape.max():.1f}%; predicted / measured "
              f"{min(pp):.2f}-{max(pp):.2f}."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table_markdown())
