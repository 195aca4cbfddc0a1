"""Global features of a (model, request, GPU) triple: the paper's global LLM features
(architecture, bitwidth, batch, prompt and generated tokens, totals of ops, memory and network
bytes) plus hardware peaks and layer/model totals per phase."""

from __future__ import annotations

from typing import Any

from llmco2.analytic.layer import PHASES, LayerAnalysis
from llmco2.analytic.layer_dag import as_number
from llmco2.analytic.model import QUANTITIES, ModelTotals
from llmco2.specs.dtypes import DTYPE_BITS
from llmco2.specs.engines import get_engine
from llmco2.specs.gpus import GPU, tensor_peak_ops_per_s
from llmco2.specs.models import ModelArch
from llmco2.specs.requests import Request


def global_features(arch: ModelArch, req: Request, gpu: GPU, analysis: LayerAnalysis, totals: ModelTotals,
                    i: int = 0) -> dict[str, Any]:
    """Flat architecture/request/hardware fields plus ``layer_totals`` (one layer, per GPU) and
    ``model_totals`` (whole request, all GPUs) per phase; ``expert_parallel`` and ``attention_dp``
    only under expert parallelism."""
    layout = {"expert_parallel": req.expert_parallel, "attention_dp": req.attention_dp} if req.expert_parallel > 1 else {}  # type: ignore[operator]
    return {
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_layers": arch.num_layers,
        "num_heads": arch.num_heads,
        "num_kv_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "vocab_size": arch.vocab_size,
        "num_experts": arch.num_experts,
        "experts_per_token": arch.experts_per_token,
        "mlp_gated": arch.mlp_gated,
        "norm_type": arch.norm_type,
        "params": arch.param_count(),
        "active_params": arch.active_param_count(),
        "layer_mix": {"attention": arch.num_attention_layers, "window": arch.num_window_layers, "mamba": arch.num_mamba_layers,
                      "linear_attention": arch.num_linear_layers, "moe_mlp": arch.num_moe_layers,
                      "dense_mlp": arch.num_mlp_layers - arch.num_moe_layers},
        "attention": "mla" if arch.is_mla else "gqa",
        "weight_bits": DTYPE_BITS[req.weight_dtype],
        "activation_bits": DTYPE_BITS[req.activation_dtype],  # type: ignore[index]
        "kv_bits": DTYPE_BITS[req.kv_dtype],  # type: ignore[index]
        "compute_dtype": req.compute_dtype,
        "batch_size": req.batch_size,
        "prompt_tokens": req.prompt_tokens,
        "generated_tokens": req.generated_tokens,
        "num_gpus": req.num_gpus,
        "tensor_parallel": req.tensor_parallel,
        "pipeline_parallel": req.pipeline_parallel,
        **layout,
        "flash_attention": req.flash_attention,
        "causal": req.causal,
        "peak_ops_per_s": tensor_peak_ops_per_s(gpu, req.compute_dtype, get_engine(req.engine).fp16_accumulate),  # type: ignore[arg-type]
        "memory_bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s,
        "interconnect_bytes_per_s": gpu.interconnect_bytes_per_s,
        "layer_totals": {
            p: {q: (float(analysis.total(p, q)[i]) if q == "time_s" else as_number(analysis.total(p, q)[i])) for q in QUANTITIES}
            for p in PHASES
        },
        "model_totals": {
            p: {q: (float(totals.totals[p][q][i]) if q == "time_s" else as_number(totals.totals[p][q][i])) for q in QUANTITIES}
            for p in PHASES
        },
    }
