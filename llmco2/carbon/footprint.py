"""The footprint of requests: predicted energy per phase and latency (from
:mod:`llmco2.prediction`), operational and embodied carbon, and the assumptions behind them —
vectorised over any number of requests."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.table import RequestTable
from llmco2.carbon.accounting import J_PER_KWH, embodied_g, operational_g
from llmco2.carbon.assumptions import EDGE_FORM_FACTORS, resolve_assumptions
from llmco2.carbon.scoped import ServerParts, scoped_carbon_inputs, server_parts
from llmco2.prediction.phases import PREDICT_CHUNK, Item, predict_phases, request_table

if TYPE_CHECKING:
    from llmco2.prediction.head import PhasePrediction

# EDGE_FORM_FACTORS, resolve_assumptions, PREDICT_CHUNK and Item are also importable from here, their earlier home.
__all__ = ["EDGE_FORM_FACTORS", "PREDICT_CHUNK", "Footprint", "Item", "footprint_from", "predict_footprint",
           "resolve_assumptions"]

log = logging.getLogger(__name__)


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
    server: ServerParts | None = None  # server-scope figures, when the assumptions name a scope
    memory_bytes: NDArray[np.float64] | None = None  # [n, 2] weights and KV cache per GPU (bytes), when known
    fits_in_memory: NDArray[np.bool_] | None = None  # whether they fit each GPU's memory, when known

    @property
    def scope(self) -> str | None:
        """The scope carbon is computed on (``gpu`` or ``server``); ``None``: no scope named (GPU energy)."""
        entry = self.assumptions.get("scope")
        return None if entry is None else entry["scope"]

    @property
    def scope_j(self) -> NDArray[np.float64]:
        """Energy (J) operational carbon is computed on: the server's wall energy with scope ``server``, else the GPUs'."""
        return self.server.total_j if self.scope == "server" and self.server is not None else self.total_j

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
        """One request as the JSON of ``llmco2 predict`` (convention 3 (docs/reference/conventions.md))."""
        emb = float(self.embodied_g[i])
        out = {
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
        if self.server is not None:
            s = self.server
            out["server_energy_j"] = {"prefill": float(s.prefill_j[i]), "decode": float(s.decode_j[i]),
                                      "total": float(s.total_j[i])}
            entry = {k: v for k, v in self.assumptions["scope"].items() if k != "platforms"}
            out["assumptions"] = {**self.assumptions, "scope": {**entry, **s.row(i)}}
        return out


def footprint_from(phases: PhasePrediction, table: RequestTable, assumptions: dict[str, Any]) -> Footprint:
    """The footprint of the requests of ``table`` from their per-phase predictions: operational
    carbon of the energy, embodied carbon of the GPUs for the predicted time (a note where a GPU's
    embodied carbon is unknown), under ``assumptions`` (:func:`resolve_assumptions`).

    When the assumptions name a scope (``assumptions["scope"]``, :func:`llmco2.carbon.scoped.scope_entry`), the
    server-scope figures are computed too (:func:`llmco2.carbon.scoped.server_parts`) and carbon is on that scope;
    the platforms used are added to the scope entry (``platforms``: GPU id -> platform id)."""
    energy, latency = phases.energy_j, phases.latency_s
    notes = phases.notes
    extrapolated = phases.extrapolated
    num_gpus = table.num_gpus.astype(float)
    scope = assumptions.get("scope")
    server = None
    if scope is not None:
        server = server_parts(table.gpus, table.gpu, num_gpus, energy, latency, scope["platform"], assumptions["lifetime_years"])
        used = scope.setdefault("platforms", {})
        for code, gpu in enumerate(table.gpus):
            if np.any(table.gpu == code):
                used[gpu.id] = server.platforms[int(server.platform[np.flatnonzero(table.gpu == code)[0]])].id
    emb = np.full(len(table), np.nan)
    seconds = latency.sum(axis=1)
    for code, gpu in enumerate(table.gpus):
        mine = np.flatnonzero(table.gpu == code)
        if not len(mine):
            continue
        emb[mine] = embodied_g(gpu, num_gpus[mine], seconds[mine], assumptions["lifetime_years"])
        if np.isnan(emb[mine]).any():
            note = f"embodied carbon unknown: the die area of {gpu.id} is not published (total = operational)"
            for i in mine[np.isnan(emb[mine])]:
                notes[i].append(note)
    carbon_j, emb = scoped_carbon_inputs(scope, energy.sum(axis=1), emb, server)
    op = operational_g(carbon_j, assumptions["pue"]["value"], assumptions["grid"]["g_co2eq_per_kwh"])
    return Footprint(energy[:, 0], energy[:, 1], latency[:, 0], latency[:, 1], op, emb, assumptions, notes, extrapolated,
                     phases.energy_low_j, phases.energy_high_j, tuple(phases.levels), server,
                     phases.memory_bytes, phases.fits_in_memory)


def predict_footprint(requests: Sequence[Item] | RequestTable, predictor: Any = None,
                      region_id: str | None = None, carbon_intensity: float | None = None,
                      pue_value: float | str | None = None, lifetime_years: float | None = None,
                      chunk: int = PREDICT_CHUNK, progress: Any = None, assumptions: dict[str, Any] | None = None,
                      scope: str | None = None, platform: str | None = None) -> Footprint:
    """Energy, latency, interval and carbon of every request: :func:`llmco2.prediction.predict_phases`
    then :func:`footprint_from`.

    Args:
        requests: (arch, request, gpu) triples or a :class:`RequestTable`.
        predictor: a loaded checkpoint (default: the shipped one), torch-free
            (:func:`llmco2.prediction.loading.load_predictor`) or the training ``GNNPredictor``.
        chunk: requests predicted together (bounds the working memory).
        progress: a callable advanced by the number of requests of each finished chunk.
        assumptions: pre-resolved grid/PUE/lifetime (:func:`resolve_assumptions`), e.g. shared by
            the chunks of one file; else resolved from the other arguments.
        scope, platform: carbon on ``gpu`` or ``server`` energy, on ``platform`` (default: each GPU's usual one);
            ``None``: the GPUs' energy without the server figures (as before scopes existed).
    """
    table = request_table(requests)
    assume = assumptions or resolve_assumptions(table.gpus, region_id, carbon_intensity, pue_value, lifetime_years,
                                                scope=scope, platform=platform)
    return footprint_from(predict_phases(table, predictor, chunk, progress), table, assume)


def with_hourly_carbon(fp: Any, intensities: NDArray[np.float64]) -> Any:
    """A :class:`~llmco2.carbon.footprint.Footprint` whose operational carbon (g CO2eq) uses each
    request's own intensity (g CO2eq/kWh): energy (kWh, on the footprint's scope) x PUE x intensity."""
    pue = float(fp.assumptions["pue"]["value"])
    op = np.asarray(fp.scope_j, dtype=np.float64) / J_PER_KWH * pue * np.asarray(intensities, dtype=np.float64)
    return replace(fp, operational_g=op)
