"""Shared pieces of the fast-prediction tests: mixed requests, a small trained checkpoint, the
equality check against the reference, and which heavy modules a command imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from llmco2.data.dataset import energy_data
from llmco2.specs import Request, get_gpu, get_model
from llmco2.training.train import GNNPredictor, TrainConfig
from tests.test_gnn import synthetic_table

ROOT = Path(__file__).resolve().parents[1]


def mixed_items() -> list:
    """Requests of every DAG variant: dense, MoE, parallel attention, layernorm, no FlashAttention,
    tensor parallel, int8, several engines, one generated token."""
    spec = [
        ("qwen2-0.5b", "jetson-orin", dict(batch_size=1, prompt_tokens=64, generated_tokens=16, engine="unknown")),
        ("qwen2-1.5b", "jetson-orin", dict(batch_size=2, prompt_tokens=300, generated_tokens=1)),
        ("tinyllama-1.1b", "a100-40gb", dict(batch_size=4, prompt_tokens=128, generated_tokens=64, engine="hf")),
        ("llama3.1-8b", "h100-sxm", dict(batch_size=8, prompt_tokens=1024, generated_tokens=128, num_gpus=2)),
        ("mixtral-8x7b", "h100-sxm", dict(batch_size=1, prompt_tokens=512, generated_tokens=32, num_gpus=4, engine="sglang")),
        ("falcon-7b", "a100-80gb", dict(batch_size=3, prompt_tokens=700, generated_tokens=100, flash_attention=False)),
        ("bloom-7b1", "l4", dict(batch_size=1, prompt_tokens=200, generated_tokens=20, weight_dtype="int8")),
        ("llama3.1-70b", "a100-80gb", dict(batch_size=16, prompt_tokens=2000, generated_tokens=300, num_gpus=8,
                                           tensor_parallel=4, engine="tensorrt-llm")),
        ("gemma-2b", "t4", dict(batch_size=5, prompt_tokens=198, generated_tokens=111, engine="vllm-eager")),
    ]
    return [(get_model(m), Request(**kw), get_gpu(g)) for m, g, kw in spec]


def train_small_checkpoint(folder: Path) -> Path:
    """A small checkpoint trained here on synthetic rows of two devices and two engines."""
    table = synthetic_table(90)
    table["device"] = np.where(np.arange(len(table)) // 2 % 2 == 0, "jetson-orin", "a100-40gb")
    table["engine"] = np.where(np.arange(len(table)) // 2 % 3 == 0, "hf", "vllm")
    table["latency_s"] = np.where(table["phase"] == "prefill", 0.05, 1.0)
    model = GNNPredictor(TrainConfig(hidden=24, max_epochs=4, seed=1))
    model.fit(energy_data(table), energy_data(synthetic_table(30, seed=2)))
    return model.save(folder / "small.safetensors")


def assert_same(fast, ref) -> None:
    for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j"):
        np.testing.assert_allclose(getattr(fast, name), getattr(ref, name), rtol=1e-6, atol=0, err_msg=name)
    assert fast.notes == ref.notes and fast.levels == ref.levels


def modules_after(args: list[str], env_extra: dict[str, str] | None = None) -> set[str]:
    code = ("import sys\nfrom llmco2.cli import main\ntry:\n    main(" + repr(args) + ")\nexcept SystemExit:\n    pass\n"
            "print('MODULES', ' '.join(m for m in ('torch', 'torch_geometric', 'pandas') if m in sys.modules))")
    env = {**os.environ, **(env_extra or {})}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES"))
    return set(line.split()[1:])


REQUEST_CSV = ("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,engine,dtype\n"
               "qwen2-0.5b,jetson-orin,1,1,64,16,unknown,\n"
               "qwen2-1.5b,jetson-orin,1,2,300,1,,\n"
               "llama3.1-8b,h100,2,8,1024,128,hf,\n"
               "mixtral-8x7b,h100-sxm,4,1,512,32,sglang,\n"
               "falcon-7b,a100-80gb,1,3,700,100,,\n"
               "bloom-7b1,l4,1,1,200,20,,int8\n"
               "gemma-2b,t4,1,5,198,111,vllm-eager,\n")
