"""Load a trained checkpoint for prediction (the shipped default or the user's).

:func:`load_predictor` gives the torch-free model (:class:`llmco2.models.inference.InferenceModel`:
NumPy network + output head) that every command uses; :func:`load_reference_predictor` gives the
training-side ``GNNPredictor`` (PyTorch and PyG), the reference the fast path is tested against.

Requests outside what the checkpoint was trained on still get a prediction — through the
hardware and analytic features — and say that they are extrapolations, and why. Predicting many
requests with it: :func:`llmco2.prediction.predict_phases`.
"""

from __future__ import annotations

import functools
import logging
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from llmco2.errors import InvalidInputError

if TYPE_CHECKING:
    from llmco2.models.inference import InferenceModel
    from llmco2.models.train import GNNPredictor

log = logging.getLogger(__name__)
DEFAULT_CHECKPOINT = "default.safetensors"


def default_checkpoint_path() -> Path:
    """The checkpoint shipped inside the package."""
    path = resources.files("llmco2.models") / "checkpoints" / DEFAULT_CHECKPOINT
    return Path(str(path))


def _checkpoint(path: str | None) -> Path:
    p = Path(path) if path else default_checkpoint_path()
    if not p.is_file():
        if path is None:
            raise InvalidInputError("the shipped default checkpoint is missing from this installation; pass --checkpoint",
                                    field="checkpoint")
        raise InvalidInputError(f"no such checkpoint {str(p)!r}", field="checkpoint")
    return p


def load_predictor(path: str | None = None) -> InferenceModel:
    """The torch-free predictor of ``path`` (default: the shipped checkpoint), cached per path."""
    from llmco2.models.inference import load_inference

    return load_inference(_checkpoint(path))


@functools.lru_cache(maxsize=4)
def load_reference_predictor(path: str | None = None) -> GNNPredictor:
    """The training-side predictor (PyTorch + PyG) of ``path``: the reference of the fast path."""
    from llmco2.models.train import GNNPredictor

    return GNNPredictor.load(_checkpoint(path))
