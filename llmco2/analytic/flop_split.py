"""FLOPs of a Qwen2-style decoder split by execution unit, and Model FLOPs Utilization (seed 001).

Seed 001 counts the work of every module of a Qwen2 model (``embed_tokens``, ``rotary_emb`` and,
per decoder layer, ``q/k/v/o_proj``, ``attention_interface``, ``apply_rotary_pos_emb``,
``gate/up/down_proj``, ``act_fn``, the two RMSNorms and the residual adds) on three kinds of GPU
hardware:

* **tensor core**: the matmuls (a multiply-add counts 2 FLOPs);
* **CUDA core**: element-wise arithmetic (bias adds, scaling, softmax, RoPE, SiLU, RMSNorm, residual);
* **SFU** (special function unit): ``exp``, ``rsqrt`` and the sigmoid's exponential.

All counts are exact Python ints, in FLOPs, for the whole batch (``batch_size`` sequences of
``seqlen_q`` query tokens attending over ``seqlen_kv`` key/value positions). Attention scores are
counted over the full ``seqlen_q x seqlen_kv`` rectangle, as the seed does (no causal halving).

Two regimes, as in the seed:

* prefill / training forward: ``seqlen_q = seqlen_kv = SEQ_LEN``;
* decode with a KV cache: one new token per sequence (``seqlen_q = 1``) attending over ``SEQ_LEN``
  cached positions; pass ``kv_cache=True`` so that K/V are projected (and rotated) for the new
  tokens only, as the seed's decode section does. Without it the seed's forward formulas project
  K/V over all ``seqlen_kv`` positions (no cache).

Backward formulas: the seed gives them for ``gate/up/down_proj``, ``act_fn``, the RMSNorms, the
residual, ``embed_tokens`` and ``rotary_emb``. Where it leaves them blank this module applies the
rules in :data:`BACKWARD_RULES`.

Model FLOPs Utilization follows PaLM (Chowdhery et al. 2022, App. B), cited by the seed: the
"model FLOPs" are the tensor-core matmul FLOPs of the forward (and backward) pass, without
rematerialisation, divided by elapsed time and by the peak of all GPUs used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmco2.analytic.checks import positive_int as _positive_int
from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import GPU
from llmco2.specs.models import ModelArch

PHASES = ("prefill", "decode")

#: Modules counted once per model; every other key of :func:`module_flops` is per decoder layer.
ONCE_MODULES = ("embed_tokens", "rotary_emb")

#: Per-layer modules, in the seed's order.
LAYER_MODULES = (
    "q_proj", "k_proj", "v_proj", "o_proj", "attention_interface", "apply_rotary_pos_emb",
    "gate_proj", "up_proj", "act_fn", "down_proj", "input_layernorm", "post_attention_layernorm", "residual",
)

#: Backward counts the seed leaves blank, and the rule used here for each.
BACKWARD_RULES: tuple[tuple[str, str], ...] = (
    ("q/k/v/o_proj tensor core", "dweight + dinput = 2x the forward matmul FLOPs (standard linear-layer rule)"),
    ("q/k/v_proj CUDA core", "dbias = sum of doutput over tokens: batch*tokens*out_dim additions (o_proj has no bias: 0)"),
    ("attention_interface tensor core", "dQ, dK, dV, dP = 2x the forward QK^T and PV matmuls"),
    ("attention_interface CUDA core", "softmax backward P*(dP - rowsum(dP*P)) = 4 ops per score, plus 1 for the "
                                      "scaling: 5*batch*heads*seqlen_q*seqlen_kv"),
    ("attention_interface SFU", "0: probabilities are saved, no exp is recomputed (the seed's first option for act_fn)"),
    ("apply_rotary_pos_emb CUDA core", "the transposed rotation costs what the forward does: 3 ops per rotated element"),
)


@dataclass(frozen=True)
class FlopSplit:
    """FLOPs by execution unit (exact ints); :attr:`total` is their sum."""

    tensor_core: int = 0
    cuda_core: int = 0
    sfu: int = 0

    @property
    def total(self) -> int:
        """tensor_core + cuda_core + sfu (FLOPs)."""
        return self.tensor_core + self.cuda_core + self.sfu

    def __add__(self, other: FlopSplit) -> FlopSplit:
        if not isinstance(other, FlopSplit):
            return NotImplemented
        return FlopSplit(self.tensor_core + other.tensor_core, self.cuda_core + other.cuda_core, self.sfu + other.sfu)

    def scaled(self, factor: int) -> FlopSplit:
        """Every unit multiplied by the integer ``factor`` (e.g. the number of layers)."""
        return FlopSplit(self.tensor_core * factor, self.cuda_core * factor, self.sfu * factor)


# -- validation -------------------------------------------------------------------------------------
def _positive_float(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"must be a positive finite number, got {value!r}", field=field)
    return float(value)


def _phase(phase: str) -> str:
    if phase not in PHASES:
        raise InvalidInputError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}", field="phase")
    return phase


def _active_mlps(arch: ModelArch) -> int:
    """MLPs each token runs through: 1 for a dense model, routed + shared experts for an MoE (router not counted)."""
    return arch.experts_per_token + arch.num_shared_experts if arch.is_moe else 1


# -- per-module counts ------------------------------------------------------------------------------
def _linear(tokens: int, d_in: int, d_out: int, bias: bool, backward: bool) -> FlopSplit:
    """A linear layer over ``tokens`` rows: 2*tokens*d_in*d_out matmul FLOPs (+ tokens*d_out bias adds).

    Backward: dweight + dinput = 2x the forward matmul; dbias = tokens*d_out additions.
    """
    matmul = 2 * tokens * d_in * d_out
    return FlopSplit(tensor_core=2 * matmul if backward else matmul, cuda_core=tokens * d_out if bias else 0)


def _attention(arch: ModelArch, batch: int, seqlen_q: int, seqlen_kv: int, backward: bool) -> FlopSplit:
    """QK^T and PV (2*B*q_dim*sq*skv each), scaling (1/score), softmax (3/score CUDA + 1/score SFU)."""
    scores = batch * arch.num_heads * seqlen_q * seqlen_kv
    matmuls = 4 * batch * arch.q_dim * seqlen_q * seqlen_kv
    if backward:
        return FlopSplit(tensor_core=2 * matmuls, cuda_core=5 * scores, sfu=0)
    return FlopSplit(tensor_core=matmuls, cuda_core=scores + 3 * scores, sfu=scores)


def _rms_norm(tokens: int, hidden: int, backward: bool) -> FlopSplit:
    """Seed RMSNorm: forward 4*tokens*H + 2*tokens CUDA + tokens SFU (rsqrt);
    backward dinput 8*tokens*H + 2*tokens plus dgamma 3*tokens*H, no SFU (rrms saved)."""
    if backward:
        return FlopSplit(cuda_core=11 * tokens * hidden + 2 * tokens)
    return FlopSplit(cuda_core=4 * tokens * hidden + 2 * tokens, sfu=tokens)


def module_flops(arch: ModelArch, batch_size: int, seqlen_q: int, seqlen_kv: int, *,
                 backward: bool = False, kv_cache: bool = False) -> dict[str, FlopSplit]:
    """FLOPs of each module of ONE decoder layer, plus ``embed_tokens`` and ``rotary_emb`` (counted once).

    Formulas are seed 001's per-module ones (``B`` = batch_size, ``sq`` = seqlen_q, ``skv`` =
    seqlen_kv, ``H`` hidden, ``I`` intermediate, ``q_dim = heads*head_dim``, ``kv_dim =
    kv_heads*head_dim``, ``T = skv`` K/V tokens, or ``sq`` with ``kv_cache=True``):

    * embed_tokens: 0 (a gather); rotary_emb: H*sq CUDA + H*sq SFU forward, 0 backward;
    * q_proj 2*B*sq*H*q_dim, k_proj/v_proj 2*B*T*H*kv_dim, o_proj 2*B*sq*H*q_dim tensor core, plus
      bias adds B*sq*q_dim / B*T*kv_dim CUDA when ``arch.attention_bias`` (Qwen2: yes; o_proj: never);
    * attention_interface: 4*B*q_dim*sq*skv tensor core, 4*B*heads*sq*skv CUDA, B*heads*sq*skv SFU;
    * apply_rotary_pos_emb: 3*B*sq*q_dim + 3*B*T*kv_dim CUDA;
    * gate/up/down_proj 2*B*sq*H*I each (backward 4*B*sq*H*I); act_fn 2*B*sq*I CUDA + B*sq*I SFU
      (backward 6*B*sq*I CUDA, 0 SFU: the seed's first option);
    * input/post_attention_layernorm: see :func:`_rms_norm`; residual: 2*B*sq*H both ways.

    Like the seed, the element-wise ``act_fn(gate) * up`` product is not counted. Non-gated MLPs
    have ``gate_proj`` = 0; MoE MLP modules are multiplied by the experts each token uses
    (routed + shared; router not counted). Every norm is counted as the seed's RMSNorm.
    Blank backward entries of the seed follow :data:`BACKWARD_RULES`.

    Returns:
        module name -> `FlopSplit` (FLOPs, forward or backward only as asked).
    """
    b = _positive_int(batch_size, "batch_size")
    sq = _positive_int(seqlen_q, "seqlen_q")
    skv = _positive_int(seqlen_kv, "seqlen_kv")
    kv_tokens = b * (sq if kv_cache else skv)
    q_tokens = b * sq
    h, i, bias = arch.hidden_size, arch.intermediate_size, arch.attention_bias
    experts = _active_mlps(arch)
    mlp_linear = _linear(q_tokens, h, i, False, backward).scaled(experts)
    rope_cuda = 3 * q_tokens * arch.q_dim + 3 * kv_tokens * arch.kv_dim
    out = {
        "embed_tokens": FlopSplit(),
        "rotary_emb": FlopSplit() if backward else FlopSplit(cuda_core=h * sq, sfu=h * sq),
        "q_proj": _linear(q_tokens, h, arch.q_dim, bias, backward),
        "k_proj": _linear(kv_tokens, h, arch.kv_dim, bias, backward),
        "v_proj": _linear(kv_tokens, h, arch.kv_dim, bias, backward),
        "o_proj": _linear(q_tokens, arch.q_dim, h, False, backward),
        "attention_interface": _attention(arch, b, sq, skv, backward),
        "apply_rotary_pos_emb": FlopSplit(cuda_core=rope_cuda),
        "gate_proj": mlp_linear if arch.mlp_gated else FlopSplit(),
        "up_proj": mlp_linear,
        "act_fn": FlopSplit(cuda_core=(6 if backward else 2) * q_tokens * i,
                            sfu=0 if backward else q_tokens * i).scaled(experts),
        "down_proj": mlp_linear,
        "input_layernorm": _rms_norm(q_tokens, h, backward),
        "post_attention_layernorm": _rms_norm(q_tokens, h, backward),
        "residual": FlopSplit(cuda_core=2 * q_tokens * h),
    }
    return out


def model_flops(arch: ModelArch, batch_size: int, seqlen_q: int, seqlen_kv: int, *,
                backward: bool = False, kv_cache: bool = False) -> FlopSplit:
    """Whole-model FLOPs: embed_tokens + rotary_emb once, plus every layer module x ``num_layers``.

    Sums :func:`module_flops` (same arguments; forward or backward only, not both).
    """
    modules = module_flops(arch, batch_size, seqlen_q, seqlen_kv, backward=backward, kv_cache=kv_cache)
    once = sum((modules[name] for name in ONCE_MODULES), FlopSplit())
    layer = sum((modules[name] for name in LAYER_MODULES), FlopSplit())
    return once + layer.scaled(arch.num_layers)


# -- the seed's "Total" sections ---------------------------------------------------------------------
def matmul_totals(arch: ModelArch, batch_size: int, seq_len: int, phase: str) -> dict[str, int]:
    """Seed 001's whole-model "Total" (attention + linear matmuls only, no bias), in FLOPs.

    ``phase="prefill"``: the forward section, ``GBS`` sequences of ``SEQ_LEN`` tokens (``SEQ_LEN^2``
    scores per head). ``phase="decode"``: the decode section, one new token per sequence attending
    over ``SEQ_LEN`` cached positions. With ``L`` layers and ``t`` = SEQ_LEN (prefill) or 1 (decode):

    * q_proj = o_proj = 2*GBS*t*L*H*(heads*head_dim); k_proj = v_proj = 2*GBS*t*L*H*(kv_heads*head_dim);
    * qk = pv = 2*GBS*L*heads*t*SEQ_LEN*head_dim;
    * self_attn_total = 4*GBS*t*L*H*q_dim + 4*GBS*t*L*H*kv_dim + 4*GBS*L*heads*t*SEQ_LEN*head_dim;
    * gate_proj = up_proj = down_proj = 2*GBS*t*L*H*I; mlp_total = 6*GBS*t*L*H*I (4x for a
      non-gated MLP, whose gate_proj is 0; times routed + shared experts for an MoE);
    * total = self_attn_total + mlp_total (equals the forward tensor-core FLOPs of :func:`model_flops`,
      ``kv_cache=True`` for decode).
    """
    gbs = _positive_int(batch_size, "batch_size")
    s = _positive_int(seq_len, "seq_len")
    t = s if _phase(phase) == "prefill" else 1
    n_l, h, i = arch.num_layers, arch.hidden_size, arch.intermediate_size
    q_dim, kv_dim, heads, d = arch.q_dim, arch.kv_dim, arch.num_heads, arch.head_dim
    mlp_proj = 2 * gbs * t * n_l * h * i * _active_mlps(arch)
    out = {
        "q_proj": 2 * gbs * t * n_l * h * q_dim,
        "k_proj": 2 * gbs * t * n_l * h * kv_dim,
        "v_proj": 2 * gbs * t * n_l * h * kv_dim,
        "o_proj": 2 * gbs * t * n_l * h * q_dim,
        "qk": 2 * gbs * n_l * heads * t * s * d,
        "pv": 2 * gbs * n_l * heads * t * s * d,
        "self_attn_total": 4 * gbs * t * n_l * h * q_dim + 4 * gbs * t * n_l * h * kv_dim + 4 * gbs * n_l * heads * t * s * d,
        "gate_proj": mlp_proj if arch.mlp_gated else 0,
        "up_proj": mlp_proj,
        "down_proj": mlp_proj,
        "mlp_total": (3 if arch.mlp_gated else 2) * mlp_proj,
    }
    out["total"] = out["self_attn_total"] + out["mlp_total"]
    return out


# -- Model FLOPs Utilization -------------------------------------------------------------------------
def mfu(achieved_flops: float, elapsed_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs Utilization: achieved_flops / elapsed_s / peak_flops_per_s (a fraction, 0.5 = 50%).

    ``achieved_flops`` in FLOPs (>= 0), ``elapsed_s`` in seconds, ``peak_flops_per_s`` in FLOP/s.
    """
    if isinstance(achieved_flops, bool) or not isinstance(achieved_flops, (int, float)) \
            or not math.isfinite(achieved_flops) or achieved_flops < 0:
        raise InvalidInputError(f"must be a finite number >= 0, got {achieved_flops!r}", field="achieved_flops")
    elapsed = _positive_float(elapsed_s, "elapsed_s")
    peak = _positive_float(peak_flops_per_s, "peak_flops_per_s")
    utilisation = achieved_flops / elapsed / peak
    if not math.isfinite(utilisation):  # a time so short that the ratio overflows a float
        raise InvalidInputError(f"is too short for {achieved_flops:.4g} FLOPs at a peak of {peak:.4g} FLOP/s: "
                                f"the MFU would be infinite, got {elapsed_s!r}", field="elapsed_s")
    return utilisation


def model_flops_utilization(arch: ModelArch, gpu: GPU, dtype: str, batch_size: int, seq_len: int,
                            elapsed_s: float, num_gpus: int = 1, backward: bool = False) -> float:
    """MFU of one forward (``backward=True``: forward + backward) pass over ``batch_size`` x ``seq_len`` tokens.

    Model FLOPs (PaLM's definition, as cited by seed 001) = the tensor-core FLOPs of
    :func:`model_flops` with ``seqlen_q = seqlen_kv = seq_len`` (forward = ``matmul_totals(...,
    "prefill")["total"]``; backward adds 2x that). Divided by ``elapsed_s`` seconds and by
    ``num_gpus`` x the GPU's dense ``dtype`` peak (FLOP/s). Returns a fraction.
    """
    elapsed = _positive_float(elapsed_s, "elapsed_s")
    gpus = _positive_int(num_gpus, "num_gpus")
    flops = model_flops(arch, batch_size, seq_len, seq_len).tensor_core
    if backward:
        flops += model_flops(arch, batch_size, seq_len, seq_len, backward=True).tensor_core
    return mfu(flops, elapsed, gpus * gpu.peak_ops_per_s(dtype))
