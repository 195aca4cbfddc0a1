"""(arch, request, gpu) triples coded as columns: distinct architectures, GPUs and request kinds
plus per-row codes into them and per-row counts.

Shared by :class:`~llmco2.analytic.layer.LayerBatch` (``from_items``) and
:class:`~llmco2.analytic.table.RequestTable` (``from_items``), so that neither has to import
the other to stack requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from llmco2.specs.gpus import GPU
from llmco2.specs.models import ModelArch
from llmco2.specs.requests import Request

IntArray = NDArray[np.int64]

#: LayerBatch fields that are a request's own counts (attribute of `Request`); every other field
#: depends only on the architecture, the GPU and the request's dtypes, quantisation, flags and engine.
ROW_COUNTS: dict[str, str] = {"batch": "batch_size", "prompt": "prompt_tokens", "generated": "generated_tokens",
                              "tp": "tensor_parallel", "num_gpus": "num_gpus", "ep": "expert_parallel"}

#: The `Request` count attributes, in the order of the rows of :func:`code_items`'s counts.
COUNT_ATTRS: tuple[str, ...] = ("batch_size", "prompt_tokens", "generated_tokens", "num_gpus", "tensor_parallel",
                                 "expert_parallel")


def request_kind_key(req: Request) -> tuple:
    """What of a request, besides its counts, the LayerBatch depends on."""
    return (req.weight_dtype, req.activation_dtype, req.kv_dtype, req.compute_dtype, req.flash_attention, req.causal,
            req.engine, req.quantisation)


def code_items(items: Sequence[tuple[ModelArch, Request, GPU]]
               ) -> tuple[list[ModelArch], list[GPU], list[Request], IntArray, IntArray]:
    """``(archs, gpus, kinds, codes, counts)`` of (arch, request, gpu) triples in one light pass
    (attribute reads only): the distinct architectures and GPUs (by identity) and request kinds
    (by :func:`request_kind_key`), in order of first appearance; ``codes`` (3 x n: arch, GPU,
    kind code of every row) and ``counts`` (6 x n, rows in :data:`COUNT_ATTRS` order)."""
    archs: dict[int, int] = {}
    gpus: dict[int, int] = {}
    kinds: dict[tuple, int] = {}
    arch_list: list[ModelArch] = []
    gpu_list: list[GPU] = []
    kind_list: list[Request] = []
    n = len(items)
    codes = np.empty((3, n), dtype=np.int64)
    nums = np.empty((6, n), dtype=np.int64)
    for i, (a, r, g) in enumerate(items):
        ca = archs.get(id(a))
        if ca is None:
            ca = archs[id(a)] = len(arch_list)
            arch_list.append(a)
        cg = gpus.get(id(g))
        if cg is None:
            cg = gpus[id(g)] = len(gpu_list)
            gpu_list.append(g)
        key = request_kind_key(r)
        ck = kinds.get(key)
        if ck is None:
            ck = kinds[key] = len(kind_list)
            kind_list.append(r)
        codes[0, i], codes[1, i], codes[2, i] = ca, cg, ck
        nums[0, i], nums[1, i], nums[2, i] = r.batch_size, r.prompt_tokens, r.generated_tokens
        nums[3, i], nums[4, i], nums[5, i] = r.num_gpus, r.tensor_parallel, r.expert_parallel  # type: ignore[assignment]
    return arch_list, gpu_list, kind_list, codes, nums
