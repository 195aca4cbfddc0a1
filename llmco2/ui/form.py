"""The calculator page's form, read into the arguments of :func:`llmco2.api.compare.compare`.

Every value arrives as text (an HTML form). An empty field means the parameter's default, as
leaving a flag out does on the command line; text that is not a number where a number is asked
for, a number that is not finite, and lengths with lengths-from-a-trace are refused with an
:class:`~llmco2.errors.InvalidInputError` naming the API parameter, as the command refuses them.
No web framework is imported here.

Example:
    >>> read_compare_form({"model": "llama3.1-8b", "gpus": "h100,l4", "concurrency": "8"})["concurrency"]
    8
    >>> read_compare_form({"model": "llama3.1-8b", "rate": "fast"})
    Traceback (most recent call last):
    ...
    llmco2.errors.InvalidInputError: rate: invalid float value: 'fast'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.specs.limits import MAX_EXACT_INT

#: Requests simulated per replica when the form leaves it empty: small, so that the page answers
#: in seconds (the command's default simulates more).
UI_SERVING_REQUESTS = 200
#: Text fields of the form passed as they are (an empty one is left out: the default applies).
TEXT_FIELDS = ("gpus", "background", "engine", "dtype", "region", "pue", "scope", "expert_parallel")
#: Number fields: API parameter -> type.
NUMBER_FIELDS: dict[str, type] = {
    "rate": float, "concurrency": int, "prompt_tokens": int, "generated_tokens": int, "slo_ttft_s": float,
    "slo_tpot_s": float, "slo_percentile": float, "max_gpus": int, "tp": int, "dp": int, "serving_requests": int, "seed": int,
    "carbon_intensity": float, "lifetime_years": float,
}
#: Every field the form may send (the model is given apart: an id, or an uploaded config.json).
FIELDS = ("model", *TEXT_FIELDS, *NUMBER_FIELDS)
#: Fields of one request (``/api/predict``): API parameter -> type (``str`` kept as text).
PREDICT_FIELDS: dict[str, type] = {
    "model": str, "gpu": str, "batch_size": int, "prompt_tokens": int, "generated_tokens": int, "gpus": int, "tp": int,
    "engine": str, "dtype": str, "region": str, "pue": str, "carbon_intensity": float, "lifetime_years": float,
}


def number(text: str, kind: type, field: str) -> int | float:
    """``text`` as an ``int`` or a finite ``float``; the command line's wording when it is not one."""
    try:
        value = kind(text.strip())
    except ValueError:
        raise InvalidInputError(f"invalid {kind.__name__} value: {text!r}", field=field) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"must be a finite number, got {value}", field=field)
    if isinstance(value, int) and abs(value) > MAX_EXACT_INT:
        raise InvalidInputError(f"{value} is out of range (at most {MAX_EXACT_INT:,} in size)", field=field)
    return value


def read_compare_form(form: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :func:`~llmco2.api.compare.compare` from the form's text fields.

    Args:
        form: field name -> text (empty or absent: the default). ``model`` is required unless
            the caller gives a config.json in its place; unknown fields are refused.

    Returns:
        ``model`` (possibly ``None``) and the parameters given, with ``serving_requests`` set to
        :data:`UI_SERVING_REQUESTS` when the form leaves it empty.
    """
    unknown = sorted(set(form) - set(FIELDS))
    if unknown:
        raise InvalidInputError(f"unknown field {unknown[0]!r}; the fields are {', '.join(FIELDS)}", field=unknown[0])
    given = {k: str(v) for k, v in form.items() if v is not None and str(v).strip()}
    out: dict[str, Any] = {"model": given.get("model", "").strip() or None, "serving_requests": UI_SERVING_REQUESTS}
    for name in TEXT_FIELDS:
        if name in given:
            out[name] = given[name].strip()
    for name, kind in NUMBER_FIELDS.items():
        if name in given:
            out[name] = number(given[name], kind, name)
    if out.get("expert_parallel", "").isdigit():  # a degree, as `--ep N`; else auto, off or only
        out["expert_parallel"] = number(out["expert_parallel"], int, "expert_parallel")
    if out.get("background", "conv") != "fixed" and ("prompt_tokens" in out or "generated_tokens" in out):
        raise InvalidInputError("`prompt_tokens` and `generated_tokens` apply with `background='fixed'`", field="background")
    return out



def read_predict_form(form: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``(model, keyword arguments of llmco2.predict)`` from the text fields of one request
    (:data:`PREDICT_FIELDS`; empty: the default). ``gpu`` and ``prompt_tokens`` are required."""
    unknown = sorted(set(form) - set(PREDICT_FIELDS))
    if unknown:
        raise InvalidInputError(f"unknown field {unknown[0]!r}; the fields are {', '.join(PREDICT_FIELDS)}", field=unknown[0])
    given = {k: str(v).strip() for k, v in form.items() if v is not None and str(v).strip()}
    out = {k: (v if PREDICT_FIELDS[k] is str else number(v, PREDICT_FIELDS[k], k)) for k, v in given.items()}
    for name in ("gpu", "prompt_tokens"):
        if name not in out:
            raise InvalidInputError("is required", field=name)
    return out.pop("model", None), out
