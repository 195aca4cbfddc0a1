"""Reference tables of the seed notes, kept beside the kernel DAG as hand-checkable cross-checks.

**Seed 000** — a per-layer table of a decoder layer for prefill and decode: 15 rows (1 embedding,
once; 2-14 per layer; 15 the LM head, once) with compute (FLOPs, a multiply-add = 2), memory
access (ELEMENTS, not bytes: multiply by the dtype size for bytes) and communication (elements).
Symbols: ``B`` batch, ``S`` sequence length (prefill: prompt length; decode: cached length, one
new token per sequence), ``H`` hidden, ``I`` intermediate, ``v`` vocabulary, ``n`` KV heads, ``d``
head dim, ``tp`` tensor-parallel degree. As in the seed, the query width is taken as ``H`` (the
seed writes ``HH`` for Q and O, i.e. assumes ``heads*d = H``), compute and memory are not divided
by ``tp``, and decode memory does not count reading the KV cache (row 5 writes the new K/V only).

Evident typos of the seed are fixed; each fix is in :data:`SEED000_FIXES` (row, as printed, as
implemented):

* decode row 2 (LayerNorm): printed ``4BSH`` compute and memory; one token per sequence gives ``4BH``;
* decode row 9 (LayerNorm): printed ``4BSH`` compute (its memory is already ``4BH``); ``4BH``;
* row 10 (Up and Gate): compute ``4BHI / 2BHI`` is gated / plain, but memory is printed
  ``HI / 2HI``: gated MLPs read ``2HI`` weights and plain ones ``HI`` (chosen by ``arch.mlp_gated``);
* row 11 (Gate*Up) exists only for a gated MLP (omitted otherwise);
* prefill rows 1 and 15 (Embedding): memory printed ``SvH``; the ``vH`` table is read once, as in
  decode and as every other weight row (3, 7, 10, 13) is independent of ``B`` and ``S``.

The communication formulas are kept **as printed** (they are the seed's own model: e.g. the decode
all-reduce is ``BH(tp-1)/tp`` but the prefill one ``2BSH``, and rows 6, 8 (prefill) and 14 (prefill)
are nonzero even at ``tp = 1``). The layer DAG (:mod:`llmco2.analytic.kernels`) uses the paper's
all-reduce equations instead.

**Seed 004** — FLOPs, bytes and arithmetic intensity of a ``Z``-billion-parameter fp16 model of
``N`` layers and the A100-80GB roofline (ridge 312e12 / 2039e9 ~ 153 FLOPs/byte). These are the
seed's simplified formulas (dense ``4H`` MLP, multi-head attention with ``H x H`` projections,
embedding and LM head excluded from FLOPs, KV cache counted as ``B*S_c*H`` elements), kept as a
reference beside the kernel DAG, not used by it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmco2.analytic.checks import positive_int as _positive_int
from llmco2.errors import InvalidInputError
from llmco2.specs.models import ModelArch

PHASES = ("prefill", "decode")

#: Fixes applied to seed 000's table: (row, as printed, as implemented).
SEED000_FIXES: tuple[tuple[str, str, str], ...] = (
    ("decode 2 (LayerNorm)", "compute 4BSH, memory 4BSH", "compute 4BH, memory 4BH (one new token per sequence)"),
    ("decode 9 (LayerNorm)", "compute 4BSH", "compute 4BH (memory 4BH as printed)"),
    ("prefill 10 (Up and Gate)", "compute 4BSHI / 2BSHI, memory HI / 2HI",
     "gated: compute 4BSHI, memory 2HI; plain: compute 2BSHI, memory HI (arch.mlp_gated)"),
    ("decode 10 (Up and Gate)", "compute 4BHI / 2BHI, memory HI / 2HI",
     "gated: compute 4BHI, memory 2HI; plain: compute 2BHI, memory HI (arch.mlp_gated)"),
    ("11 (Gate*Up)", "always present", "only for a gated MLP"),
    ("prefill 1 and 15 (Embedding)", "memory SvH", "memory vH (the table is read once, as in decode)"),
)

#: Rows counted once per model (embedding and LM head); rows 2-14 repeat per layer.
ONCE_ROWS = (1, 15)


@dataclass(frozen=True)
class TableRow:
    """One row of seed 000's table: compute in FLOPs, memory and communication in elements."""

    index: int
    name: str
    compute: int
    memory: int
    communication: float


