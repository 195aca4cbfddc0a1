"""The footprint of requests: predicted energy per phase, latency, operational and embodied carbon,
and the assumptions behind them — vectorised over any number of requests."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.carbon.accounting import default_lifetime_years, embodied_g, operational_g, pue, region
from llmco2.errors import InvalidInputError
from llmco2.models.dataset import from_items
from llmco2.models.latency import LatencyModel
from llmco2.models.predict import extrapolation_notes, load_predictor
from llmco2.models.train import GNNPredictor
from llmco2.specs import GPU, ModelArch, Request

log = logging.getLogger(__name__)
EDGE_FORM_FACTORS = ("module", "SoC")


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
    extrapolated: list[bool] = field(default_factory=list)

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

    def record(self, i: int = 0) -> dict[str, Any]:
        """One request as the JSON of ``llmco2 predict`` (DESIGN.md convention 3)."""
        emb = float(self.embodied_g[i])
        return {
            "energy_j": {"prefill": float(self.prefill_j[i]), "decode": float(self.decode_j[i]), "total": float(self.total_j[i])},
            "latency_s": {"prefill": float(self.prefill_latency_s[i]), "decode": float(self.decode_latency_s[i]),
                          "total": float(self.latency_s[i])},
            "carbon_g": {"operational": float(self.operational_g[i]), "embodied": None if np.isnan(emb) else emb,
                         "total": float(self.total_g[i])},
            "assumptions": self.assumptions,
            "extrapolated": bool(self.extrapolated[i]) if self.extrapolated else False,
            "notes": self.notes[i] if self.notes else [],
        }


def resolve_assumptions(gpus: list[GPU], region_id: str | None = None, carbon_intensity: float | None = None,
                        pue_value: float | str | None = None, lifetime_years: float | None = None) -> dict[str, Any]:
    """Grid intensity, PUE and lifetime with their sources (explicit values win over table defaults).

    Default PUE: ``edge_device`` (1.0, no facility) when every GPU is an edge module/SoC, else the
    industry average.
    """
    if region_id is not None and carbon_intensity is not None:
        raise InvalidInputError("give either --region or --carbon-intensity, not both", field="--region")
    if carbon_intensity is not None:
        if carbon_intensity < 0:
            raise InvalidInputError(f"must be >= 0 g CO2eq/kWh, got {carbon_intensity}", field="--carbon-intensity")
        grid = {"g_co2eq_per_kwh": float(carbon_intensity), "region": None, "source": "given by the user"}
    else:
        r = region(region_id)
        grid = {"g_co2eq_per_kwh": r.g_co2eq_per_kwh, "region": r.id, "year": r.year, "source": r.source}
    if isinstance(pue_value, (int, float)):
        p = {"value": float(pue_value), "source": "given by the user"}
    else:
        default = "edge_device" if gpus and all(g.form_factor in EDGE_FORM_FACTORS for g in gpus) else None
        row = pue(pue_value or default)
        p = {"value": row.value, "id": row.id, "source": row.source}
    if p["value"] < 1.0:
        raise InvalidInputError(f"PUE is facility over IT energy and cannot be below 1, got {p['value']}", field="--pue")
    years = default_lifetime_years() if lifetime_years is None else float(lifetime_years)
    if years <= 0:
        raise InvalidInputError(f"must be positive, got {years}", field="--lifetime-years")
    return {"grid": grid, "pue": p, "lifetime_years": years}


def predict_footprint(items: list[tuple[ModelArch, Request, GPU]], predictor: GNNPredictor | None = None,
                      region_id: str | None = None, carbon_intensity: float | None = None,
                      pue_value: float | str | None = None, lifetime_years: float | None = None,
                      chunk: int = 20_000, progress: Any = None) -> Footprint:
    """Energy, latency and carbon of every request (``progress``: a callable advanced per chunk)."""
    if not items:
        raise InvalidInputError("no requests to predict", field="requests")
    model = predictor or load_predictor()
    latency_model = LatencyModel.from_state_dict(model.latency)
    assume = resolve_assumptions(list({g.id: g for _, _, g in items}.values()), region_id, carbon_intensity, pue_value,
                                 lifetime_years)
    energy, lat = [], []
    for lo in range(0, len(items), chunk):
        data = from_items(items[lo:lo + chunk])
        energy.append(model.predict_phases(data))
        lat.append(latency_model.predict(data))
        if progress is not None:
            progress(min(chunk, len(items) - lo))
    e = np.concatenate(energy)
    latency = np.concatenate(lat)
    steps = np.array([r.generated_tokens - 1 for _, r, _ in items])
    e[:, 1] = np.where(steps > 0, e[:, 1], 0.0)
    # a phase cannot be shorter than its energy at the GPUs' power limit (TDP): keeps the implied
    # power physical and the embodied share consistent with the energy
    board_w = np.array([g.tdp_w * r.num_gpus for _, r, g in items], dtype=float)
    latency = np.maximum(latency, e / board_w[:, None])
    total_j = e.sum(axis=1)
    op = operational_g(total_j, assume["pue"]["value"], assume["grid"]["g_co2eq_per_kwh"])
    emb = np.full(len(items), np.nan)
    gpu_ids = np.array([g.id for _, _, g in items])
    num_gpus = np.array([r.num_gpus for _, r, _ in items], dtype=float)
    seconds = latency.sum(axis=1)
    notes = [extrapolation_notes(model.domain, a, r, g) for a, r, g in items]
    extrapolated = [bool(n) for n in notes]
    for gid in np.unique(gpu_ids):
        mine = gpu_ids == gid
        gpu = next(g for _, _, g in items if g.id == gid)
        emb[mine] = embodied_g(gpu, num_gpus[mine], seconds[mine], assume["lifetime_years"])
        if np.isnan(emb[mine]).any():
            for i in np.flatnonzero(mine):
                notes[i].append(f"embodied carbon unknown: the die area of {gid} is not published (total = operational)")
    return Footprint(e[:, 0], e[:, 1], latency[:, 0], latency[:, 1], op, emb, assume, notes, extrapolated)
