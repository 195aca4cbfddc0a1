"""Notes on what lies outside a trained predictor's training domain: an unseen GPU (or one whose die the training
rows showed, :func:`seen_sibling`), an unseen engine, model family or size, per request
(:func:`domain_notes`) or for many requests at once, computed once per distinct value
(:func:`domain_note_lists`). The domain is the checkpoint's ``domain`` dict (devices, engines, families and
ranges the training rows covered)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.table import RequestTable, distinct_rows, object_codes
from llmco2.errors import UnknownIdError
from llmco2.physics.priors import Item, cached_engine_id, gpu_engine_codes
from llmco2.physics.priors import device_group as gpu_group
from llmco2.specs import GPU, ModelArch, get_gpu
from llmco2.specs.families import architecture_family, catalog_families
from llmco2.specs.gpus import closest_same_die


def _device_note(domain: dict[str, Any], gpu_id: str, sibling: str | None = None) -> str | None:
    """The note of a GPU the training data did not show (None when it did); ``sibling``: the seen
    GPU on the same die whose learnt correction the prediction takes (:func:`seen_sibling`)."""
    if domain.get("devices") and gpu_id not in domain["devices"]:
        if sibling is not None:
            return (f"unseen GPU {gpu_id} (trained on {', '.join(domain['devices'])}): the step physics of its "
                    f"catalog entry, with the correction learnt on {sibling} (the same die)")
        return (f"unseen GPU {gpu_id} (trained on {', '.join(domain['devices'])}): extrapolated through its "
                "peak throughput, bandwidth, TDP and idle power")
    return None


@functools.lru_cache(maxsize=64)
def _catalog_gpus(ids: tuple[str, ...]) -> tuple[GPU, ...]:
    """The catalog entries of ``ids`` (ids the catalog does not hold are left out)."""
    out = []
    for gpu_id in ids:
        try:
            out.append(get_gpu(gpu_id))
        except UnknownIdError:
            continue
    return tuple(out)


def seen_sibling(domain: dict[str, Any], gpu: GPU, engine: str) -> GPU | None:
    """The GPU of the training domain on the same die as ``gpu``
    (:func:`llmco2.specs.gpus.closest_same_die`) that the training rows showed with ``engine`` (an
    engine id) as the network sees it, for a GPU the domain does not hold; else ``None``. Such a GPU
    runs the same kernels of the same engine on the same silicon, with other memory, clocks or
    limits, which its catalog entry gives the step physics; the network's correction, learnt for
    the sibling's departures from the step physics under that engine, carries over to it. An engine
    the training rows never held is seen as ``unknown``, the level trained on every GPU (engine
    dropout). A domain without its GPUs' engines (``device_engines``: checkpoints written before
    they were recorded) gives no sibling."""
    seen = domain.get("devices")
    pairs = domain.get("device_engines")
    if not seen or not isinstance(pairs, dict) or gpu.id in seen:
        return None
    unknown = engine not in domain.get("engines", ())
    candidates = tuple(d for d in seen if unknown or engine in (pairs.get(d) if isinstance(pairs.get(d), list) else ()))
    return closest_same_die(gpu, _catalog_gpus(candidates)) if candidates else None


def _engine_note(domain: dict[str, Any], engine: str) -> str | None:
    """The note of an engine (catalog id) the training data did not show (None when it did)."""
    if domain.get("engines") and engine not in domain["engines"]:
        return (f"unseen engine {engine} (trained on {', '.join(domain['engines'])}): extrapolated through its "
                "launch and step overheads")
    return None


def domain_families(domain: dict[str, Any]) -> frozenset[str] | None:
    """The architecture families the training rows covered: the domain's ``families``, else those
    of its catalog ``models`` (checkpoints that predate the key); None when it says neither."""
    if domain.get("families"):
        return frozenset(domain["families"])
    if domain.get("models"):
        return catalog_families(tuple(domain["models"]))
    return None


def _family_note(families: frozenset[str] | None, arch: ModelArch) -> str | None:
    """The note of an architecture family the training rows lack (None when they have it)."""
    if not families:
        return None
    fam = architecture_family(arch)
    if fam in families:
        return None
    return (f"unseen architecture family {fam} (attention/MLP/position; trained on {', '.join(sorted(families))}): "
            "extrapolated through its analytic features")


def _range_note(lo_hi: Sequence[int], value: int, label: str) -> str:
    return f"{label} {value:,} outside the trained range {lo_hi[0]:,}-{lo_hi[1]:,}"


#: The counts that :func:`domain_notes` checks against the trained ranges: (domain key, label); every
#: key after the first is also the attribute of `Request` and of `RequestTable` that holds the count.
_RANGE_LABELS = (("params", "parameters"), ("prompt_tokens", "prompt tokens"), ("generated_tokens", "generated tokens"),
                 ("batch_size", "batch size"), ("num_gpus", "GPUs"))


def domain_notes(domain: dict[str, Any], item: Item, params: int | None = None) -> list[str]:
    """Why a request lies outside a training domain (empty when it does not); ``params``: the
    architecture's parameter count when the caller has it."""
    arch, req, gpu = item
    notes = [note for note in (_device_note(domain, gpu.id), _engine_note(domain, cached_engine_id(req.engine)),
                               _family_note(domain_families(domain), arch)) if note]
    values = (arch.param_count() if params is None else params, req.prompt_tokens, req.generated_tokens, req.batch_size,
              req.num_gpus)
    for (key, label), value in zip(_RANGE_LABELS, values, strict=True):
        lo_hi = domain.get(key)
        if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
            notes.append(_range_note(lo_hi, value, label))
    return notes


