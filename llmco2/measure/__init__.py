"""Energy measurement on NVIDIA GPUs: an NVML meter, an inference runner and resumable sweeps.

* :mod:`llmco2.measure.nvml` — lazy NVML bindings, typed errors;
* :mod:`llmco2.measure.measurement` — :class:`Measurement`, what one window measured;
* :mod:`llmco2.measure.meter` — :class:`EnergyMeter` (``begin_window`` / ``end_window`` ->
  :class:`Measurement`), energy counter with a power-sampling fallback, idle power;
* :mod:`llmco2.measure.hf_models` — catalog architecture -> transformers model (random weights);
* :mod:`llmco2.measure.windows` — the energy counter's update period (:func:`probe_counter`) and
  windows long enough for it (:class:`WindowPolicy`: amortised prefill, lengthened decode, the
  quantisation bound);
* :mod:`llmco2.measure.runner` — :class:`InferenceRunner`: prefill and decode measured apart,
  eager (engine ``hf``) or with a static cache and compiled decode (``hf-static``);
* :mod:`llmco2.measure.plan` — the focused measurement plan (Azure-trace lengths, 17 architectures);
* :mod:`llmco2.measure.store` / :mod:`llmco2.measure.sweep` — append-as-you-go, resumable sweeps;
* :mod:`llmco2.measure.sweep_app` — Hydra entry point (one job per shard).

Importing this package needs neither a GPU nor ``nvidia-ml-py`` nor transformers; torch is
imported only by the runner.
"""

from __future__ import annotations

from typing import Any

from llmco2.measure.errors import (
    CounterWrapError,
    MeasurementError,
    NoGPUError,
    NVMLCallError,
    NVMLGPULostError,
    NVMLNoPermissionError,
    NVMLNotSupportedError,
    NVMLTimeoutError,
    NVMLUninitializedError,
    NVMLUnknownError,
    UnsupportedConfigError,
    WindowError,
)
from llmco2.measure.measurement import Measurement
from llmco2.measure.meter import EnergyMeter, Meter
from llmco2.measure.windows import CounterProbe, WindowPolicy, probe_counter

_LAZY = {
    "InferenceRunner": "llmco2.measure.runner",
    "RunResult": "llmco2.measure.results",
    "PhaseStats": "llmco2.measure.results",
    "build_model": "llmco2.measure.hf_models",
    "hf_config_for": "llmco2.measure.hf_models",
    "SweepOptions": "llmco2.measure.sweep",
    "plan_sweep": "llmco2.measure.sweep",
    "run_sweep": "llmco2.measure.sweep",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'llmco2.measure' has no attribute {name!r}")


__all__ = [
    "CounterProbe",
    "CounterWrapError",
    "EnergyMeter",
    "Measurement",
    "MeasurementError",
    "Meter",
    "NVMLCallError",
    "NVMLGPULostError",
    "NVMLNoPermissionError",
    "NVMLNotSupportedError",
    "NVMLTimeoutError",
    "NVMLUninitializedError",
    "NVMLUnknownError",
    "NoGPUError",
    "UnsupportedConfigError",
    "WindowError",
    "WindowPolicy",
    "probe_counter",
    *_LAZY,
]
