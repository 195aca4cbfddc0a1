"""Ranges every number crossing the boundary (command line, request files, config.json, Hydra
configs) must lie in.

The analytic arithmetic runs in float64 on counts that arrive as int64, so the bounds keep every
count exact and every product finite, with room above the largest real value: a batch of
1,048,576 sequences, 134 million prompt or generated tokens, 65,536 GPUs, architecture sizes of
16.7 million (a context of a billion tokens).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from llmco2.errors import InvalidInputError

#: Largest value of each request count.
REQUEST_LIMITS = {"batch_size": 2**20, "prompt_tokens": 2**27, "generated_tokens": 2**27, "num_gpus": 2**16,
                  "tensor_parallel": 2**16, "expert_parallel": 2**16}
#: Largest value of an architecture size (``max_context``: :data:`MAX_CONTEXT`).
MAX_ARCH_VALUE = 2**24
MAX_CONTEXT = 2**30
#: Integers beyond this are refused wherever they appear (the float64 mantissa holds them exactly).
MAX_EXACT_INT = 2**53
#: Most columns a request file may have (its header is checked up front: the required, optional and
#: architecture columns are some 20, and a log's own columns a few hundred at most).
MAX_REQUEST_COLUMNS = 10_000
#: Most requests one serving simulation takes (each holds a few hundred bytes of state and log; a
#: million is about an hour of a busy 8-GPU server and a few hundred MB).
MAX_SIMULATED_REQUESTS = 1_000_000
#: Most scheduler iterations one serving simulation may need (some 200,000 a second: under a
#: minute). A million requests at the engine's default limits need about a million.
MAX_SIMULATED_ITERATIONS = 10_000_000


def fewest_iterations(total_tokens: int, output_tokens: int, max_batched_tokens: int, max_batch: int) -> int:
    """The fewest scheduler iterations a workload of ``total_tokens`` (prompt and output) and
    ``output_tokens`` can take: each iteration processes at most ``max_batched_tokens`` tokens and
    decodes at most ``max_batch`` sequences by one token."""
    return max(-(-total_tokens // max_batched_tokens), -(-output_tokens // max_batch))


def longest_prompt(max_context: int) -> int:
    """The longest prompt a request can give a model of context ``max_context``: that context, capped
    at the request limit (a ``config.json`` without a context length reads as :data:`MAX_CONTEXT`)."""
    return min(max_context, REQUEST_LIMITS["prompt_tokens"])


def arch_limit(name: str) -> int:
    """Largest value of the architecture field ``name``."""
    return MAX_CONTEXT if name == "max_context" else MAX_ARCH_VALUE


def check_int(value: Any, name: str, minimum: int, maximum: int, what: str = "") -> int:
    """``value`` as an int in ``[minimum, maximum]``: an int, or a whole finite float (``4096.0``)
    or its text; anything else (bool, fractional, NaN, out of range) is an
    :class:`InvalidInputError` naming ``name`` and the range."""
    def bad() -> InvalidInputError:
        return InvalidInputError(f"{what}must be an integer from {minimum:,} to {maximum:,}, got {value!r}", field=name)

    if isinstance(value, bool):
        raise bad()
    if not isinstance(value, int):
        try:
            as_float = float(value)
        except (TypeError, ValueError, OverflowError):
            raise bad() from None
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise bad()
        value = int(as_float)
    if not minimum <= value <= maximum:
        raise bad()
    return value


def check_float(value: Any, name: str, minimum: float, maximum: float, unit: str = "") -> float:
    """``value`` as a finite float in ``[minimum, maximum]``, else an :class:`InvalidInputError`."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if isinstance(value, bool) or not math.isfinite(x) or not minimum <= x <= maximum:
        raise InvalidInputError(f"must be a number from {minimum:g} to {maximum:g}{unit}, got {value!r}", field=name)
    return x


def whole_number(value: Any, name: str, minimum: int, maximum: int = MAX_EXACT_INT) -> int:
    """``value`` as an int from ``minimum`` to ``maximum``: an integer (a NumPy one too) or a whole
    finite float (``4.0``). Text, booleans, ``None``, fractions, NaN and other types are refused with
    an :class:`InvalidInputError` naming ``name``."""
    number = isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer())
    if isinstance(value, (bool, np.bool_)) or not number or not minimum <= value <= maximum:
        upto = f" to {maximum:,}" if maximum < MAX_EXACT_INT else ""
        raise InvalidInputError(f"must be a whole number from {minimum:,}{upto}, got {value!r}", field=name)
    return int(value)


def finite_number(value: Any, name: str, minimum: float = 0.0, maximum: float = math.inf, *, above: bool = False,
                  what: str = "") -> float:
    """``value`` as a finite float from ``minimum`` (excluded when ``above``) to ``maximum``: a number
    (a NumPy one too), never text, a boolean, ``None``, NaN or infinity; else an
    :class:`InvalidInputError` naming ``name`` (``what``: the message's description of the range)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    x = float(value) if number else math.nan
    if not math.isfinite(x) or not (x > minimum if above else x >= minimum) or x > maximum:
        if not what:
            low = f"above {minimum:g}" if above else f"from {minimum:g}"
            what = f"a finite number {low}" + (f" to {maximum:g}" if maximum < math.inf else "")
        raise InvalidInputError(f"must be {what}, got {value!r}", field=name)
    return x
