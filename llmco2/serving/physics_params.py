"""The shipped constants of the step physics (``serving/data/step_physics.json``) and the serving
interval they come with.

Written by ``experiments/serving_physics.py --write`` (fitted on every ML.ENERGY v2 + v3 text row;
its held-out accuracy is in ``experiments/results/serving_physics.md``). The interval of J per
output token is the 10-90% quantile range of log(measured / predicted) of held-out rows: the
``new_gpu`` range (leave-one-GPU-out residuals) for a GPU or model family the fit has not seen,
the ``known_gpu`` range (leave-one-model-out) otherwise.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from llmco2.physics.step_physics import StepParams


def params_path() -> Path:
    return Path(str(resources.files("llmco2.serving") / "data" / "step_physics.json"))


@functools.lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    path = params_path()
    return json.loads(path.read_text()) if path.is_file() else {}


def shipped_params() -> StepParams:
    """The shipped fitted constants (the defaults of :class:`StepParams` if none are shipped)."""
    raw = _raw()
    return StepParams.from_dict(raw) if raw else StepParams()


def family(model_id: str) -> str:
    """A model id's family: its first word without the version digits (``llama3.1-8b`` -> ``llama``)."""
    return model_id.split("-")[0].rstrip("0123456789.") or model_id


def fit_has_seen(gpu_id: str, model_id: str, engine: str | None = None) -> bool:
    """Whether the shipped step-physics fit saw this GPU and this model's family, and has fitted
    constants for ``engine`` when one is named (otherwise a prediction is an extrapolation)."""
    raw = _raw()
    seen = gpu_id in raw.get("fitted_gpus", []) and family(model_id) in raw.get("fitted_families", [])
    return seen and (engine is None or engine in raw.get("engines", {}))


def j_per_token_interval(value: float, gpu_id: str, model_id: str) -> tuple[list[float] | None, str]:
    """``([low, high], which)``: the 10-90% interval of a predicted J per output token."""
    raw = _raw().get("interval")
    if not raw:
        return None, "none shipped"
    known = fit_has_seen(gpu_id, model_id)
    lo, hi = raw["known_gpu" if known else "new_gpu"]
    import math

    return [value * math.exp(lo), value * math.exp(hi)], ("GPU and model family seen by the fit" if known
                                                        else "GPU or model family not seen by the fit (leave-one-GPU-out residuals)")
