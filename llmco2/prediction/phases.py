"""Per-phase energy and latency of many requests: a checkpoint's predictions, in chunks of
:data:`PREDICT_CHUNK` requests, joined into one :class:`~llmco2.prediction.head.PhasePrediction`.

The predictor is the torch-free :class:`~llmco2.prediction.inference.InferenceModel` of a checkpoint
(:func:`llmco2.prediction.loading.load_predictor`, the shipped one by default) or the training-side
``GNNPredictor`` (the reference path, :func:`llmco2.training.train.load_reference_predictor`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llmco2.analytic.table import RequestTable
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request

if TYPE_CHECKING:
    from llmco2.prediction.head import PhasePrediction

#: Requests predicted together: bounds the working memory (features, node states) to some 60 MB.
PREDICT_CHUNK = 4096
Item = tuple[ModelArch, Request, GPU]


def request_table(requests: Sequence[Item] | RequestTable) -> RequestTable:
    """``requests`` as a :class:`RequestTable`; raises when there are none."""
    table = requests if isinstance(requests, RequestTable) else RequestTable.from_items(list(requests))
    if not len(table):
        raise InvalidInputError("no requests to predict", field="requests")
    return table


@runtime_checkable
class PhasePredictor(Protocol):
    """A loaded checkpoint: the torch-free :class:`~llmco2.prediction.inference.InferenceModel` or
    the training ``GNNPredictor`` (the reference path)."""

    def predict(self, requests: RequestTable) -> PhasePrediction:
        """Per-phase energy, latency, interval and notes of every request of ``requests``."""
        ...


def predict_phases(requests: Sequence[Item] | RequestTable, predictor: PhasePredictor | None = None, chunk: int = PREDICT_CHUNK,
                   progress: Callable[[int], None] | None = None) -> PhasePrediction:
    """Energy (J), latency (s), interval and notes of every request, per phase.

    Args:
        requests: (arch, request, gpu) triples or a :class:`RequestTable`.
        predictor: a loaded checkpoint (default: the shipped one), torch-free
            (:func:`llmco2.prediction.loading.load_predictor`) or the training ``GNNPredictor``.
        chunk: requests predicted together (bounds the working memory).
        progress: a callable advanced by the number of requests of each finished chunk.
    """
    from llmco2.prediction.inference import concat_predictions

    table = request_table(requests)
    if predictor is None:
        from llmco2.prediction.loading import load_predictor

        predictor = load_predictor()
    parts = []
    for lo in range(0, len(table), chunk):
        parts.append(predictor.predict(table.take(slice(lo, lo + chunk))))
        if progress is not None:
            progress(min(chunk, len(table) - lo))
    return concat_predictions(parts)
