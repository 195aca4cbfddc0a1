"""Which readings measure the run: a power reading that sums devices the run did not use does not.

Some sources read power with node-wide probes that sum every accelerator of the node, used or not
(Argonne's superseded commit: 8 Gaudi2 or 4 H100 per reading; ``metered_devices`` in the canonical
table, :mod:`llmco2.data.importers.argonne`). llmco2 predicts the energy of the devices a request
runs on, and the idle draw of cards that hold no model is not known well enough to take out: with
the catalog's static power of a card with a model loaded (Gaudi2 88 W), Argonne's Gaudi2 runs would
draw 150-170 W per used card on one, two and four cards, about half of what the same physics gives
the A100s and H100s for the same work, and less than a working card's HBM2e access energy allows
(which bounds the unused cards at about 80 W); a lower idle gives any other split. So such a row
keeps its latency (the time is the run's) and its energy is not used: no fit of power and no
training target reads it (:func:`node_wide`; :func:`llmco2.data.dataset.energy_data` and
:func:`llmco2.physics.step_isolated.isolated_rows` leave it out). Left in, read as the used cards'
energy, they pull the shared constants: left out, the step physics fitted without each held-out GPU
went from 10.4% to 9.6% mean median APE of energy and from 8.6% to 7.4% of power over the A100-40GB,
A100-80GB, A40 and H100 (``experiments/step_lodo.py``, judged on the rows read at the devices they
used). Held out, a node-wide reading is compared at its scope: the prediction plus the unused
devices' idle power over the predicted time (:func:`unused_idle_w`: a card no process uses, at the catalog's
bare idle where it has one: H100 SXM 71.8 W without a context, not the 120 W of a card holding a model;
:func:`llmco2.training.experiment.predictions_frame`, ``experiments/step_lodo.py``,
``experiments/ranking_benchmark.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmco2.specs.gpu_power import unused_power_w

#: The range (W) of one card's idle draw, with no process on it or with a model held, over the catalog's sourced
#: snapshots (``[gpu.sources]`` ``idle_power_w`` and ``bare_idle_power_w`` of ``llmco2/specs/data/gpus.toml``):
#: Gaudi2 HL-225 71-112 W in hl-smi snapshots; H100 SXM 71.8 W without a CUDA context to 121.7 W with one. What a
#: comparison at a node-wide reading's scope rests on, tried at both ends (``experiments/ranking_benchmark.py``,
#: ``experiments/step_lodo.py``).
UNUSED_IDLE_RANGE_W = {"gaudi2": (71.0, 112.0), "h100-sxm": (71.8, 121.7)}
#: Why a node-wide reading's energy is left out (the excluded-rows reason of :func:`llmco2.data.dataset.energy_data`).
NODE_WIDE_REASON = "power reading sums devices the run did not use"


def extra_devices(table: pd.DataFrame) -> np.ndarray:
    """Per row, the devices its reading summed beyond those the run used (``metered_devices -
    num_devices``; 0 where ``metered_devices`` is null or absent)."""
    if "metered_devices" not in table.columns or not len(table):
        return np.zeros(len(table))
    metered = pd.to_numeric(table["metered_devices"], errors="coerce").to_numpy(float)
    used = pd.to_numeric(table["num_devices"], errors="coerce").to_numpy(float)
    return np.where(np.isfinite(metered) & np.isfinite(used), np.maximum(metered - used, 0.0), 0.0)


def node_wide(table: pd.DataFrame) -> np.ndarray:
    """Whether each row's power reading sums devices the run did not use (its energy is not the run's)."""
    return extra_devices(table) > 0


def unused_idle_w(table: pd.DataFrame) -> np.ndarray:
    """Per row, the idle power (W) of the devices its reading summed beyond those the run used:
    :func:`extra_devices` times the power of a card no process uses (:func:`llmco2.specs.gpu_power.unused_power_w`:
    the catalog's bare idle, Gaudi2 87.5 W, H100 SXM 71.8 W, else its static power); 0 elsewhere. For
    comparisons at a reading's scope."""
    extra = extra_devices(table)
    out = np.zeros(len(table))
    rows = np.flatnonzero(extra > 0)
    if len(rows):
        devices = table["device"].astype(str).to_numpy()[rows]
        idle = {d: unused_power_w(d)[0] for d in set(devices)}
        out[rows] = extra[rows] * np.array([idle[d] for d in devices])
    return out
