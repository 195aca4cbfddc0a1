"""Measurements and a demo regressor for :func:`~llmco2.data.sampling.focused_loop`: a synthetic
analytic energy (J, tests and demos only), a look-up in measured data, analytic features and
``(fit, predict)`` around a scikit-learn regressor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.sampling.common import SAMPLE_COLUMNS
from llmco2.data.sampling.frames import check_samples, rows_to_items
from llmco2.errors import InvalidInputError


def _analysis(df: pd.DataFrame) -> Any:
    from llmco2.analytic.layer import LayerBatch, analyze_layers
    from llmco2.analytic.model import model_totals

    batch = LayerBatch.from_items(rows_to_items(df, validate=False), validate=False)
    return batch, model_totals(analyze_layers(batch))


def analytic_measure(df: pd.DataFrame, power_w: float = 300.0) -> NDArray[np.float64]:
    """A **synthetic** energy (J) for tests and demos only — not a measurement and not a model of
    real power: the analytic roofline time of the request (prefill + decode, the whole batch)
    times a constant ``power_w`` per GPU times the GPU count. Deterministic. Use an NVML harness
    (or :func:`lookup_measure` on measured data) for real targets."""
    if not len(df):
        return np.zeros(0)
    _, totals = _analysis(df)
    time_s = totals.totals["prefill"]["time_s"] + totals.totals["decode"]["time_s"]
    return np.asarray(time_s * float(power_w) * df["num_gpus"].to_numpy(dtype=np.float64), dtype=np.float64)


def lookup_measure(table: pd.DataFrame, target: str = "energy_j") -> Callable[[pd.DataFrame], NDArray[np.float64]]:
    """A ``measure`` that looks configurations up in an already measured ``table`` (sample
    columns + ``target``; repeated configurations are averaged); NaN where a row is not there."""
    keys = [c for c in SAMPLE_COLUMNS if c != "trace"]
    if target not in table.columns:
        raise InvalidInputError(f"the table has no column {target!r}", field="target")
    known = check_samples(table.assign(trace=table["trace"] if "trace" in table.columns else "uniform"))
    means = known.groupby(keys, sort=False)[target].mean().rename("_value").reset_index()

    def measure(df: pd.DataFrame) -> NDArray[np.float64]:
        q = check_samples(df)[keys]
        return q.merge(means, on=keys, how="left")["_value"].to_numpy(dtype=np.float64)

    return measure


#: Columns of :func:`analytic_features`.
FEATURE_NAMES = ("log_prefill_ops", "log_decode_ops", "log_prefill_mem_bytes", "log_decode_mem_bytes", "log_net_bytes",
                 "log_prompt_tokens", "log_generated_tokens", "batch_size", "num_gpus", "weight_bits", "log_params",
                 "log_peak_ops_per_s", "log_mem_bw_bytes_per_s")


def analytic_features(df: pd.DataFrame) -> NDArray[np.float64]:
    """A few analytic features per row (:data:`FEATURE_NAMES`) for a quick tabular regressor:
    operation and memory-traffic counts of both phases from the analytic engine, the request and
    the GPU's peaks (no roofline time)."""
    batch, totals = _analysis(df)
    t = totals.totals
    cols = [np.log1p(t["prefill"]["ops"]), np.log1p(t["decode"]["ops"]), np.log1p(t["prefill"]["mem_bytes"]),
            np.log1p(t["decode"]["mem_bytes"]), np.log1p(t["prefill"]["net_bytes"] + t["decode"]["net_bytes"]),
            np.log(batch.prompt), np.log(batch.generated), batch.batch, batch.num_gpus, batch.w_bytes * 8,
            np.log(batch.params), np.log(batch.peak_ops_per_s), np.log(batch.mem_bw_bytes_per_s)]
    return np.column_stack(cols).astype(np.float64)


def sklearn_callables(estimator: Any, features: Callable[[pd.DataFrame], np.ndarray] = analytic_features,
                      log_target: bool = True) -> tuple[Callable[[pd.DataFrame, np.ndarray], Any], Callable[[Any, pd.DataFrame], np.ndarray]]:
    """``(fit, predict)`` for :func:`focused_loop` around a scikit-learn regressor (cloned per
    fit), on ``features`` of the frame, regressing ``log(target)`` when ``log_target``."""
    from sklearn.base import clone

    def fit(X: pd.DataFrame, y: np.ndarray) -> Any:
        est = clone(estimator)
        est.fit(features(X), np.log(y) if log_target else y)
        return est

    def predict(est: Any, X: pd.DataFrame) -> np.ndarray:
        p = np.asarray(est.predict(features(X)), dtype=np.float64)
        return np.exp(p) if log_target else p

    return fit, predict
