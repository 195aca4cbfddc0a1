"""llmco2: predict the GPU energy and carbon footprint of an LLM inference request before it runs.

``import llmco2`` is cheap (no PyTorch, no pandas): :func:`predict`, :func:`predict_frame`,
:func:`serve`, :class:`Prediction` and the typed errors are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmco2.version import __version__

#: Public names and the module that defines each (imported when the name is first used).
_LAZY = {
    "predict": "llmco2.api.single", "predict_frame": "llmco2.api.frames", "Prediction": "llmco2.api.single",
    "predict_file": "llmco2.api.files", "RequestOptions": "llmco2.api.options", "Assumptions": "llmco2.api.options",
    "ClusterOptions": "llmco2.api.options", "FileJob": "llmco2.api.options", "compare": "llmco2.api.compare",
    "serve": "llmco2.serving.api", "ServingResult": "llmco2.serving.api", "make_workload": "llmco2.serving.workload",
    "load_intensity": "llmco2.carbon.hourly", "HourlyIntensity": "llmco2.carbon.hourly",
    "LLMCO2Error": "llmco2.errors", "InvalidInputError": "llmco2.errors", "UnknownIdError": "llmco2.errors",
}

__all__ = ["Assumptions", "ClusterOptions", "FileJob", "HourlyIntensity", "InvalidInputError", "LLMCO2Error", "Prediction",
           "RequestOptions", "ServingResult", "UnknownIdError", "__version__", "compare", "load_intensity", "make_workload", "predict",
           "predict_file", "predict_frame", "serve"]

if TYPE_CHECKING:
    from llmco2.api.compare import compare
    from llmco2.api.files import predict_file
    from llmco2.api.frames import predict_frame
    from llmco2.api.options import Assumptions, ClusterOptions, FileJob, RequestOptions
    from llmco2.api.single import Prediction, predict
    from llmco2.carbon.hourly import HourlyIntensity, load_intensity
    from llmco2.errors import InvalidInputError, LLMCO2Error, UnknownIdError
    from llmco2.serving.api import ServingResult, serve
    from llmco2.serving.workload import make_workload


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmco2' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