def domain_note_lists(domain: dict[str, Any], items: Sequence[Item] | RequestTable,
                      params: NDArray[np.floating] | None = None,
                      step_engines: tuple[str, frozenset[str]] | None = None) -> list[list[str]]:
    """:func:`domain_notes` of every item ((arch, request, gpu) triples or a
    :class:`RequestTable`), each row its own list; ``params``: each row's parameter count when
    the caller has it (e.g. ``LayerBatch.params``). ``step_engines``: ``(device group, engines)``
    whose requests the step physics predicts with constants fitted for those engines: on a GPU of
    that group such an engine is not an extrapolation, whatever the network's training rows held. The notes depend only on the GPU, the engine,
    the parameter count and the counts that lie outside their trained range, so they are built
    once per distinct combination of those, not once per row."""
    n = len(items)
    if not n:
        return []
    if params is not None:
        params = np.rint(np.asarray(params, dtype=np.float64)).astype(np.int64)
    gpus, gpu_code, engines, engine_code = gpu_engine_codes(items)
    counted = [key for key, _ in _RANGE_LABELS[1:]]  # the Request attributes, after the parameter count
    if isinstance(items, RequestTable):
        distinct, arch_code = list(items.archs), np.asarray(items.arch, dtype=np.int64)
        counts = np.stack([getattr(items, attr) for attr in counted], axis=1).astype(np.int64)
    else:
        archs, reqs, _ = zip(*items, strict=True)
        distinct, arch_code = object_codes(archs)
        counts = np.array(list(map(attrgetter(*counted), reqs)), dtype=np.int64).reshape(n, -1)
    if params is None:
        params = np.array([a.param_count() for a in distinct], dtype=np.int64)[arch_code]
    families = domain_families(domain)
    family_notes = [_family_note(families, a) for a in distinct]
    note_index = {note: i for i, note in enumerate(dict.fromkeys(family_notes))}
    family_code = np.array([note_index[note] for note in family_notes], dtype=np.int64)[arch_code]
    columns = [gpu_code, engine_code, family_code]
    ranges = []  # (domain range, label, outside, value) of each range the domain has
    for (key, label), values in zip(_RANGE_LABELS, [params, *counts.T], strict=True):
        lo_hi = domain.get(key)
        if lo_hi:
            outside = (values < lo_hi[0]) | (values > lo_hi[1])
            columns += [outside.astype(np.int64), np.where(outside, values, 0).astype(np.int64)]
            ranges.append((lo_hi, label, outside, values))
    first, group = distinct_rows(*columns)
    # the notes of each distinct combination, from notes built once per distinct GPU, engine and value
    step_group, fitted = step_engines or ("", frozenset())
    step_gpu = [gpu_group(g) == step_group for g in gpus]
    engine_notes = [_engine_note(domain, e) for e in engines]
    device_notes: dict[tuple[int, int], str | None] = {}

    def device_note(g: int, e: int) -> str | None:
        if (g, e) not in device_notes:
            sibling = seen_sibling(domain, gpus[g], engines[e]) if step_gpu[g] else None
            device_notes[g, e] = _device_note(domain, gpus[g].id, None if sibling is None else sibling.id)
        return device_notes[g, e]

    def engine_note(g: int, e: int) -> str | None:
        return None if step_gpu[g] and engines[e] in fitted else engine_notes[e]

    family_by_code = list(note_index)
    per_group: list[list[str]] = [[note for note in (device_note(g, e), engine_note(g, e), family_by_code[f]) if note]
                                  for g, e, f in zip(gpu_code[first].tolist(), engine_code[first].tolist(),
                                                     family_code[first].tolist(), strict=True)]
    for lo_hi, label, outside, values in ranges:
        made: dict[int, str] = {}
        for notes, out, value in zip(per_group, outside[first].tolist(), values[first].tolist(), strict=True):
            if out:
                notes.append(made.get(value) or made.setdefault(value, _range_note(lo_hi, value, label)))
    return list(map(list.copy, map(per_group.__getitem__, group.tolist())))