def _phase(phase: str) -> str:
    if phase not in PHASES:
        raise InvalidInputError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}", field="phase")
    return phase


# -- seed 000 -----------------------------------------------------------------------------------------
def _communication(batch: int, seq_len: int, hidden: int, tp: int, prefill: bool) -> tuple[float, float, float]:
    """Seed 000's rows 6 (AllGather), 8 (AllReduce) and 14 (AllGather), as printed (elements).

    Prefill: 4BSH/tp, 2BSH, 2BSH. Decode: 4BH/tp, BH(tp-1)/tp, 2BH(tp-1)/tp^2.
    """
    b, s, h = batch, seq_len, hidden
    if prefill:
        return 4 * b * s * h / tp, float(2 * b * s * h), float(2 * b * s * h)
    return 4 * b * h / tp, b * h * (tp - 1) / tp, 2 * b * h * (tp - 1) / tp**2


def layer_table(arch: ModelArch, batch_size: int, seq_len: int, phase: str, tp: int = 1) -> list[TableRow]:
    """Seed 000's table for one phase, with the fixes of :data:`SEED000_FIXES`.

    ``T`` below is the tokens per sequence processed: ``S`` in prefill, 1 in decode; ``S`` is the
    prompt length (prefill) or the cached length (decode).

    1. Embedding (once): 2BTvH compute, vH memory.  2. LayerNorm: 4BTH, 4BTH.
    3. QKV: 2BTHH + 4BTHnd, HH + 2Hnd.  4. Attention: 4BTSH, 0.  5. KV cache: 0, 2BTnd.
    6. AllGather.  7. O_proj: 2BTHH, HH.  8. AllReduce.  9. LayerNorm: 4BTH, 4BTH.
    10. Up and Gate: 4BTHI, 2HI (gated) or 2BTHI, HI.  11. Gate*Up (gated only): BTI, 0.
    12. activation: 0, 2BTI.  13. Down: 2BTHI, HI.  14. AllGather.  15. LM head: 2BTvH, vH.
    Communication rows 6, 8, 14: see :func:`_communication`.

    Returns:
        the rows in index order (14 rows for a non-gated MLP, which has no row 11).
    """
    b = _positive_int(batch_size, "batch_size")
    s = _positive_int(seq_len, "seq_len")
    tp = _positive_int(tp, "tp")
    prefill = _phase(phase) == "prefill"
    t = s if prefill else 1
    h, i, v = arch.hidden_size, arch.intermediate_size, arch.vocab_size
    n, d = arch.num_kv_heads, arch.head_dim
    gated = arch.mlp_gated
    comm6, comm8, comm14 = _communication(b, s, h, tp, prefill)
    rows = [
        TableRow(1, "Embedding(Once)", 2 * b * t * v * h, v * h, 0.0),
        TableRow(2, "LayerNorm", 4 * b * t * h, 4 * b * t * h, 0.0),
        TableRow(3, "QKV", 2 * b * t * h * h + 4 * b * h * t * n * d, h * h + 2 * h * n * d, 0.0),
        TableRow(4, "Attention", 4 * b * t * s * h, 0, 0.0),
        TableRow(5, "(mem)KVcache", 0, 2 * b * t * n * d, 0.0),
        TableRow(6, "(comm)AllGather", 0, 0, comm6),
        TableRow(7, "O_proj", 2 * b * t * h * h, h * h, 0.0),
        TableRow(8, "(comm)AllReduce", 0, 0, comm8),
        TableRow(9, "LayerNorm", 4 * b * t * h, 4 * b * t * h, 0.0),
        TableRow(10, "Up and Gate", (4 if gated else 2) * b * t * h * i, (2 if gated else 1) * h * i, 0.0),
        TableRow(11, "Gate*Up", b * t * i, 0, 0.0),
        TableRow(12, "(mem)activation", 0, 2 * b * t * i, 0.0),
        TableRow(13, "Down", 2 * b * t * h * i, h * i, 0.0),
        TableRow(14, "(comm)AllGather", 0, 0, comm14),
        TableRow(15, "Embedding(Once)", 2 * b * t * v * h, v * h, 0.0),
    ]
    return [row for row in rows if gated or row.index != 11]


