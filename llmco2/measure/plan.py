"""The focused measurement plan: configurations for a data-centre GPU sweep (``llmco2 measure``).

What it draws (defaults, for one 80 GB GPU):

* models: :data:`MODELS`, 16 catalog architectures of 0.5-15B parameters covering grouped-query
  (GQA), multi-query (MQA) and multi-head (MHA) attention, RMSNorm and LayerNorm, RoPE, ALiBi and
  learned positions, parallel attention, plus one mixture of experts that fits in 80 GB in 16-bit
  (``qwen3-30b-a3b``, 61 GB);
* lengths: (prompt, generated) pairs drawn jointly from the Azure LLM inference traces (code and
  conversation, half each), kept only below ``max_prompt`` / ``max_generated`` and the model's
  context (rejection, so the joint shape below the caps is the trace's);
* batch 1, 2, 4, 8 or 16; ``fp16`` or ``bf16``; engine ``hf`` (eager) or ``hf-static`` (static
  cache + CUDA graphs), each half of the time;
* memory: a configuration whose weights plus KV cache would take more than ``memory_fraction`` of
  the GPU's memory has its batch halved until it fits (weights alone too big: left out).

Rows are sorted by model, dtype and engine so that a sweep rebuilds a model rarely; configuration
``i`` goes to shard ``i % K``, so every shard gets every model. ``python -m llmco2.measure.plan
--out data/measurements/configs_h100.csv`` writes the plan (it needs the shared Azure traces).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.errors import InvalidInputError
from llmco2.specs import DTYPE_BITS, get_gpu, get_model

log = logging.getLogger(__name__)

MODELS = ("qwen2-0.5b", "qwen1.5-0.5b", "tinyllama-1.1b", "bloom-1b7", "internlm2-1.8b", "gemma-2b", "starcoder2-3b",
          "phi3-mini", "opt-6.7b", "falcon-7b", "qwen1.5-7b", "mistral-7b", "llama3.1-8b", "gemma2-9b", "llama2-13b",
          "qwen3-14b", "qwen3-30b-a3b")
BATCHES = (1, 2, 4, 8, 16)
DTYPES = ("fp16", "bf16")
ENGINES = ("hf", "hf-static")
COLUMNS = ("model", "gpu", "num_gpus", "batch_size", "prompt_tokens", "generated_tokens", "dtype", "engine", "trace")


def attention_kind(model: str) -> str:
    """``MHA``, ``MQA`` or ``GQA`` of a catalog model (``MoE`` is noted apart)."""
    arch = get_model(model)
    if arch.num_kv_heads == arch.num_heads:
        return "MHA"
    return "MQA" if arch.num_kv_heads == 1 else "GQA"


def memory_bytes(model: str, batch: int, tokens: int, dtype: str) -> float:
    """Weights plus KV cache of a request (bytes); activations are left to the safety fraction."""
    arch = get_model(model)
    width = DTYPE_BITS[dtype] / 8
    kv = 2 * arch.num_layers * arch.num_kv_heads * arch.head_dim * width * batch * tokens
    return arch.param_count() * width + kv


def focused_plan(n: int = 480, *, gpu: str = "h100-sxm", models: Sequence[str] = MODELS, seed: int = 0, max_prompt: int = 4096,
                 max_generated: int = 256, memory_fraction: float = 0.85, traces: dict[str, pd.DataFrame] | None = None,
                 ) -> pd.DataFrame:
    """``n`` configurations (about ``n / len(models)`` per model); see the module doc."""
    from llmco2.data.azure import load_trace

    if n < 1:
        raise InvalidInputError(f"must be >= 1, got {n}", field="n")
    device = get_gpu(gpu)
    budget = memory_fraction * device.memory_size_gb * 1e9
    traces = traces if traces is not None else {"code": load_trace("code"), "conv": load_trace("conv")}
    rng = np.random.default_rng(seed)
    rows = []
    per_model = np.full(len(models), n // len(models))
    per_model[: n % len(models)] += 1
    for model, count in zip(models, per_model, strict=True):
        arch = get_model(model)
        for _ in range(int(count)):
            dtype = str(rng.choice(DTYPES))
            if memory_bytes(model, 1, 1, dtype) > budget:
                raise InvalidInputError(f"{model} does not fit in {memory_fraction:.0%} of the {device.id}'s memory", field="models")
            trace = str(rng.choice(sorted(traces)))
            table = traces[trace]
            while True:
                i = int(rng.integers(len(table)))
                prompt, generated = int(table["prompt_tokens"].iloc[i]), int(table["generated_tokens"].iloc[i])
                if 1 <= prompt <= max_prompt and 1 <= generated <= max_generated and prompt + generated <= arch.max_context:
                    break
            batch = int(rng.choice(BATCHES))
            while batch > 1 and memory_bytes(model, batch, prompt + generated, dtype) > budget:
                batch //= 2
            rows.append({"model": model, "gpu": device.id, "num_gpus": 1, "batch_size": batch, "prompt_tokens": prompt,
                         "generated_tokens": generated, "dtype": dtype, "engine": str(rng.choice(ENGINES)), "trace": trace})
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    order = {m: i for i, m in enumerate(models)}
    frame["_order"] = frame["model"].map(order)
    frame = frame.sort_values(["_order", "dtype", "engine", "batch_size", "prompt_tokens"], kind="stable")
    return frame.drop(columns="_order").reset_index(drop=True)


def describe(plan: pd.DataFrame) -> dict[str, object]:
    """Counts a plan covers: configurations, models, attention kinds, MoE, batches, dtypes, engines."""
    kinds = {m: attention_kind(m) for m in plan["model"].unique()}
    moe = sorted(m for m in kinds if get_model(m).is_moe)
    return {"configurations": len(plan), "models": int(plan["model"].nunique()),
            "attention": {k: sorted(m for m, v in kinds.items() if v == k) for k in ("MHA", "MQA", "GQA")}, "moe": moe,
            "batch_sizes": sorted(int(b) for b in plan["batch_size"].unique()), "dtypes": sorted(plan["dtype"].unique()),
            "engines": {str(k): int(v) for k, v in plan["engine"].value_counts().sort_index().items()},
            "prompt_tokens": [int(plan["prompt_tokens"].min()), int(plan["prompt_tokens"].max())],
            "generated_tokens": [int(plan["generated_tokens"].min()), int(plan["generated_tokens"].max())]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmco2.measure.plan", description="Write the focused measurement plan.")
    parser.add_argument("--out", required=True, help="configurations CSV to write")
    parser.add_argument("--n", type=int, default=480, help="configurations (default 480)")
    parser.add_argument("--gpu", default="h100-sxm", help="catalog GPU id (default h100-sxm)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-prompt", type=int, default=4096)
    parser.add_argument("--max-generated", type=int, default=256)
    args = parser.parse_args(argv)
    try:
        plan = focused_plan(args.n, gpu=args.gpu, seed=args.seed, max_prompt=args.max_prompt, max_generated=args.max_generated)
        out = Path(args.out)
        if not out.parent.is_dir():
            raise InvalidInputError(f"folder {str(out.parent)!r} does not exist", field="--out")
    except InvalidInputError as exc:
        sys.stderr.write(f"llmco2: error: {exc}\n")
        return 2
    plan.to_csv(out, index=False)
    import json

    sys.stderr.write(f"wrote {len(plan)} configurations to {out}\n{json.dumps(describe(plan))}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
