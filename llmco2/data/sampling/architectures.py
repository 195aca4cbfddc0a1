"""Architecture priors (the set A of the paper's Section 4.2): the catalog models the samplers
draw from, vectorised tables of their shapes, and perturbed variants of them.

A perturbed variant keeps the architecture valid: the query-per-KV-head group is kept, even KV
heads stay even, ``head_dim`` is kept and hidden = heads x head_dim for models built that way;
explicit-head_dim hidden sizes and MLP widths move in steps of a size multiple.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.sampling.common import ARCH_COLUMNS, IntArray, round_to
from llmco2.errors import InvalidInputError
from llmco2.specs import ModelArch, get_model

#: The 17 LLMs of the paper's Section 5.1.
PAPER_MODELS = ("bloom-560m", "bloom-1b1", "bloom-1b7", "bloom-3b", "bloom-7b1", "gemma-2b", "gemma-7b", "gemma2-2b",
                "gemma2-9b", "gemma2-27b", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b", "qwen2-72b", "llama3.1-8b",
                "llama3.1-70b", "mixtral-8x7b")
#: The edge models of the CO2-Meter data that are not among the paper's 17 (Qwen2-1.5B is).
EDGE_MODELS = ("tinyllama-1.1b", "qwen1.5-0.5b", "internlm2-1.8b")


@dataclass(frozen=True)
class _Models:
    """Catalog architectures as column arrays (one entry per model, in draw order)."""

    archs: tuple[ModelArch, ...]

    @functools.cached_property
    def ids(self) -> NDArray[np.object_]:
        return np.array([a.id for a in self.archs], dtype=object)

    def col(self, name: str) -> IntArray:
        """Integer field ``name`` of every model (e.g. ``num_layers``; ``max_context`` in tokens)."""
        return np.array([getattr(a, name) for a in self.archs], dtype=np.int64)

    @functools.cached_property
    def max_context(self) -> IntArray:
        return self.col("max_context")

    @functools.cached_property
    def explicit_head_dim(self) -> NDArray[np.bool_]:
        return np.array([a.hidden_size != a.num_heads * a.head_dim for a in self.archs], dtype=bool)


def sampler_models(names: Sequence[str]) -> _Models:
    """The distinct catalog models ``names`` (first occurrence kept), at least one."""
    archs: list[ModelArch] = []
    for name in names:
        arch = get_model(str(name))
        if arch.id not in {a.id for a in archs}:
            archs.append(arch)
    if not archs:
        raise InvalidInputError("give at least one model", field="models")
    return _Models(tuple(archs))


def _variant(base: ModelArch, values: Sequence[int]) -> ModelArch:
    """``base`` with the effective architecture ``values`` (in :data:`ARCH_COLUMNS` order)."""
    changes = {c: int(v) for c, v in zip(ARCH_COLUMNS, values, strict=True) if int(v) != getattr(base, c)}
    if not changes:
        return base
    tag = "-".join(f"{c.split('_')[-1][:1] if c != 'num_kv_heads' else 'kv'}{int(v)}" for c, v in changes.items())
    return base.with_overrides(**changes, id=f"{base.id}~{tag}", name=f"{base.name or base.id} (perturbed: {tag})",
                               aliases=(), published_params_b=None, active_params_b=None)


def arch_variants(df: pd.DataFrame) -> tuple[IntArray, list[ModelArch]]:
    """Distinct (model, architecture) of ``df``: a code per row and the `ModelArch` of each code."""
    keys = ["model", *ARCH_COLUMNS]
    codes = df.groupby(keys, sort=False).ngroup().to_numpy(dtype=np.int64)
    first = df.drop_duplicates(keys)
    archs: list[ModelArch] = []
    bases: dict[str, ModelArch] = {}
    for row in first[keys].itertuples(index=False):
        model = str(row[0])
        base = bases.setdefault(model, get_model(model))
        archs.append(_variant(base, [int(v) for v in row[1:]]))
    return codes, archs


def perturb_architectures(models: _Models, rng: np.random.Generator, base_idx: IntArray, ranges: Mapping[str, float],
                          field_probability: float, size_multiple: int) -> dict[str, IntArray]:
    """Perturbed architectures of the models ``base_idx`` of ``models`` (vectorised).

    Each of layer count, head count, hidden size and MLP width changes with probability
    ``field_probability`` (at least one per row) by a relative factor in ``1 ± ranges[...]``
    (keys ``layers_range``, ``heads_range``, ``hidden_range``, ``intermediate_range``, drawn in
    the mapping's order); sizes are counts of units (layers, heads) or elements (hidden, MLP
    width), widths rounded to multiples of ``size_multiple``.
    """
    m = len(base_idx)
    mdl = models
    base = {c: mdl.col(c)[base_idx] for c in ARCH_COLUMNS}
    r = ranges
    factors = {k: 1.0 + rng.uniform(-v, v, m) for k, v in r.items()}
    chosen = rng.random((4, m)) < field_probability
    forced = rng.integers(0, 4, m)
    chosen[forced, np.arange(m)] |= ~chosen.any(axis=0)  # at least one field changes
    do_layers, do_heads, do_hidden, do_inter = chosen
    explicit = mdl.explicit_head_dim[base_idx]
    do_heads = do_heads | (do_hidden & ~explicit)  # hidden = heads x head_dim: change it through the heads
    layers = np.where(do_layers, np.maximum(np.rint(base["num_layers"] * factors["layers_range"]), 1), base["num_layers"])
    heads, kv = base["num_heads"], base["num_kv_heads"]
    group = heads // kv
    mqa = kv == 1
    kv_step = np.gcd(kv, 2)
    head_step = np.gcd(heads, 2)
    hf = factors["heads_range"]
    new_kv = np.where(mqa, 1, round_to(kv * hf, kv_step))
    new_heads = np.where(mqa, round_to(heads * hf, head_step), new_kv * group)
    heads = np.where(do_heads, new_heads, heads)
    kv = np.where(do_heads, new_kv, kv)
    step = size_multiple
    hidden = np.where(explicit, np.where(do_hidden, round_to(base["hidden_size"] * factors["hidden_range"], step),
                                         base["hidden_size"]), heads * base["head_dim"])
    inter = np.where(do_inter, round_to(base["intermediate_size"] * factors["intermediate_range"], step),
                     base["intermediate_size"])
    return {"hidden_size": hidden.astype(np.int64), "intermediate_size": inter.astype(np.int64),
            "num_layers": layers.astype(np.int64), "num_heads": heads.astype(np.int64),
            "num_kv_heads": kv.astype(np.int64), "head_dim": base["head_dim"].astype(np.int64)}
