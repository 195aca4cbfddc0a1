"""Prediction stage: GPU energy and latency per phase (prefill, decode) of many requests from a
trained checkpoint, with intervals, notes and extrapolation flags.

:func:`predict_phases` is the one entry point; its result is a
:class:`llmco2.prediction.head.PhasePrediction`. Carbon accounting (:mod:`llmco2.carbon`) and the
serving simulator's iteration costs (:mod:`llmco2.serving.costs`) build on it.
"""

from llmco2.prediction.phases import PREDICT_CHUNK, Item, predict_phases

__all__ = ["PREDICT_CHUNK", "Item", "predict_phases"]
