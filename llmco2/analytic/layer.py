"""The kernel DAG of one transformer layer (paper Figures 8 and 12), vectorised over requests.

The DAG is declared as data (:data:`KERNELS`, op -> inputs in the LLM-Viewer style; its edges and
the plain-data view of one request are :mod:`llmco2.analytic.layer_dag`). :class:`LayerBatch`
holds the shapes of many requests as NumPy arrays; :func:`analyze_layers` computes every kernel's
cost and roofline in both phases at once, and :func:`analyze_layer` analyses one request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic import kernels as K
from llmco2.analytic.experts import all_to_all_rows, expert_parallel_costs, rank_view
from llmco2.analytic.item_codes import COUNT_ATTRS, ROW_COUNTS, code_items
from llmco2.analytic.item_codes import request_kind_key as request_kind_key  # re-exported: was defined here
from llmco2.analytic.mixers import MIX_BOOLS, arch_mix_fields, mixed_layer_costs
from llmco2.analytic.quantised import quantised_costs
from llmco2.analytic.roofline import RooflinePoint, roofline_point
from llmco2.specs.engines import engine_level_index, get_engine
from llmco2.specs.gpus import GPU, tensor_peak_ops_per_s
from llmco2.specs.models import ModelArch
from llmco2.specs.quantisation import path_code
from llmco2.specs.requests import Request, validate_request

Array = NDArray[np.float64]
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class KernelSpec:
    """A node type of the layer DAG: its name, kind and the kernels whose outputs it reads."""

    name: str
    kind: str
    inputs: tuple[str, ...]


#: Every kernel a layer can hold, in execution order, with its inputs (the superset of all
#: variants; :func:`present_kernels` picks those of one request).
KERNELS: tuple[KernelSpec, ...] = (
    KernelSpec("norm_attn", "norm", ()),
    KernelSpec("q_proj", "linear", ("norm_attn",)),
    KernelSpec("k_proj", "linear", ("norm_attn",)),
    KernelSpec("v_proj", "linear", ("norm_attn",)),
    KernelSpec("fuse_attn", "attention", ("q_proj", "k_proj", "v_proj")),
    KernelSpec("matmul_qk", "matmul", ("q_proj", "k_proj")),
    KernelSpec("softmax", "softmax", ("matmul_qk",)),
    KernelSpec("matmul_sv", "matmul", ("softmax", "v_proj")),
    KernelSpec("out_proj", "linear", ("fuse_attn", "matmul_sv")),
    KernelSpec("all_reduce_attn", "all_reduce", ("out_proj",)),
    KernelSpec("add_attn", "add", ("all_reduce_attn|out_proj",)),
    KernelSpec("norm_mlp", "norm", ("add_attn",)),
    KernelSpec("router", "router", ("norm_mlp",)),
    KernelSpec("gate_proj", "linear", ("norm_mlp", "router")),
    KernelSpec("up_proj", "linear", ("norm_mlp", "router")),
    KernelSpec("act_mlp", "activation", ("gate_proj", "up_proj")),
    KernelSpec("down_proj", "linear", ("act_mlp",)),
    KernelSpec("all_reduce_mlp", "all_reduce", ("down_proj",)),
    KernelSpec("add_mlp", "add", ("all_reduce_mlp|down_proj", "add_attn")),
)
KERNEL_NAMES: tuple[str, ...] = tuple(k.name for k in KERNELS)
KERNEL_KINDS: tuple[str, ...] = ("norm", "linear", "attention", "matmul", "softmax", "add", "router", "activation", "all_reduce")
_SPEC = {k.name: k for k in KERNELS}


@dataclass(frozen=True)
class LayerBatch:
    """Shapes of ``n`` (model, request, GPU) triples as arrays of shape ``(n,)``.

    Sizes are element counts, ``*_bytes`` bytes per element, ``peak_ops_per_s`` the GPU's dense
    peak in the request's compute dtype, bandwidths in bytes/s. ``batch`` is the request's (every
    GPU's attention holds it, or its share under expert parallelism: :mod:`llmco2.analytic.experts`).
    """

    batch: Array
    prompt: Array
    generated: Array
    tp: Array
    ep: Array
    hidden: Array
    intermediate: Array
    heads: Array
    kv_heads: Array
    head_dim: Array
    vocab: Array
    layers: Array
    experts: Array
    experts_per_token: Array
    shared_experts: Array
    gated: NDArray[np.bool_]
    layernorm: NDArray[np.bool_]
    parallel_attention: NDArray[np.bool_]
    flash: NDArray[np.bool_]
    causal: NDArray[np.bool_]
    w_bytes: Array
    a_bytes: Array
    kv_bytes: Array
    peak_ops_per_s: Array
    mem_bw_bytes_per_s: Array
    net_bw_bytes_per_s: Array
    params: Array
    routed_params: Array  # parameters of the routed experts of all MoE layers (0 for a dense model)
    num_gpus: Array
    mem_capacity_bytes: Array
    tdp_w: Array
    # peak_ops_per_s over the GPU's catalog peak of the compute dtype: 2 for fp16 accumulated in fp16 on a GeForce
    # card (llmco2.specs.gpus.tensor_peak_ops_per_s), else 1; the arithmetic's power at the peak scales with it
    peak_boost: Array
    engine: Array  # index of the request's serving engine in llmco2.specs.engine_levels()
    quant: Array  # kernel path of the linear layers: index in llmco2.specs.quantisation.QUANT_PATHS (0: native)
    # layer mix and special blocks (llmco2.analytic.mixers.arch_mix_fields): shares of layers,
    # window, MLA, Mamba-2 and gated-DeltaNet shapes; ``special`` false for a plain transformer
    special: NDArray[np.bool_]
    f_attn: Array
    f_win: Array
    window: Array
    chunked: NDArray[np.bool_]
    mla: NDArray[np.bool_]
    q_lora: Array
    kv_lora: Array
    qk_nope: Array
    qk_rope: Array
    v_head: Array
    attn_gate: NDArray[np.bool_]
    f_mamba: Array
    m_heads: Array
    m_head_dim: Array
    m_state: Array
    m_groups: Array
    conv_k: Array
    f_linear: Array
    l_kheads: Array
    l_vheads: Array
    l_kdim: Array
    l_vdim: Array
    f_mlp: Array
    f_moe: Array
    dense_inter: Array

    def __len__(self) -> int:
        return int(self.batch.shape[0])

    @property
    def moe(self) -> NDArray[np.bool_]:
        return self.experts > 1

    def take(self, idx: NDArray[np.int64]) -> LayerBatch:
        """The rows at ``idx``."""
        return type(self)(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    @classmethod
    def from_items(cls, items: Iterable[tuple[ModelArch, Request, GPU]], validate: bool = True,
                   check_context: bool = True) -> LayerBatch:
        """Stack (arch, request, gpu) triples; ``validate`` checks each with `validate_request`
        (``check_context``: also that prompt and generated tokens fit the model's context).

        One pass collects each row's counts and the codes of its architecture, GPU and request
        kind (dtypes, flags, engine); :meth:`from_parts` computes the rest once per distinct value.
        """
        items = list(items)
        if validate:
            for arch, req, gpu in items:
                validate_request(req, arch, gpu, check_context=check_context)
        archs, gpus, kinds, codes, nums = code_items(items)
        row = {attr: nums[i] for i, attr in enumerate(COUNT_ATTRS)}
        counts = {f: row[attr].astype(np.float64) for f, attr in ROW_COUNTS.items()}
        return cls.from_parts(archs, codes[0], gpus, codes[1], kinds, codes[2], counts)

    @classmethod
    def from_parts(cls, archs: Sequence[ModelArch], arch_code: NDArray[np.int64], gpus: Sequence[GPU], gpu_code: NDArray[np.int64],
                   kinds: Sequence[Request], kind_code: NDArray[np.int64], counts: dict[str, NDArray[np.float64]]) -> LayerBatch:
        """The batch of rows given as codes into distinct architectures, GPUs and request kinds
        (requests whose dtypes, flags and engine are the row's; their counts are not used) plus
        the per-row ``counts`` (keys of :data:`ROW_COUNTS`). No per-row Python."""
        pair = gpu_code * max(len(kinds), 1) + kind_code
        pairs, pair_code = np.unique(pair, return_inverse=True)
        tables = (([_arch_fields(a) for a in archs], arch_code), ([_kind_fields(k) for k in kinds], kind_code),
                  ([_device_fields(gpus[int(p) // max(len(kinds), 1)], kinds[int(p) % max(len(kinds), 1)]) for p in pairs],
                   pair_code.reshape(-1)))
        bools = {"gated", "layernorm", "parallel_attention", "flash", "causal", *MIX_BOOLS}
        cols: dict[str, NDArray[Any]] = {f: np.asarray(v, dtype=np.float64) for f, v in counts.items()}
        for rows, code in tables:
            for name in (rows[0] if rows else {}):
                cols[name] = np.asarray([r[name] for r in rows], dtype=bool if name in bools else np.float64)[code]
        if not len(arch_code):
            cols.update({f.name: np.zeros(0, dtype=bool if f.name in bools else np.float64) for f in fields(cls)})
        return cls(**cols)


def _arch_fields(arch: ModelArch) -> dict[str, Any]:
    """LayerBatch fields of an architecture."""
    return {
        "hidden": arch.hidden_size, "intermediate": arch.intermediate_size,
        "heads": arch.num_heads, "kv_heads": arch.num_kv_heads, "head_dim": arch.head_dim,
        "vocab": arch.vocab_size, "layers": arch.num_layers, "experts": arch.num_experts,
        "experts_per_token": arch.experts_per_token, "shared_experts": arch.num_shared_experts,
        "gated": arch.mlp_gated, "layernorm": arch.norm_type == "layernorm",
        "parallel_attention": arch.parallel_attention, "params": arch.param_count(),
        "routed_params": arch.num_moe_layers * arch.num_experts * arch.expert_params(), **arch_mix_fields(arch),
    }


def _kind_fields(req: Request) -> dict[str, Any]:
    """LayerBatch fields of a request's dtypes, attention flags and engine."""
    return {
        "flash": req.flash_attention, "causal": req.causal,
        "w_bytes": req.weight_bytes, "a_bytes": req.activation_bytes, "kv_bytes": req.kv_bytes,
        "engine": engine_level_index(req.engine), "quant": path_code(req.quantisation),
    }


def _device_fields(gpu: GPU, req: Request) -> dict[str, Any]:
    """LayerBatch fields of a GPU running a request's compute dtype."""
    peak = tensor_peak_ops_per_s(gpu, req.compute_dtype, get_engine(req.engine).fp16_accumulate)  # type: ignore[arg-type]
    return {
        "peak_ops_per_s": peak, "peak_boost": peak / gpu.peak_ops_per_s(req.compute_dtype),  # type: ignore[arg-type]
        "mem_bw_bytes_per_s": gpu.memory_bandwidth_bytes_per_s,
        "net_bw_bytes_per_s": gpu.interconnect_bytes_per_s,
        "mem_capacity_bytes": gpu.memory_bytes, "tdp_w": gpu.tdp_w,
    }


def present_kernels(batch: LayerBatch) -> dict[str, NDArray[np.bool_]]:
    """Which kernels each request's layer holds (bool array per kernel name)."""
    ones = np.ones(len(batch), dtype=bool)
    multi = batch.tp > 1
    mlp_multi = multi | all_to_all_rows(batch)  # the MLP's collective: TP all-reduce and/or the experts' all-to-all
    return {
        "norm_attn": ones, "q_proj": ones, "k_proj": ones, "v_proj": ones,
        "fuse_attn": batch.flash, "matmul_qk": ~batch.flash, "softmax": ~batch.flash, "matmul_sv": ~batch.flash,
        "out_proj": ones, "all_reduce_attn": multi, "add_attn": ones, "norm_mlp": ones,
        "router": batch.moe, "gate_proj": batch.gated, "up_proj": ones, "act_mlp": ones, "down_proj": ones,
        "all_reduce_mlp": mlp_multi, "add_mlp": ones,
    }


def layer_costs(b: LayerBatch, phase: str) -> dict[str, K.KernelCost]:
    """Every kernel's cost in ``phase`` for every request (absent kernels included; mask with
    :func:`present_kernels`). Ops and bytes are per GPU for the whole phase (under expert parallelism,
    on a GPU of the busiest attention group: :func:`~llmco2.analytic.experts.rank_view`)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    b = rank_view(b)
    tokens = K.phase_tokens(b.batch, b.prompt, b.generated, phase)
    passes = K.weight_passes(b.generated, phase)
    per_pass = tokens / np.where(passes > 0, passes, 1.0)
    q_dim = b.heads * b.head_dim
    kv_heads = np.maximum(b.kv_heads, b.tp)  # above the KV heads every rank keeps a replica (vLLM, SGLang)
    kv_dim = kv_heads * b.head_dim
    pairs = K.attended_positions(b.prompt, b.generated, phase, b.causal)
    flash_kv = K.flash_kv_positions(b.prompt, b.generated, phase, b.causal)
    plain_kv = b.prompt if phase == "prefill" else pairs
    w, a, kv, tp = b.w_bytes, b.a_bytes, b.kv_bytes, b.tp
    active = b.experts_per_token + b.shared_experts
    moe_args = (per_pass, b.experts, b.experts_per_token, b.shared_experts, w, a)
    plain = {
        "norm_attn": K.norm_cost(tokens, b.hidden, a, b.layernorm),
        "q_proj": K.linear_cost(tokens, b.hidden, q_dim, tp, passes, w, a, split="column"),
        "k_proj": K.linear_cost(tokens, b.hidden, kv_dim, tp, passes, w, a, kv, split="column", stores_kv=True),
        "v_proj": K.linear_cost(tokens, b.hidden, kv_dim, tp, passes, w, a, kv, split="column", stores_kv=True),
        "fuse_attn": K.fused_attention_cost(b.batch, tokens, pairs, flash_kv, b.heads, kv_heads, b.head_dim, tp, a, kv),
        "matmul_qk": K.matmul_qk_cost(b.batch, tokens, pairs, plain_kv, b.heads, kv_heads, b.head_dim, tp, a, kv),
        "softmax": K.softmax_cost(b.batch, pairs, b.heads, tp, a),
        "matmul_sv": K.matmul_sv_cost(b.batch, tokens, pairs, plain_kv, b.heads, kv_heads, b.head_dim, tp, a, kv),
        "out_proj": K.linear_cost(tokens, q_dim, b.hidden, tp, passes, w, a, split="row"),
        "all_reduce_attn": K.all_reduce_cost(tokens, b.hidden, tp, a),
        "add_attn": K.residual_add_cost(tokens, b.hidden, a),
        "norm_mlp": K.norm_cost(tokens, b.hidden, a, b.layernorm),
        "router": K.linear_cost(tokens, b.hidden, np.where(b.moe, b.experts, 0.0), tp, passes, w, a, split="replicated"),
        "gate_proj": K.expert_linear_cost(tokens, b.hidden, b.intermediate, tp, passes, *moe_args, split="column"),
        "up_proj": K.expert_linear_cost(tokens, b.hidden, b.intermediate, tp, passes, *moe_args, split="column"),
        "act_mlp": K.mlp_activation_cost(tokens, b.intermediate, tp, active, a, b.gated),
        "down_proj": K.expert_linear_cost(tokens, b.intermediate, b.hidden, tp, passes, *moe_args, split="row"),
        "all_reduce_mlp": K.all_reduce_cost(tokens, b.hidden, tp, a),
        "add_mlp": K.residual_add_cost(tokens, b.hidden, a),
    }
    mixed = mixed_layer_costs(b, phase, plain, tokens, passes, per_pass, pairs, flash_kv)
    return quantised_costs(b, phase, expert_parallel_costs(b, phase, plain, mixed))


@dataclass(frozen=True)
class LayerAnalysis:
    """Costs and rooflines of every kernel of a layer for ``n`` requests, both phases.

    ``costs[phase][kernel]`` and ``roofline[phase][kernel]`` are arrays over requests;
    absent kernels (``present[kernel]`` false) hold zeros.
    """

    batch: LayerBatch
    present: dict[str, NDArray[np.bool_]]
    costs: dict[str, dict[str, K.KernelCost]]
    roofline: dict[str, dict[str, RooflinePoint]]

    def total(self, phase: str, quantity: str = "ops") -> Array:
        """Sum of ``quantity`` (a `KernelCost` field, ``mem_bytes``, or ``time_s``) over the layer."""
        out = np.zeros(len(self.batch))
        for name in KERNEL_NAMES:
            if quantity == "time_s":
                value = self.roofline[phase][name].time_s
            else:
                value = getattr(self.costs[phase][name], quantity)
            out = out + np.where(self.present[name], value, 0.0)
        return out


def analyze_layers(batch: LayerBatch) -> LayerAnalysis:
    """Costs and roofline of every kernel, both phases, all requests at once."""
    present = present_kernels(batch)
    costs: dict[str, dict[str, K.KernelCost]] = {}
    for phase in PHASES:
        raw = layer_costs(batch, phase)
        costs[phase] = {n: c if _all(present[n]) else c.scaled(present[n]) for n, c in raw.items()}
    return LayerAnalysis(batch, present, costs, rooflines(costs, batch))


def on_hardware(analysis: LayerAnalysis, batch: LayerBatch) -> LayerAnalysis:
    """``analysis`` of the same requests on the hardware of ``batch`` (its peak, bandwidths, memory
    and power limit; every other field as in ``analysis.batch``): a kernel's operations and bytes do
    not depend on the GPU, so only the roofline is recomputed. Equal to ``analyze_layers(batch)``."""
    return LayerAnalysis(batch, analysis.present, analysis.costs, rooflines(analysis.costs, batch))


def rooflines(costs: dict[str, dict[str, K.KernelCost]], batch: LayerBatch) -> dict[str, dict[str, RooflinePoint]]:
    """Roofline point of every kernel of ``costs`` (per phase) on ``batch``'s GPUs."""
    zero = np.zeros(len(batch))
    return {phase: {n: roofline_point(c.ops, c.mem_bytes, c.net_bytes + zero, batch.peak_ops_per_s, batch.mem_bw_bytes_per_s,
                                      batch.net_bw_bytes_per_s, network_kernel=_SPEC[n].kind == "all_reduce")
                    for n, c in by_name.items()}
            for phase, by_name in costs.items()}


def _all(mask: NDArray[np.bool_]) -> bool:
    return bool(np.all(mask))


def analyze_layer(arch: ModelArch, request: Request, gpu: GPU, check_context: bool = True) -> LayerAnalysis:
    """Validate one request (``check_context``: its tokens fit the model's context) and analyse its
    layer (a batch of one)."""
    return analyze_layers(LayerBatch.from_items([(arch, request, gpu)], check_context=check_context))


def stack(items: Sequence[tuple[ModelArch, Request, GPU]]) -> LayerBatch:
    """Shorthand for :meth:`LayerBatch.from_items`."""
    return LayerBatch.from_items(items)
