"""Per-chip cost of one multi-head attention block under tensor (TP) and context (CP) parallelism.

Implements the rules of the parallel-attention golden cases (seed 003) in exact integer
arithmetic. Conventions: GEMM ``(M x K) @ (K x N)`` costs ``2*M*K*N`` FLOPs; memory figures are
resident bytes (weights, activations, KV cache); ``communication_bytes`` is the logical payload
per chip for the layer (not ring-injected bytes); every ``*_total`` is the per-chip figure times
the number of chips (``tp * cp``).

Sharding rules:

* TP shards heads: ``h_local = h/tp``, ``d_local = d/tp``; Q/K/V projections are column-parallel
  (``[M, d] @ [d, d_local]``), the output projection row-parallel (``[M, d_local] @ [d_local, d]``);
  weights are split over TP and replicated over CP; the KV cache is split over both.
* CP shards the sequence: in prefill each chip owns ``S/cp`` query tokens and attends over the
  full context (``kv-sharded``: partial softmax over local KV then all-reduces of FP32 max/sum
  statistics and of partial outputs; ``kv-allgather``: all-gather K and V first). In decode the
  query cannot be split: it is replicated and each chip attends over its ``S_k/cp`` KV slice.
* With ``tp > 1`` the full hidden ``[M, d]`` is materialised after the block (all-reduce /
  all-gather, payload ``M*d*bytes``) unless ``materialize_hidden`` is false, in which case the
  output stays ``[M, d_local]`` and no TP traffic is counted.
* Decode: ``decode_projections`` says which projections of the new tokens are counted
  (``qkv``, ``q`` or ``none``; the output projection always is); ``kv_len`` says whether the
  attended/cached length includes the new tokens (``total`` = past + new) or not (``past``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmco2.errors import InvalidInputError

CP_MODES = ("kv-sharded", "kv-allgather")
DECODE_PROJECTIONS = ("qkv", "q", "none")
KV_LENS = ("total", "past")
RESULT_KEYS = (
    "flops_per_chip", "weight_memory_per_chip", "activation_memory_per_chip", "kv_cache_per_chip",
    "flops_total", "weight_memory_total", "activation_memory_total", "kv_cache_total", "communication_bytes",
)


@dataclass(frozen=True)
class AttentionCost:
    """Per-chip and aggregate cost of one attention block (integers: FLOPs and bytes)."""

    flops_per_chip: int
    weight_memory_per_chip: int
    activation_memory_per_chip: int
    kv_cache_per_chip: int
    flops_total: int
    weight_memory_total: int
    activation_memory_total: int
    kv_cache_total: int
    communication_bytes: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _check_divides(divisor: int, value: int, what: str, field: str) -> int:
    if divisor <= 0:
        raise InvalidInputError(f"must be a positive integer, got {divisor}", field=field)
    if value % divisor:
        raise InvalidInputError(f"{field.replace('_', '-')} {divisor} must divide {what} {value}", field=field)
    return value // divisor


def _positive(value: int, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"must be an integer >= {minimum}, got {value!r}", field=field)
    return value


def attention_cost(
    hidden_size: int,
    num_heads: int,
    batch_size: int,
    seq_len: int,
    phase: str = "prefill",
    new_tokens: int = 1,
    tp: int = 1,
    cp: int = 1,
    cp_mode: str = "kv-sharded",
    decode_projections: str = "qkv",
    kv_len: str = "total",
    materialize_hidden: bool = True,
    bytes_per_elem: int = 2,
    softmax_stat_bytes: int = 4,
) -> AttentionCost:
    """Cost of one MHA block (Q, K, V, O projections and attention) on each of ``tp*cp`` chips.

    ``seq_len`` is the prompt length in prefill and the past (cached) length in decode.
    Raises `InvalidInputError` naming the field when a degree does not divide its dimension.
    """
    d = _positive(hidden_size, "hidden_size")
    h = _positive(num_heads, "num_heads")
    B = _positive(batch_size, "batch_size")
    S = _positive(seq_len, "seq_len")
    T = _positive(new_tokens, "new_tokens")
    bpe = _positive(bytes_per_elem, "bytes_per_elem")
    stat = _positive(softmax_stat_bytes, "softmax_stat_bytes")
    if phase not in ("prefill", "decode"):
        raise InvalidInputError(f"must be prefill or decode, got {phase!r}", field="phase")
    if cp_mode not in CP_MODES:
        raise InvalidInputError(f"must be one of {', '.join(CP_MODES)}, got {cp_mode!r}", field="cp_mode")
    if decode_projections not in DECODE_PROJECTIONS:
        raise InvalidInputError(f"must be one of {', '.join(DECODE_PROJECTIONS)}, got {decode_projections!r}",
                                field="decode_projections")
    if kv_len not in KV_LENS:
        raise InvalidInputError(f"must be one of {', '.join(KV_LENS)}, got {kv_len!r}", field="kv_len")
    dh = _check_divides(h, d, "hidden_size", "num_heads")
    h_local = _check_divides(_positive(tp, "tp"), h, "num_heads", "tp")
    d_local = h_local * dh
    _positive(cp, "cp")
    chips = tp * cp

    if phase == "prefill":
        given = [name for name, value, default in (("new_tokens", T, 1), ("decode_projections", decode_projections, "qkv"),
                                                   ("kv_len", kv_len, "total")) if value != default]
        if given:  # they describe decode steps; a prefill would ignore them
            verb = "applies" if len(given) == 1 else "apply"
            raise InvalidInputError(f"{', '.join(f'`{g}`' for g in given)} only {verb} to decode (`phase='decode'`); leave "
                                    f"{'it' if len(given) == 1 else 'them'} out for a prefill", field=given[0])
        s_local = _check_divides(cp, S, "seq_len", "cp")
        m = B * s_local  # query tokens on this chip
        n_proj = 3
        s_attended = S  # every chip's queries see the full context (summed over KV shards)
        kv_cached_local = s_local
        kv_gather_len = S
    else:
        s_k = S + T if kv_len == "total" else S
        kv_cached_local = _check_divides(cp, s_k, "the KV length", "cp")
        m = B * T  # new tokens: replicated over CP
        n_proj = {"qkv": 3, "q": 1, "none": 0}[decode_projections]
        s_attended = kv_cached_local
        kv_gather_len = s_k

    q_tokens = m // B
    proj_flops = n_proj * 2 * m * d * d_local
    scores_flops = 2 * B * h_local * q_tokens * s_attended * dh
    apply_v_flops = scores_flops
    out_flops = 2 * m * d_local * d
    flops = proj_flops + scores_flops + apply_v_flops + out_flops

    weights = 4 * d * d_local * bpe
    y_width = d if materialize_hidden else d_local
    activations = (m * d + n_proj * m * d_local + m * y_width) * bpe
    kv_cache = 2 * B * kv_cached_local * d_local * bpe

    comm = 0
    if tp > 1 and materialize_hidden:
        comm += m * d * bpe
    if cp > 1:
        if cp_mode == "kv-sharded":
            comm += B * q_tokens * h_local * 2 * stat  # FP32 max and sum per query token and head
            comm += m * d_local * bpe  # partial outputs
        else:
            comm += 2 * B * kv_gather_len * d_local * bpe  # all-gather K and V

    return AttentionCost(
        flops_per_chip=flops,
        weight_memory_per_chip=weights,
        activation_memory_per_chip=activations,
        kv_cache_per_chip=kv_cache,
        flops_total=flops * chips,
        weight_memory_total=weights * chips,
        activation_memory_total=activations * chips,
        kv_cache_total=kv_cache * chips,
        communication_bytes=comm,
    )
