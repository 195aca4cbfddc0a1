"""The passes a measurement window repeats: one prefill (fresh KV cache), one decode loop, or both.

``eager`` decoding runs the model eagerly over transformers' dynamic cache (engine ``hf``).
``static`` decoding (engine ``hf-static``) preallocates a ``StaticCache`` of ``prompt +
generated`` tokens, resets it before every prefill, and runs each decode step through
``torch.compile(mode="reduce-overhead", fullgraph=True)`` — CUDA graphs on a GPU — following
transformers' "static kv-cache and torch.compile" recipe (explicit ``cache_position``; the token
fed back is cloned, as a graph's outputs are overwritten by its next replay).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import torch

from llmco2.measure.errors import MeasurementError, UnsupportedConfigError
from llmco2.measure.modes import DECODE_MODES, ENGINE_OF_MODE, decode_mode_of

log = logging.getLogger(__name__)

__all__ = ["DECODE_MODES", "ENGINE_OF_MODE", "Passes", "decode_mode_of", "static_cache"]

def _accepts(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def returned_cache(out: Any) -> Any:
    """The KV cache a forward pass returned: ``out.cache`` (transformers 5.2x on), else
    ``out.past_key_values``."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def static_cache(model: Any, batch_size: int, max_len: int, device: torch.device) -> Any:
    """A transformers ``StaticCache`` of ``max_len`` tokens (v5 signature: config and length; v4:
    also batch size, device and dtype)."""
    from transformers import StaticCache

    params = inspect.signature(StaticCache.__init__).parameters
    kwargs: dict[str, Any] = {"config": model.config, "max_cache_len": max_len}
    if "max_batch_size" in params:
        kwargs.update(max_batch_size=batch_size, device=device, dtype=next(model.parameters()).dtype)
    return StaticCache(**kwargs)


#: Compiled variants kept per decode step: every request shape (and every ``Passes`` object) of a
#: model is one; past torch's default limit (8) dynamo would silently fall back to eager decoding.
RECOMPILE_LIMIT = 256


def _allow_recompiles() -> None:
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name) and getattr(config, name) < RECOMPILE_LIMIT:
            setattr(config, name, RECOMPILE_LIMIT)


class Passes:
    """Prefill / decode / full passes of one request shape on one built model.

    Args:
        model: the causal LM (``model(input_ids=..., cache=..., use_cache=True)``; ``past_key_values=``
            where its ``forward`` has no ``cache`` parameter: transformers before 5.2x, which
            deprecates ``past_key_values`` and removes it in 5.40).
        input_device: where inputs go.
        batch_size / prompt_tokens / steps: the request's shape (``steps`` decode steps).
        mode: ``eager`` or ``static``.
        compile_decode: compile the static decode step (``False`` only for CPU tests).
    """

    def __init__(self, model: Any, input_device: torch.device, batch_size: int, prompt_tokens: int, steps: int,
                 mode: str = "eager", compile_decode: bool = True) -> None:
        if mode not in DECODE_MODES:
            raise UnsupportedConfigError(f"decode mode must be one of {', '.join(DECODE_MODES)}, got {mode!r}")
        self.model = model
        self.device = input_device
        self.prompt_tokens = prompt_tokens
        self.steps = steps
        self.mode = mode
        self.extra = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}
        self.cache_kwarg = "cache" if _accepts(model, "cache") else "past_key_values"
        self.cache: Any = None
        self._step: Callable[..., torch.Tensor] = self._decode_step
        if mode == "static":
            self.cache = static_cache(model, batch_size, prompt_tokens + steps, input_device)
            if compile_decode:
                _allow_recompiles()
                self._step = torch.compile(self._decode_step, mode="reduce-overhead", fullgraph=True)

    def _decode_step(self, token: torch.Tensor, cache: Any, position: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=token, **{self.cache_kwarg: cache}, cache_position=position, use_cache=True, **self.extra)
        return out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

    def prefill(self, ids: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """One prefill pass with a fresh (or reset) cache; the first token and the cache."""
        if self.cache is not None:
            self.cache.reset()
            position = torch.arange(ids.shape[1], device=self.device)
            out = self.model(input_ids=ids, **{self.cache_kwarg: self.cache}, cache_position=position, use_cache=True, **self.extra)
            cache = self.cache
        else:
            out = self.model(input_ids=ids, use_cache=True, **self.extra)
            cache = returned_cache(out)
        return out.logits[:, -1, :].argmax(dim=-1, keepdim=True), cache

    def decode(self, token: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any, int]:
        """``steps`` greedy decode steps after a prefill; the last token, the cache and the steps run."""
        token = token.to(self.device)
        if self.cache is not None:
            position = torch.tensor([self.prompt_tokens], device=self.device)
            for _ in range(self.steps):
                token = self._step(token.clone(), cache, position).clone()
                position = position + 1
            return token, cache, self.steps
        for _ in range(self.steps):
            out = self.model(input_ids=token, **{self.cache_kwarg: cache}, use_cache=True, **self.extra)
            cache = returned_cache(out)
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        return token, cache, self.steps

    def full(self, ids: torch.Tensor) -> int:
        """Prefill then decode; checks the tokens generated and the cache length, returns the tokens."""
        token, cache = self.prefill(ids)
        _, cache, steps = self.decode(token, cache)
        generated = 1 + steps
        length = cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
        if length is not None and int(length) != self.prompt_tokens + self.steps:
            raise MeasurementError(f"the KV cache holds {int(length)} tokens instead of {self.prompt_tokens + self.steps}")
        return generated
