"""The use cases of llmco2, as Python functions: the command line parses flags and calls these.

- :func:`predict` one request (:class:`Prediction`);
- :func:`predict_frame` a table of requests (pandas or Arrow);
- :func:`predict_file` a request file, resumable, on one process or a Dask cluster;
- :func:`llmco2.serve` a request stream inside a continuously batched server, and
  :func:`llmco2.api.server.serve_request` one request inside one;
- :func:`compare` server configurations for a model under a load;
- :func:`evaluate` a checkpoint on measured rows.

Options come as typed records (:class:`RequestOptions`, :class:`Assumptions`,
:class:`ClusterOptions`, :class:`FileJob`); bad input raises
:class:`~llmco2.errors.InvalidInputError` naming the parameter.
Units: energy in J, latency in s, carbon in g CO2eq, grid intensity in g CO2eq/kWh.

Names are loaded on first use, so ``import llmco2.api`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public names and the module that defines each.
_LAZY = {
    "predict": "llmco2.api.single", "single_prediction": "llmco2.api.single", "Prediction": "llmco2.api.single",
    "memory_notes": "llmco2.api.single", "predict_frame": "llmco2.api.frames", "predict_file": "llmco2.api.files",
    "RequestOptions": "llmco2.api.options", "Assumptions": "llmco2.api.options", "ClusterOptions": "llmco2.api.options",
    "FileJob": "llmco2.api.options", "compare": "llmco2.api.compare", "evaluate": "llmco2.api.evaluate",
}

__all__ = ["Assumptions", "ClusterOptions", "FileJob", "Prediction", "RequestOptions", "compare", "evaluate", "memory_notes",
           "predict", "predict_file", "predict_frame", "single_prediction"]

if TYPE_CHECKING:
    from llmco2.api.compare import compare
    from llmco2.api.evaluate import evaluate
    from llmco2.api.files import predict_file
    from llmco2.api.frames import predict_frame
    from llmco2.api.options import Assumptions, ClusterOptions, FileJob, RequestOptions
    from llmco2.api.single import Prediction, memory_notes, predict, single_prediction


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmco2.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
