"""What the calculator page's pickers offer: models, GPUs, grid regions, PUE defaults, request
length backgrounds, engines and weight dtypes, read from the catalogs (no web framework here).

Example:
    >>> choices = catalog()
    >>> "llama3.1-8b" in [m["id"] for m in choices["models"]], choices["defaults"]["gpus"]
    (True, 'datacentre')
"""

from __future__ import annotations

import functools
from typing import Any

from llmco2.ui.form import UI_SERVING_REQUESTS


@functools.cache
def catalog() -> dict[str, Any]:
    """The pickers' choices and the form's defaults, as JSON-ready data (built once)."""
    from llmco2.api.compare import GPU_COUNTS
    from llmco2.api.server import BACKGROUNDS
    from llmco2.carbon.accounting import grid_regions, pue_defaults
    from llmco2.carbon.reports import COMPARE_GPUS
    from llmco2.specs import DEFAULT_ENGINE, DTYPE_BYTES, engine_catalog, gpu_catalog, model_catalog

    regions, default_region = grid_regions()
    pues, default_pue = pue_defaults()
    return {
        "models": [{"id": m.id, "name": m.name, "params_b": m.published_params_b, "family": m.family}
                   for m in model_catalog()],
        "gpus": [{"id": g.id, "name": g.name, "memory_gb": g.memory_size_gb, "vendor": g.vendor,
                  "datacentre": g.id in COMPARE_GPUS} for g in gpu_catalog()],
        "regions": [{"id": r.id, "name": r.name, "kind": r.kind, "g_co2eq_per_kwh": r.g_co2eq_per_kwh}
                    for r in regions],
        "pue": [{"id": p.id, "name": p.name, "value": p.value} for p in pues],
        "backgrounds": list(BACKGROUNDS),
        "engines": [e.id for e in engine_catalog()],
        "dtypes": list(DTYPE_BYTES),
        "gpu_counts": list(GPU_COUNTS),
        "defaults": {"gpus": "datacentre", "region": default_region, "pue": default_pue, "engine": DEFAULT_ENGINE,
                     "dtype": "bf16", "background": "conv", "max_gpus": max(GPU_COUNTS), "slo_percentile": 90.0,
                     "serving_requests": UI_SERVING_REQUESTS, "seed": 0},
    }
