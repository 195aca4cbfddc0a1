"""Expert parallelism in the step physics: the MoE layer's dispatch and combine all-to-alls run over
the link at the expert-parallel degree, count as two collectives (plus the tensor-parallel
all-reduce when tp > 1), and per-sequence host costs follow the busiest attention group."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.physics.link_rows import collectives_per_layer
from llmco2.physics.step_work import step_shapes
from llmco2.specs import Request, get_gpu, get_model

MIXTRAL = get_model("mixtral-8x7b")
LLAMA = get_model("llama3.1-8b")
H100 = get_gpu("h100-sxm")
L40S = get_gpu("l40s")


def _collectives(arch, **layout) -> float:
    req = Request(batch_size=16, prompt_tokens=64, generated_tokens=8, **layout)
    return float(collectives_per_layer(analyze_layers(LayerBatch.from_items([(arch, req, H100)])))[0])


def test_collectives_per_layer() -> None:
    assert _collectives(LLAMA) == 0.0  # one GPU: none
    assert _collectives(MIXTRAL, num_gpus=8) == 2.0  # TP 8: attention and MLP all-reduces
    assert _collectives(MIXTRAL, num_gpus=8, tensor_parallel=8, expert_parallel=8) == 2.0  # ep = tp: no dispatch
    # tp 1, ep 8: no all-reduce; the MLP is a dispatch and a combine
    assert _collectives(MIXTRAL, num_gpus=8, tensor_parallel=1, expert_parallel=8) == 2.0
    # tp 2, ep 8: the attention all-reduce, and in the MLP slot the all-reduce plus two all-to-alls
    assert _collectives(MIXTRAL, num_gpus=8, tensor_parallel=2, expert_parallel=8) == 4.0


def test_the_all_to_all_crosses_pcie_at_the_ep_degree() -> None:
    """On bridged or PCIe cards the all-to-all over 4 GPUs costs the 4-GPU path, not the 1-GPU one."""
    req = Request(batch_size=32, prompt_tokens=512, generated_tokens=2, num_gpus=4, tensor_parallel=1, expert_parallel=4)
    shapes = step_shapes([(MIXTRAL, req, L40S)], "prefill")
    assert shapes.network_s.sum() > 0
    assert shapes.collectives[0] == 2.0 * MIXTRAL.num_layers


def test_sequences_are_the_busiest_groups() -> None:
    req = Request(batch_size=9, prompt_tokens=64, generated_tokens=4, num_gpus=8, tensor_parallel=2, expert_parallel=8)
    shapes = step_shapes([(MIXTRAL, req, H100)], "decode", 3.0)
    assert np.isclose(shapes.sequences[0], 3.0)  # ceil(9 / 4 attention groups)


def test_kv_capacity_counts_every_attention_group() -> None:
    from llmco2.serving.costs import GPU_MEMORY_UTILIZATION, memory_budget

    tp8 = memory_budget(MIXTRAL, H100, Request(num_gpus=8, tensor_parallel=8, expert_parallel=8))
    ep8 = memory_budget(MIXTRAL, H100, Request(num_gpus=8, tensor_parallel=2, expert_parallel=8))
    # four attention groups of 2 GPUs, each holding the KV of its own sequences
    one_group = (H100.memory_bytes * GPU_MEMORY_UTILIZATION - ep8["weight_bytes_per_gpu"]) // ep8["kv_bytes_per_token_per_gpu"]
    assert ep8["kv_capacity_tokens"] == pytest.approx(4 * one_group, rel=1e-6)
    assert tp8["kv_capacity_tokens"] > 0
