"""Fitting the serving calibration (:mod:`llmco2.serving.calibration`) on ML.ENERGY rows simulated
with a learned checkpoint.

Input: ML.ENERGY steady-state rows (:func:`llmco2.serving.mlenergy.load_rows`) with the simulated
steady state of each beside its measurement: ``sim_j_per_token``, ``sim_mean_batch`` and
``sim_itl_s`` (``experiments/serving_mlenergy.py`` simulates them and judges the fit by leaving
one model out).

* Energy: least squares of log(measured / simulated J per output token) on :func:`features` of
  the form :data:`FORM` (1, log batch, log GPUs, log batch x log GPUs, log mean output length;
  batch: the simulated steady-state mean batch).
* Latency: least squares of log(measured / simulated inter-token latency) on :data:`LATENCY_FORM`
  (1, log batch, log GPUs, their product).
* :func:`fit_calibration` fits both on every v3 H100 row; :func:`write_calibration` stores the
  result as the shipped ``serving/data/calibration.json``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.serving.calibration import Calibration, calibration_path

log = logging.getLogger(__name__)

#: Forms of the energy correction: letters of the features after the constant (see :func:`features`).
FORMS = {"constant": "", "batch": "b", "batch, GPUs": "bn", "batch, output length": "bo",
         "batch, GPUs, output length": "bno"}
FORM = "bno"  # the correction shipped (and used for the experiment's headline tables)
LATENCY_FORM = "bn"
#: The rows the shipped calibration is fitted on.
FIT_RELEASE, FIT_DEVICE = "v3", "h100-sxm"


def features(rows: pd.DataFrame, form: str) -> np.ndarray:
    """Columns of the correction: 1, log batch (b), log GPUs and its product with log batch (n),
    log mean output length (o). Batch = the simulated steady-state mean batch."""
    lb = np.log(rows["sim_mean_batch"].to_numpy(float))
    ln = np.log(rows["num_devices"].to_numpy(float))
    cols = [np.ones(len(rows))]
    if "b" in form:
        cols.append(lb)
    if "n" in form:
        cols += [ln, lb * ln]
    if "o" in form:
        cols.append(np.log(rows["generated_tokens"].to_numpy(float)))
    return np.stack(cols, axis=1)


def fit_correction(train: pd.DataFrame, form: str = FORM) -> np.ndarray:
    """Least squares of log(measured / simulated J per output token) on :func:`features`."""
    y = np.log(train["j_per_output_token"].to_numpy(float) / train["sim_j_per_token"].to_numpy(float))
    coef, *_ = np.linalg.lstsq(features(train, form), y, rcond=None)
    return coef


def apply_correction(rows: pd.DataFrame, coef: np.ndarray, form: str = FORM) -> np.ndarray:
    """Corrected J per output token of ``rows``."""
    return rows["sim_j_per_token"].to_numpy(float) * np.exp(features(rows, form) @ coef)


def measured_itl(rows: pd.DataFrame) -> np.ndarray:
    """Measured inter-token latency (s): v3 median ITL, v2 mean time per output token."""
    v3 = rows["release"].to_numpy() == "v3"
    itl = rows["median_itl_ms"].to_numpy(float) / 1000.0 if "median_itl_ms" in rows else np.full(len(rows), np.nan)
    tpot = rows["avg_tpot_s"].to_numpy(float) if "avg_tpot_s" in rows else np.full(len(rows), np.nan)
    return np.where(v3, itl, tpot)


def fit_latency(train: pd.DataFrame) -> np.ndarray:
    """Least squares of log(measured / simulated inter-token latency) on 1, log batch, log GPUs, their product."""
    y = np.log(measured_itl(train) / train["sim_itl_s"].to_numpy(float))
    coef, *_ = np.linalg.lstsq(features(train, LATENCY_FORM), y, rcond=None)
    return coef


def fit_calibration(rows: pd.DataFrame, checkpoint: str) -> Calibration:
    """The shipped calibration: both corrections fitted on every v3 H100 row of ``rows`` (simulated
    with the checkpoint of fingerprint ``checkpoint``), coefficients rounded to 6 decimals, the
    batch range of those rows."""
    fit = rows[(rows["release"] == FIT_RELEASE) & (rows["device"] == FIT_DEVICE)]
    n = len(fit)
    batches = (round(float(fit["sim_mean_batch"].min()), 2), round(float(fit["sim_mean_batch"].max()), 2))
    return Calibration(tuple(round(float(c), 6) for c in fit_correction(fit)), checkpoint,
                       f"ML.ENERGY v3 (2025) steady-state rows, H100, vLLM: {n} text rows, least squares over all of them "
                       "(experiments/serving_mlenergy.py --write-calibration); leave-one-model-out accuracy in "
                       "experiments/results/serving_mlenergy.md", n, batches,
                       tuple(round(float(c), 6) for c in fit_latency(fit)))


def write_calibration(cal: Calibration, path: str | Path | None = None) -> Path:
    """Write ``cal`` as JSON to ``path`` (default: the shipped ``serving/data/calibration.json``)."""
    dest = Path(path) if path is not None else calibration_path()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(cal.to_dict(), indent=2) + "\n")
    log.info("wrote %s", dest)
    return dest
