"""The footprint of requests: predicted energy per phase, latency, operational and embodied carbon,
and the assumptions behind them — vectorised over any number of requests."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.table import RequestTable
from llmco2.carbon.accounting import default_lifetime_years, embodied_g, operational_g, pue, region
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request, get_engine
from llmco2.specs.limits import check_float

if TYPE_CHECKING:
    from llmco2.models.head import PhasePrediction

log = logging.getLogger(__name__)
EDGE_FORM_FACTORS = ("module", "SoC")
#: Ranges of the user's assumptions: grid intensity (the dirtiest grids are near 1,100 g/kWh),
#: PUE (facility over IT energy) and GPU lifetime.
MAX_INTENSITY, MAX_PUE = 5000.0, 10.0
MIN_LIFETIME_YEARS, MAX_LIFETIME_YEARS = 0.01, 100.0
#: Requests predicted together: bounds the working memory (features, node states) to some 60 MB.
PREDICT_CHUNK = 4096
Item = tuple[ModelArch, Request, GPU]


@dataclass
class Footprint:
    """Per-request arrays (J, s, g CO2eq) and the assumptions used."""

    prefill_j: NDArray[np.float64]
    decode_j: NDArray[np.float64]
    prefill_latency_s: NDArray[np.float64]
    decode_latency_s: NDArray[np.float64]
    operational_g: NDArray[np.float64]
    embodied_g: NDArray[np.float64]
    assumptions: dict[str, Any]
    notes: list[list[str]] = field(default_factory=list)
    extrapolated: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    energy_low_j: NDArray[np.float64] | None = None  # [n, 2] interval ends (J), prefill and decode
    energy_high_j: NDArray[np.float64] | None = None
    levels: tuple[float, float] = (0.1, 0.9)  # nominal quantiles of the interval

    @property
    def total_j(self) -> NDArray[np.float64]:
        return self.prefill_j + self.decode_j

    @property
    def latency_s(self) -> NDArray[np.float64]:
        return self.prefill_latency_s + self.decode_latency_s

    @property
    def total_g(self) -> NDArray[np.float64]:
        """Operational + embodied (embodied counted as 0 where it is unknown, with a note)."""
        return self.operational_g + np.nan_to_num(self.embodied_g)

    @property
    def total_low_j(self) -> NDArray[np.float64]:
        """Low end of the total's interval: the sum of the phases' low ends (J)."""
        low = self.energy_low_j if self.energy_low_j is not None else np.stack([self.prefill_j, self.decode_j], axis=1)
        return low.sum(axis=1)

    @property
    def total_high_j(self) -> NDArray[np.float64]:
        """High end of the total's interval: the sum of the phases' high ends (J)."""
        high = self.energy_high_j if self.energy_high_j is not None else np.stack([self.prefill_j, self.decode_j], axis=1)
        return high.sum(axis=1)

    def interval(self, i: int = 0) -> dict[str, list[float]]:
        """``{"prefill": [low, high], "decode": [...], "total": [...]}`` (J) of request ``i``."""
        low = self.energy_low_j if self.energy_low_j is not None else np.stack([self.prefill_j, self.decode_j], axis=1)
        high = self.energy_high_j if self.energy_high_j is not None else low
        return {"prefill": [float(low[i, 0]), float(high[i, 0])], "decode": [float(low[i, 1]), float(high[i, 1])],
                "total": [float(self.total_low_j[i]), float(self.total_high_j[i])]}

    def record(self, i: int = 0) -> dict[str, Any]:
        """One request as the JSON of ``llmco2 predict`` (DESIGN.md convention 3)."""
        emb = float(self.embodied_g[i])
        return {
            "energy_j": {"prefill": float(self.prefill_j[i]), "decode": float(self.decode_j[i]), "total": float(self.total_j[i])},
            "energy_j_interval": self.interval(i),
            "interval_levels": list(self.levels),
            "latency_s": {"prefill": float(self.prefill_latency_s[i]), "decode": float(self.decode_latency_s[i]),
                          "total": float(self.latency_s[i])},
            "carbon_g": {"operational": float(self.operational_g[i]), "embodied": None if np.isnan(emb) else emb,
                         "total": float(self.total_g[i])},
            "assumptions": self.assumptions,
            "extrapolated": bool(self.extrapolated[i]) if len(self.extrapolated) else False,
            "notes": self.notes[i] if self.notes else [],
        }


def resolve_assumptions(gpus: list[GPU], region_id: str | None = None, carbon_intensity: float | None = None,
                        pue_value: float | str | None = None, lifetime_years: float | None = None,
                        engine: str | None = None) -> dict[str, Any]:
    """Grid intensity, PUE, lifetime and (when given) the serving engine, with their sources
    (explicit values win over table defaults).

    Default PUE: ``edge_device`` (1.0, no facility) when every GPU is an edge module/SoC, else the
    industry average.
    """
    if region_id is not None and carbon_intensity is not None:
        raise InvalidInputError("give either --region or --carbon-intensity, not both", field="--region")
    if carbon_intensity is not None:
        intensity = check_float(carbon_intensity, "--carbon-intensity", 0.0, MAX_INTENSITY, " g CO2eq/kWh")
        grid = {"g_co2eq_per_kwh": intensity, "region": None, "source": "given by the user"}
    else:
        r = region(region_id)
        grid = {"g_co2eq_per_kwh": r.g_co2eq_per_kwh, "region": r.id, "year": r.year, "source": r.source}
    if isinstance(pue_value, (int, float)):
        if math.isfinite(pue_value) and pue_value < 1.0:
            raise InvalidInputError(f"PUE is facility over IT energy and cannot be below 1, got {pue_value}", field="--pue")
        p = {"value": check_float(pue_value, "--pue", 1.0, MAX_PUE), "source": "given by the user"}
    else:
        default = "edge_device" if gpus and all(g.form_factor in EDGE_FORM_FACTORS for g in gpus) else None
        row = pue(pue_value or default)
        p = {"value": row.value, "id": row.id, "source": row.source}
    if p["value"] < 1.0:
        raise InvalidInputError(f"PUE is facility over IT energy and cannot be below 1, got {p['value']}", field="--pue")
    years = default_lifetime_years() if lifetime_years is None else float(lifetime_years)
    if math.isfinite(years) and years <= 0:
        raise InvalidInputError(f"must be positive, got {years}", field="--lifetime-years")
    years = check_float(years, "--lifetime-years", MIN_LIFETIME_YEARS, MAX_LIFETIME_YEARS, " years")
    out: dict[str, Any] = {"grid": grid, "pue": p, "lifetime_years": years}
    if engine is not None:
        e = get_engine(engine)
        out["engine"] = {"id": e.id, "name": e.name}
    return out


def _predict(predictor: Any, table: RequestTable) -> PhasePrediction:
    """Per-phase predictions of ``table`` with the torch-free model, or with a training
    ``GNNPredictor`` (the reference path) when one is given."""
    if hasattr(predictor, "net") and not hasattr(predictor, "outputs"):  # GNNPredictor: takes items
        return predictor.predict(table.items())
    return predictor.predict(table)


def predict_footprint(requests: Sequence[Item] | RequestTable, predictor: Any = None,
                      region_id: str | None = None, carbon_intensity: float | None = None,
                      pue_value: float | str | None = None, lifetime_years: float | None = None,
                      chunk: int = PREDICT_CHUNK, progress: Any = None, assumptions: dict[str, Any] | None = None) -> Footprint:
    """Energy, latency, interval and carbon of every request.

    Args:
        requests: (arch, request, gpu) triples or a :class:`RequestTable`.
        predictor: a loaded checkpoint (default: the shipped one), torch-free
            (:func:`llmco2.models.predict.load_predictor`) or the training ``GNNPredictor``.
        chunk: requests predicted together (bounds the working memory).
        progress: a callable advanced by the number of requests of each finished chunk.
        assumptions: pre-resolved grid/PUE/lifetime (:func:`resolve_assumptions`), e.g. shared by
            the chunks of one file; else resolved from the other arguments.
    """
    table = requests if isinstance(requests, RequestTable) else RequestTable.from_items(list(requests))
    if not len(table):
        raise InvalidInputError("no requests to predict", field="requests")
    if predictor is None:
        from llmco2.models.predict import load_predictor

        predictor = load_predictor()
    assume = assumptions or resolve_assumptions(table.gpus, region_id, carbon_intensity, pue_value, lifetime_years)
    parts = []
    for lo in range(0, len(table), chunk):
        parts.append(_predict(predictor, table.take(slice(lo, lo + chunk))))
        if progress is not None:
            progress(min(chunk, len(table) - lo))
    energy = np.concatenate([q.energy_j for q in parts])
    latency = np.concatenate([q.latency_s for q in parts])
    low = np.concatenate([q.energy_low_j for q in parts])
    high = np.concatenate([q.energy_high_j for q in parts])
    notes = [n for q in parts for n in q.notes]
    extrapolated = np.concatenate([q.extrapolated for q in parts])
    total_j = energy.sum(axis=1)
    op = operational_g(total_j, assume["pue"]["value"], assume["grid"]["g_co2eq_per_kwh"])
    emb = np.full(len(table), np.nan)
    num_gpus = table.num_gpus.astype(float)
    seconds = latency.sum(axis=1)
    for code, gpu in enumerate(table.gpus):
        mine = np.flatnonzero(table.gpu == code)
        if not len(mine):
            continue
        emb[mine] = embodied_g(gpu, num_gpus[mine], seconds[mine], assume["lifetime_years"])
        if np.isnan(emb[mine]).any():
            note = f"embodied carbon unknown: the die area of {gpu.id} is not published (total = operational)"
            for i in mine[np.isnan(emb[mine])]:
                notes[i].append(note)
    return Footprint(energy[:, 0], energy[:, 1], latency[:, 0], latency[:, 1], op, emb, assume, notes, extrapolated,
                     low, high, tuple(parts[0].levels))