def table_totals(rows: Iterable[TableRow]) -> dict[str, float]:
    """Sums of the given rows: compute (FLOPs, int), memory (elements, int), communication (elements)."""
    rows = list(rows)
    return {
        "compute": sum(r.compute for r in rows),
        "memory": sum(r.memory for r in rows),
        "communication": sum(r.communication for r in rows),
    }


def model_table_totals(arch: ModelArch, batch_size: int, seq_len: int, phase: str, tp: int = 1) -> dict[str, float]:
    """Whole-model sums of seed 000's table: rows 2-14 x ``num_layers`` + rows 1 and 15 once."""
    rows = layer_table(arch, batch_size, seq_len, phase, tp)
    once = table_totals(r for r in rows if r.index in ONCE_ROWS)
    layer = table_totals(r for r in rows if r.index not in ONCE_ROWS)
    return {key: once[key] + arch.num_layers * layer[key] for key in once}


# -- seed 004 -----------------------------------------------------------------------------------------
def _seed004_sizes(arch: ModelArch, batch: int, seq_len: int, phase: str, cached_len: int) -> tuple[int, int, int, bool]:
    b = _positive_int(batch, "batch")
    s = _positive_int(seq_len, "seq_len")
    if isinstance(cached_len, bool) or not isinstance(cached_len, int) or cached_len < 0:
        raise InvalidInputError(f"must be an integer >= 0, got {cached_len!r}", field="cached_len")
    prefill = _phase(phase) == "prefill"
    if prefill and cached_len:
        raise InvalidInputError("seed 004's prefill has no KV cache; give cached_len=0 or phase='decode'", field="cached_len")
    return b, s, cached_len, prefill


def seed004_flops(arch: ModelArch, batch: int, seq_len: int, phase: str, cached_len: int = 0) -> int:
    """Seed 004's transformer-layer FLOPs (embedding and LM head excluded).

    Prefill: N(24BSH^2 + 4BS^2H). Decode with ``seq_len`` = S_i new tokens and ``cached_len`` = S_c:
    N(24B S_i H^2 + 4B S_i S_c H). ``N`` = num_layers, ``H`` = hidden_size.
    """
    b, s, c, prefill = _seed004_sizes(arch, batch, seq_len, phase, cached_len)
    n, h = arch.num_layers, arch.hidden_size
    if prefill:
        return n * (24 * b * s * h**2 + 4 * b * s**2 * h)
    return n * (24 * b * s * h**2 + 4 * b * s * c * h)


def seed004_bytes(arch: ModelArch, batch: int, seq_len: int, phase: str, cached_len: int = 0,
                  params: float | None = None) -> float:
    """Seed 004's bytes moved for one forward pass, fp16 (2 bytes per parameter and element).

    Prefill: 2Z*1e9 + 4NBSH (weights once + layer input/output activations). Decode:
    2Z*1e9 + 8NBS_iH + 2NBS_cH (adds the new K/V stores and a ``B*S_c*H`` cache read, as the seed
    writes it). ``params`` = Z*1e9 parameters (default ``arch.param_count()``).
    """
    b, s, c, prefill = _seed004_sizes(arch, batch, seq_len, phase, cached_len)
    z = arch.param_count() if params is None else params
    if isinstance(z, bool) or not isinstance(z, (int, float)) or z <= 0:
        raise InvalidInputError(f"must be a positive parameter count, got {z!r}", field="params")
    n, h = arch.num_layers, arch.hidden_size
    weights = 2 * z
    if prefill:
        return weights + 4 * n * b * s * h
    return weights + 8 * n * b * s * h + 2 * n * b * c * h


def seed004_intensity(arch: ModelArch, batch: int, seq_len: int, phase: str, cached_len: int = 0,
                      params: float | None = None) -> float:
    """Arithmetic intensity (FLOPs per byte) = :func:`seed004_flops` / :func:`seed004_bytes`."""
    return seed004_flops(arch, batch, seq_len, phase, cached_len) / seed004_bytes(arch, batch, seq_len, phase, cached_len, params)


def seed004_bound(intensity: float, ridge: float) -> str:
    """``"compute"`` when ``intensity`` (FLOPs/byte) is at least the ``ridge`` point, else ``"memory"``."""
    if not ridge > 0:
        raise InvalidInputError(f"must be positive, got {ridge!r}", field="ridge")
    if not intensity >= 0:
        raise InvalidInputError(f"must be >= 0, got {intensity!r}", field="intensity")
    return "compute" if intensity >= ridge else "memory"
