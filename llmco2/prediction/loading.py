"""Load a trained checkpoint for prediction (the shipped default or the user's).

:func:`load_predictor` gives the torch-free model (:class:`llmco2.prediction.inference.InferenceModel`:
NumPy network + output head) that every command uses; the training-side ``GNNPredictor`` (PyTorch
and PyG), the reference the fast path is tested against, is
:func:`llmco2.training.train.load_reference_predictor`.

Requests outside what the checkpoint was trained on still get a prediction — through the
hardware and analytic features — and say that they are extrapolations, and why. Predicting many
requests with it: :func:`llmco2.prediction.predict_phases`.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from llmco2.errors import InvalidInputError

if TYPE_CHECKING:
    from llmco2.prediction.inference import InferenceModel

log = logging.getLogger(__name__)
DEFAULT_CHECKPOINT = "default.safetensors"


def default_checkpoint_path() -> Path:
    """The checkpoint shipped inside the package."""
    path = resources.files("llmco2.prediction") / "checkpoints" / DEFAULT_CHECKPOINT
    return Path(str(path))


def checkpoint_path(path: str | None = None) -> Path:
    """The checkpoint file ``path`` names (default: the shipped one); raises when it is missing."""
    from llmco2.prediction.checkpoint_file import check_checkpoint_file

    p = Path(path) if path else default_checkpoint_path()
    if path is None and not p.is_file():
        raise InvalidInputError("the shipped default checkpoint is missing from this installation; pass `checkpoint`",
                                field="checkpoint")
    return check_checkpoint_file(p)  # missing, a directory, a FIFO or /dev/zero: said as such


def load_predictor(path: str | None = None) -> InferenceModel:
    """The torch-free predictor of ``path`` (default: the shipped checkpoint), cached per path."""
    from llmco2.prediction.inference import load_inference

    return load_inference(checkpoint_path(path))
