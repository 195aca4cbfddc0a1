"""Decode modes of the transformers runner and the engine catalog ids they are measured as.

* ``eager`` -> ``hf``: the model run eagerly over transformers' dynamic KV cache;
* ``static`` -> ``hf-static``: a preallocated ``StaticCache`` and a ``torch.compile``'d decode
  step (CUDA graphs on a GPU).
"""

from __future__ import annotations

from llmco2.measure.errors import UnsupportedConfigError

DECODE_MODES = ("eager", "static")
ENGINE_OF_MODE = {"eager": "hf", "static": "hf-static"}


def decode_mode_of(engine: str) -> str:
    """``eager`` for engine ``hf``, ``static`` for ``hf-static``; other engines are not this runner's."""
    for mode, eng in ENGINE_OF_MODE.items():
        if eng == engine:
            return mode
    raise UnsupportedConfigError(f"the transformers runner measures engines {', '.join(ENGINE_OF_MODE.values())}, not {engine!r}")
