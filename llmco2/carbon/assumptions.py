"""The assumptions behind a footprint: grid intensity, PUE, GPU lifetime and (when given) the
serving engine, each with its source (:func:`resolve_assumptions`)."""

from __future__ import annotations

import math
from typing import Any

from llmco2.carbon.accounting import default_lifetime_years, pue, region
from llmco2.carbon.scoped import scope_entry
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, get_engine
from llmco2.specs.limits import check_float

EDGE_FORM_FACTORS = ("module", "SoC")
#: Ranges of the user's assumptions: grid intensity (the dirtiest grids are near 1,100 g/kWh),
#: PUE (facility over IT energy) and GPU lifetime.
MAX_INTENSITY, MAX_PUE = 5000.0, 10.0
MIN_LIFETIME_YEARS, MAX_LIFETIME_YEARS = 0.01, 100.0


def resolve_assumptions(gpus: list[GPU], region_id: str | None = None, carbon_intensity: float | None = None,
                        pue_value: float | str | None = None, lifetime_years: float | None = None,
                        engine: str | None = None, scope: str | None = None,
                        platform: str | None = None) -> dict[str, Any]:
    """Grid intensity, PUE, lifetime, (when given) the serving engine and (when given) the scope carbon is
    computed on (``gpu`` or ``server``, on ``platform``; :func:`llmco2.carbon.scoped.scope_entry`), with their
    sources (explicit values win over table defaults).

    Default PUE: ``edge_device`` (1.0, no facility) when every GPU is an edge module/SoC, else the
    industry average.
    """
    for name, text in (("region", region_id), ("pue", pue_value)):
        if isinstance(text, str) and not text.strip():  # not read as the default, as llmco2.predict refuses it
            raise InvalidInputError("is empty; give a value or leave it out (None) for its default", field=name)
    if region_id is not None and carbon_intensity is not None:
        raise InvalidInputError("give either `region` or `carbon_intensity`, not both", field="region")
    if carbon_intensity is not None:
        intensity = check_float(carbon_intensity, "carbon_intensity", 0.0, MAX_INTENSITY, " g CO2eq/kWh")
        grid = {"g_co2eq_per_kwh": intensity, "region": None, "source": "given by the user"}
    else:
        r = region(region_id)
        grid = {"g_co2eq_per_kwh": r.g_co2eq_per_kwh, "region": r.id, "year": r.year, "source": r.source}
    if isinstance(pue_value, (int, float)):
        if math.isfinite(pue_value) and pue_value < 1.0:
            raise InvalidInputError(f"PUE is facility over IT energy and cannot be below 1, got {pue_value}", field="pue")
        p = {"value": check_float(pue_value, "pue", 1.0, MAX_PUE), "source": "given by the user"}
    else:
        default = "edge_device" if gpus and all(g.form_factor in EDGE_FORM_FACTORS for g in gpus) else None
        row = pue(pue_value or default)
        p = {"value": row.value, "id": row.id, "source": row.source}
    if p["value"] < 1.0:
        raise InvalidInputError(f"PUE is facility over IT energy and cannot be below 1, got {p['value']}", field="pue")
    years = default_lifetime_years() if lifetime_years is None else lifetime_years
    if isinstance(years, (int, float)) and not isinstance(years, bool) and math.isfinite(years) and years <= 0:
        raise InvalidInputError(f"must be positive, got {float(years)}", field="lifetime_years")
    years = check_float(years, "lifetime_years", MIN_LIFETIME_YEARS, MAX_LIFETIME_YEARS, " years")
    out: dict[str, Any] = {"grid": grid, "pue": p, "lifetime_years": years}
    if engine is not None:
        e = get_engine(engine)
        out["engine"] = {"id": e.id, "name": e.name}
    if scope is not None:
        out["scope"] = scope_entry(scope, platform)
    elif platform is not None:
        raise InvalidInputError("applies with a scope (`scope='server'` or `scope='gpu'`)", field="platform")
    return out
