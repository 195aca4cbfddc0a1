"""Predict the energy of requests with a trained checkpoint (the shipped default or the user's).

Requests outside what the checkpoint was trained on still get a prediction — through the
hardware and analytic features — and say that they are extrapolations, and why.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.models.dataset import from_items
from llmco2.models.train import GNNPredictor
from llmco2.specs import GPU, ModelArch, Request

log = logging.getLogger(__name__)
DEFAULT_CHECKPOINT = "default.pt"


def default_checkpoint_path() -> Path:
    """The checkpoint shipped inside the package."""
    path = resources.files("llmco2.models") / "checkpoints" / DEFAULT_CHECKPOINT
    return Path(str(path))


@functools.lru_cache(maxsize=4)
def load_predictor(path: str | None = None) -> GNNPredictor:
    """The predictor of ``path`` (default: the shipped checkpoint), cached per path."""
    p = Path(path) if path else default_checkpoint_path()
    if not p.is_file():
        if path is None:
            raise InvalidInputError("the shipped default checkpoint is missing from this installation; pass --checkpoint",
                                    field="checkpoint")
        raise InvalidInputError(f"no such checkpoint {str(p)!r}", field="checkpoint")
    return GNNPredictor.load(p)


@dataclass
class EnergyPrediction:
    """Predicted GPU energy (J) per request, by phase, with extrapolation notes."""

    prefill_j: NDArray[np.float64]
    decode_j: NDArray[np.float64]
    notes: list[list[str]] = field(default_factory=list)

    @property
    def total_j(self) -> NDArray[np.float64]:
        return self.prefill_j + self.decode_j


def extrapolation_notes(domain: dict[str, Any], arch: ModelArch, req: Request, gpu: GPU) -> list[str]:
    """Why a request lies outside the checkpoint's training domain (empty when it does not)."""
    notes: list[str] = []
    if domain.get("devices") and gpu.id not in domain["devices"]:
        notes.append(f"unseen GPU {gpu.id} (trained on {', '.join(domain['devices'])}): extrapolated through its "
                     "peak throughput, bandwidth and TDP")
    checks = (("params", arch.param_count(), "parameters"), ("prompt_tokens", req.prompt_tokens, "prompt tokens"),
              ("generated_tokens", req.generated_tokens, "generated tokens"), ("batch_size", req.batch_size, "batch size"),
              ("num_gpus", req.num_gpus, "GPUs"))
    for key, value, label in checks:
        lo_hi = domain.get(key)
        if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
            notes.append(f"{label} {value:,} outside the trained range {lo_hi[0]:,}-{lo_hi[1]:,}")
    return notes


def predict_energy(items: list[tuple[ModelArch, Request, GPU]], predictor: GNNPredictor | None = None) -> EnergyPrediction:
    """Prefill and decode energy of every (arch, request, gpu); vectorised over all of them."""
    model = predictor or load_predictor()
    data = from_items(items)
    per_phase = model.predict_phases(data)
    decode = np.where(np.array([r.generated_tokens > 1 for _, r, _ in items]), per_phase[:, 1], 0.0)
    notes = [extrapolation_notes(model.domain, a, r, g) for a, r, g in items]
    return EnergyPrediction(per_phase[:, 0], decode, notes)
