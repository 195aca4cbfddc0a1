"""The serving calibration: a small correction of simulated busy energy fitted on ML.ENERGY v3
steady-state rows (H100, vLLM), shipped as ``serving/data/calibration.json``.

log(measured / simulated J per output token) = c . [1, log B, log G, log B x log G, log O], with
B the simulated steady-state mean batch (held within the batches of the fit), G the GPUs and O the
mean output length. A second correction (``latency_coef``) scales decode-step latency:
log(measured / simulated inter-token latency) = d . [1, log B, log G, log B x log G], applied to
every decode step at its batch (:class:`~llmco2.serving.costs.GridCostModel`). Fitted by
:mod:`llmco2.serving.calibration_fit`, run by ``experiments/serving_mlenergy.py --write-calibration``
(its leave-one-model-out accuracy is in ``experiments/results/serving_mlenergy.md``). It belongs to the checkpoint it was fitted with
(its SHA-256 prefix is stored) and is not applied with any other.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from llmco2.serving.schedule import Schedule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """Coefficients ``coef`` of the correction, the checkpoint fingerprint they belong to and their source."""

    coef: tuple[float, ...]
    checkpoint: str
    source: str
    rows: int
    batch_range: tuple[float, float] = (1.0, 4096.0)
    latency_coef: tuple[float, ...] | None = None

    def factor(self, mean_batch: float, num_gpus: int, mean_output: float) -> float:
        """Multiplier of busy energy for a server at this mean batch, GPU count and mean output length."""
        lo, hi = self.batch_range  # no extrapolation beyond the batches it was fitted on
        lb, ln = math.log(min(max(mean_batch, lo), hi)), math.log(num_gpus)
        x = (1.0, lb, ln, lb * ln, math.log(max(mean_output, 1.0)))
        return math.exp(sum(c * v for c, v in zip(self.coef, x, strict=True)))

    def to_dict(self) -> dict[str, Any]:
        return {"coef": list(self.coef), "checkpoint": self.checkpoint, "source": self.source, "rows": self.rows,
                "batch_range": list(self.batch_range),
                "latency_coef": None if self.latency_coef is None else list(self.latency_coef)}


def fingerprint(path: str | Path) -> str:
    """First 12 hex digits of the SHA-256 of a checkpoint file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def calibration_path() -> Path:
    return Path(str(resources.files("llmco2.serving") / "data" / "calibration.json"))


@functools.lru_cache(maxsize=1)
def shipped_calibration() -> Calibration | None:
    """The shipped calibration, or ``None`` when there is none or it belongs to another default checkpoint."""
    from llmco2.prediction.loading import default_checkpoint_path

    path = calibration_path()
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    cal = Calibration(tuple(float(c) for c in raw["coef"]), str(raw["checkpoint"]), str(raw["source"]), int(raw["rows"]),
                      tuple(float(b) for b in raw.get("batch_range", (1.0, 4096.0))),  # type: ignore[arg-type]
                      tuple(float(c) for c in raw["latency_coef"]) if raw.get("latency_coef") else None)
    ckpt = default_checkpoint_path()
    if not ckpt.is_file() or fingerprint(ckpt) != cal.checkpoint:
        log.warning("serving calibration %s belongs to checkpoint %s, not the installed default; not applied", path, cal.checkpoint)
        return None
    return cal


def calibrate(schedule: Schedule, factor: float) -> None:
    """Scale the busy (non-idle) energy of every request and of the iteration log by ``factor``, in
    place; per-request energies still sum to the total, idle energy is unchanged."""
    busy = schedule.energy_j - schedule.idle_share_j
    prefill_busy = np.clip(schedule.prefill_j - schedule.idle_share_j, 0.0, busy)  # idle mostly rides on prefills
    schedule.prefill_j[:] = schedule.prefill_j + prefill_busy * (factor - 1.0)
    schedule.energy_j[:] = schedule.idle_share_j + busy * factor
    idle = np.asarray(schedule.log_idle_j)
    schedule.log_energy_j[:] = (idle + (np.asarray(schedule.log_energy_j) - idle) * factor).tolist()
