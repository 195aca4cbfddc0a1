"""Catalog look-ups of the names sources give devices and models: vendor words, trailing words,
instruct/chat affixes and quantisation suffixes removed, then an exact or close catalog match."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Mapping

# Words that sources put around a device name and the catalog does not (``Nvidia GH200 GPU``).
_VENDOR_WORDS = ("nvidia", "habana", "intel", "amd")
_TRAILING_WORDS = ("tensor core gpu", "gpu", "accelerator")
# Close matches must agree on every word with a number in it (h100 is not h200 nor a100, qwen3-14b is
# not qwen3-8b).
CLOSE_MATCH_CUTOFF = 0.85
_NUMBERED = re.compile(r"[a-z]*\d[a-z0-9.]*")


def _catalog_keys(catalog: Iterable) -> dict[str, str]:
    """Normalised id/alias -> catalog id."""
    from llmco2.specs.lookup import normalise_key

    return {normalise_key(key): entry.id for entry in catalog for key in (entry.id, *entry.aliases)}


def _close_match(name: str, keys: Mapping[str, str]) -> str | None:
    """The one catalog id whose id or alias is close to ``name`` (difflib ratio >= the cutoff) and
    has the same words with numbers in them; ``None`` when there is none or the close keys name several ids."""
    from llmco2.specs.lookup import normalise_key

    key = normalise_key(name)
    numbered = _NUMBERED.findall(key)
    pool = [k for k in keys if _NUMBERED.findall(k) == numbered]
    hits = difflib.get_close_matches(key, pool, n=5, cutoff=CLOSE_MATCH_CUTOFF)
    owners = {keys[h] for h in hits}
    return owners.pop() if len(owners) == 1 else None


def device_name_variants(name: str) -> list[str]:
    """``name`` and the forms a catalog alias may take: without a parenthesised note, without the
    vendor word and a trailing ``GPU`` (``Nvidia GH200 GPU`` -> ``GH200``)."""
    out = [name]
    bare = re.sub(r"\s*\(.*?\)\s*", " ", name).strip()
    out.append(bare)
    words = bare.lower()
    for word in _VENDOR_WORDS:
        words = re.sub(rf"^{word}\s+", "", words)
    for word in _TRAILING_WORDS:
        words = re.sub(rf"\s+{word}$", "", words)
    out.append(words.strip())
    return [v for i, v in enumerate(out) if v and v not in out[:i]]


@functools.cache
def _gpu_keys() -> dict[str, str]:
    from llmco2.specs import gpu_catalog

    return _catalog_keys(gpu_catalog())


@functools.cache
def _model_keys() -> dict[str, str]:
    from llmco2.specs import model_catalog

    return _catalog_keys(model_catalog())


@functools.cache
def _hf_index() -> dict[str, str]:
    from llmco2.specs import model_catalog

    return {m.hf_id.lower(): m.id for m in model_catalog() if m.hf_id}


_MODEL_AFFIXES = re.compile(r"(-instruct|-chat|-hf|-base|-it)(-v?\d+(\.\d+)*)?$", re.I)
# Re-quantised checkpoints name their method last (``-FP8``, ``-AWQ``, ``-GPTQ-Int4``, ``-w4a16``): the
# architecture is the base model's, the precision a separate column.
_QUANT_SUFFIX = re.compile(r"[-_.](fp8(-dynamic)?|awq|gptq(-int[48])?|int[48]|w4a16|w8a8|w8a16|bnb-4bit|[48]bit|nvfp4|mxfp4|gguf)$", re.I)


def _exact_model_id(key: str, keys: Mapping[str, str]) -> str | None:
    """The id that ``key`` names exactly (see :func:`model_id`), or ``None``."""
    from llmco2.specs.lookup import normalise_key

    norm = normalise_key(key)
    if norm in keys:
        return keys[norm]
    hf = _hf_index().get(key.strip().lower())
    if hf is not None:
        return hf
    short = _MODEL_AFFIXES.sub("", key.strip().split("/")[-1])
    return keys.get(normalise_key(short))


def model_id(name: str, explicit: Mapping[str, str] | None = None) -> str | None:
    """Catalog id of a source's model name, or ``None`` when the catalog does not have it.

    Order: the importer's explicit mapping (for names that are not aliases), a catalog id or
    alias (case-insensitive), a Hugging Face repository id (``hf_id``), then the name without its
    organisation and a ``-Instruct`` / ``-chat`` / ``-hf`` suffix; the same again without a
    quantisation suffix (``-FP8``, ``-AWQ``, ``-GPTQ-Int4``, ...: a re-quantised checkpoint keeps
    the base architecture), and last a close match that keeps every number of the name. The
    catalog is queried directly rather than through ``get_model`` so that a name is never read as
    a local path.
    """
    key = (explicit or {}).get(name, name)
    keys = _model_keys()
    found = _exact_model_id(key, keys)
    if found is not None:
        return found
    bare = key.strip()
    for _ in range(3):
        bare = _QUANT_SUFFIX.sub("", bare)
    if bare != key.strip():
        found = _exact_model_id(bare, keys)
        if found is not None:
            return found
    return _close_match(_MODEL_AFFIXES.sub("", key.strip().split("/")[-1]), keys)


def gpu_id(name: str, explicit: Mapping[str, str] | None = None) -> str | None:
    """Catalog id of a source's device name, or ``None``: the importer's explicit mapping (for
    names the source means differently from the catalog), then the catalog's ids and aliases
    for the name and its variants (:func:`device_name_variants`), then a close match that keeps
    every number of the name."""
    from llmco2.specs.lookup import normalise_key

    if explicit and name in explicit:
        return _gpu_keys().get(normalise_key(explicit[name]))
    keys = _gpu_keys()
    variants = device_name_variants(name)
    for variant in variants:
        if normalise_key(variant) in keys:
            return keys[normalise_key(variant)]
    return _close_match(variants[-1], keys)
