"""Per-epoch training checkpoints of the GNN: ``last`` and ``best``, as Lightning writes them.

After every epoch :func:`save_epoch` writes, in ``DIR``:

* ``last.safetensors``: a complete predictor checkpoint (loadable with ``GNNPredictor.load``) that
  also holds what continuing needs: the optimiser's moments, the best weights so far, the NumPy
  and torch random states, the epoch, the early-stopping counters and the losses so far;
* ``best.safetensors``: the predictor with the best validation loss so far (its intervals are
  calibrated only at the end of training, in the final checkpoint).

Both go through the safe checkpoint format (:mod:`llmco2.prediction.checkpoint_file`: tensors and
JSON, written atomically), so a run killed at any moment leaves the previous epoch's files whole.
:func:`load_epoch` restores everything into a freshly set-up predictor, so that a resumed run
continues to the same weights as an uninterrupted one with the same seed and data.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llmco2.errors import InvalidInputError
from llmco2.prediction.checkpoint_file import BEST_WEIGHTS_PREFIX, OPTIMIZER_PREFIX, read_checkpoint

if TYPE_CHECKING:
    import torch


log = logging.getLogger(__name__)

LAST, BEST = "last.safetensors", "best.safetensors"


class TrainingHistory(Protocol):
    """Loss curves of a run (per epoch) and its best epoch."""

    train_loss: list[float]
    val_loss: list[float]
    best_epoch: int


class ResumableModel(Protocol):
    """What a resumable run saves and restores: the settings (a dataclass), the network, the loss
    history and a ``save`` that writes the safe checkpoint format with extra entries
    (:class:`llmco2.training.train.GNNPredictor` is one)."""

    config: Any
    net: torch.nn.Module | None
    history: TrainingHistory

    def save(self, path: str | Path, extra_tensors: dict[str, Any] | None = None,
             extra_meta: dict[str, Any] | None = None) -> Path: ...


_OPT, _BEST_W = OPTIMIZER_PREFIX, BEST_WEIGHTS_PREFIX


def run_fingerprint(predictor: ResumableModel, rows: int, val_rows: int) -> dict[str, Any]:
    """What a resumed run must share with the interrupted one: settings and data sizes."""
    return json.loads(json.dumps({"config": asdict(predictor.config), "train_rows": rows, "val_rows": val_rows}))


def save_epoch(folder: Path, predictor: ResumableModel, opt: torch.optim.Optimizer, rng: np.random.Generator, epoch: int,
               best: dict[str, torch.Tensor] | None, best_loss: float, stale: int, fingerprint: dict[str, Any],
               improved: bool) -> None:
    """Write ``last`` (and ``best`` when this epoch improved) after ``epoch``."""
    import torch

    opt_state = opt.state_dict()
    tensors: dict[str, np.ndarray] = {}
    steps: dict[str, float] = {}
    for idx, state in opt_state["state"].items():
        for key, value in state.items():
            if key == "step":
                steps[str(idx)] = float(value)
            else:
                tensors[f"{_OPT}{idx}.{key}"] = value.detach().cpu().numpy()
    for name, value in (best or {}).items():
        tensors[f"{_BEST_W}{name}"] = value.detach().cpu().numpy()
    tensors["torch_rng"] = torch.get_rng_state().numpy()
    training = {"epoch": epoch, "best_loss": best_loss if np.isfinite(best_loss) else None, "stale": stale,
                "has_best": best is not None, "steps": steps, "param_groups": opt_state["param_groups"],
                "numpy_rng": rng.bit_generator.state, "fingerprint": fingerprint}
    folder.mkdir(parents=True, exist_ok=True)
    if improved:  # best first: a run stopped between the two redoes this epoch, and writes both again
        predictor.save(folder / BEST)
    predictor.save(folder / LAST, extra_tensors=tensors, extra_meta={"training": training})


def saved_epochs(folder: Path) -> int | None:
    """How many epochs the state :func:`save_epoch` kept in ``folder`` has finished (None: no
    readable state there)."""
    try:
        _, meta = read_checkpoint(folder / LAST)
        return int(meta["training"]["epoch"]) + 1
    except (InvalidInputError, OSError, KeyError, TypeError, ValueError):
        return None


def load_epoch(folder: Path, predictor: ResumableModel, opt: torch.optim.Optimizer, rng: np.random.Generator,
               fingerprint: dict[str, Any]) -> tuple[int, dict[str, torch.Tensor] | None, float, int]:
    """Restore the state :func:`save_epoch` wrote into ``predictor``, ``opt`` and ``rng``.
    Returns ``(next epoch, best weights, best loss, stale epochs)``."""
    import torch

    path = folder / LAST
    if not path.is_file():
        raise InvalidInputError(f"resume=true but there is no {path} to resume from; give the interrupted run's folder "
                                "(hydra.run.dir=... or out_dir=...)", field="resume")
    tensors, meta = read_checkpoint(path)
    training = meta.get("training")
    if not isinstance(training, dict):
        raise InvalidInputError(f"{path} has no training state to resume from", field="resume")
    if training.get("fingerprint") != fingerprint:
        raise InvalidInputError(f"{path} was written by a run with other settings or data; resume it with the same "
                                "ones, or start afresh without resume=true", field="resume")
    assert predictor.net is not None
    names = set(predictor.net.state_dict())
    predictor.net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items() if k in names})
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith(_OPT):
            idx, name = key[len(_OPT):].split(".", 1)
            state.setdefault(int(idx), {})[name] = torch.from_numpy(value.copy())
    for idx, step in training["steps"].items():
        state.setdefault(int(idx), {})["step"] = torch.tensor(step, dtype=torch.float32)
    opt.load_state_dict({"state": state, "param_groups": training["param_groups"]})
    best = {k[len(_BEST_W):]: torch.from_numpy(v.copy()) for k, v in tensors.items() if k.startswith(_BEST_W)} \
        if training["has_best"] else None
    torch.set_rng_state(torch.from_numpy(tensors["torch_rng"].astype(np.uint8)))
    rng.bit_generator.state = training["numpy_rng"]
    history = meta.get("history", {})
    predictor.history.train_loss = list(history.get("train_loss", []))
    predictor.history.val_loss = list(history.get("val_loss", []))
    predictor.history.best_epoch = int(history.get("best_epoch", -1))
    best_loss = training["best_loss"] if training["best_loss"] is not None else float("inf")
    log.info("resuming training from %s after epoch %d", path, training["epoch"])
    return int(training["epoch"]) + 1, best, float(best_loss), int(training["stale"])
