"""Per-phase energy and latency of many requests: a checkpoint's predictions, in chunks of
:data:`PREDICT_CHUNK` requests, joined into one :class:`~llmco2.models.head.PhasePrediction`.

The predictor is the torch-free :class:`~llmco2.models.inference.InferenceModel` of a checkpoint
(:func:`llmco2.models.predict.load_predictor`, the shipped one by default) or the training-side
``GNNPredictor`` (the reference path, :func:`llmco2.models.predict.load_reference_predictor`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from llmco2.analytic.table import RequestTable
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request

if TYPE_CHECKING:
    from llmco2.models.head import PhasePrediction

#: Requests predicted together: bounds the working memory (features, node states) to some 60 MB.
PREDICT_CHUNK = 4096
Item = tuple[ModelArch, Request, GPU]


def request_table(requests: Sequence[Item] | RequestTable) -> RequestTable:
    """``requests`` as a :class:`RequestTable`; raises when there are none."""
    table = requests if isinstance(requests, RequestTable) else RequestTable.from_items(list(requests))
    if not len(table):
        raise InvalidInputError("no requests to predict", field="requests")
    return table


def _predict(predictor: Any, table: RequestTable) -> PhasePrediction:
    """Per-phase predictions of ``table`` with the torch-free model, or with a training
    ``GNNPredictor`` (the reference path) when one is given."""
    if hasattr(predictor, "net") and not hasattr(predictor, "outputs"):  # GNNPredictor: takes items
        return predictor.predict(table.items())
    return predictor.predict(table)


def predict_phases(requests: Sequence[Item] | RequestTable, predictor: Any = None, chunk: int = PREDICT_CHUNK,
                   progress: Callable[[int], None] | None = None) -> PhasePrediction:
    """Energy (J), latency (s), interval and notes of every request, per phase.

    Args:
        requests: (arch, request, gpu) triples or a :class:`RequestTable`.
        predictor: a loaded checkpoint (default: the shipped one), torch-free
            (:func:`llmco2.models.predict.load_predictor`) or the training ``GNNPredictor``.
        chunk: requests predicted together (bounds the working memory).
        progress: a callable advanced by the number of requests of each finished chunk.
    """
    from llmco2.models.inference import concat_predictions

    table = request_table(requests)
    if predictor is None:
        from llmco2.models.predict import load_predictor

        predictor = load_predictor()
    parts = []
    for lo in range(0, len(table), chunk):
        parts.append(_predict(predictor, table.take(slice(lo, lo + chunk))))
        if progress is not None:
            progress(min(chunk, len(table) - lo))
    return concat_predictions(parts)
