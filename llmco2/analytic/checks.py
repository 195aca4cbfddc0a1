"""Argument checks shared by the analytic calculators."""

from __future__ import annotations

from llmco2.errors import InvalidInputError


def positive_int(value: object, field: str) -> int:
    """``value`` if it is a positive integer (not a bool); `InvalidInputError` naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"must be a positive integer, got {value!r}", field=field)
    return value
