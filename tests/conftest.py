"""Shared fixtures: hand-specified architectures and GPUs (independent of the shipped catalogs,
so that hand-computed golden numbers stand on their own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmco2.specs import GPU, ModelArch

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture
def llama8b() -> ModelArch:
    """Llama-3.1-8B as published in its config.json."""
    return ModelArch(id="llama-test-8b", hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
                     num_kv_heads=8, head_dim=128, vocab_size=128256, max_context=131072)


@pytest.fixture
def a100() -> GPU:
    """A100-80GB SXM with the datasheet's dense peaks (312 TFLOP/s FP16, 2039 GB/s, NVLink 600 GB/s)."""
    return GPU(id="a100-test", name="A100 test", vendor="NVIDIA", architecture="Ampere", form_factor="SXM4",
               memory_type="HBM2e", memory_size_gb=80.0, memory_bandwidth_gb_s=2039.0, interconnect="NVLink 3",
               interconnect_bandwidth_gb_s=600.0, tdp_w=400.0, process_node_nm=7, gpus_per_node=8, release_year=2020,
               peak_dense_tops={"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "int8": 624.0, "int4": 1248.0},
               sources={})


@pytest.fixture
def shared_data():
    """The shared reference-data folder; skips the test with a reason when it is absent."""
    from llmco2.data.paths import find_shared_data

    root = find_shared_data()
    if root is None:
        pytest.skip("shared/data (public reference measurements) not found beside the checkout; set LLMCO2_SHARED_DATA")
    return root
