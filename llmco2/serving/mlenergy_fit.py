"""Fit the step physics on ML.ENERGY steady-state rows (with isolated batch runs beside them) and
predict held-out rows: the fitting half of ``experiments/serving_physics.py``, shared by the
experiments that hold a GPU or a model out (``experiments/ranking_benchmark.py``).

A fit sees the serving rows under a mask (:class:`llmco2.serving.mlenergy.ServingRows`) and,
optionally, isolated batch runs (:class:`llmco2.physics.step_isolated.IsolatedRows`) of every GPU
and model that the held-out serving rows do not name: a held-out GPU or model is held out of every
source. Tasks whose mean prompt is not public get a prompt scale chosen from training rows only
(:func:`fit_with_prompt_scales`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pandas as pd

from llmco2.physics.step_fit import fit_step_params
from llmco2.physics.step_isolated import SPLITWISE_ENGINE, IsolatedRows
from llmco2.physics.step_physics import StepParams, roofline_tdp_params
from llmco2.serving.mlenergy import TASK_PROMPT_TOKENS, ServingRows, mix_builds, row_engine, take_shapes
from llmco2.serving.steady import steady_state

log = logging.getLogger(__name__)
#: Engines of the ML.ENERGY rows: vLLM V1 (v3) and V0 (v2).
ENGINES = ("vllm", "vllm-v0")
#: Prompt scales tried for the tasks whose mean prompt is not public (``TASK_PROMPT_TOKENS``): the
#: mean prompt of such a task (a property of its dataset) is estimated with the physics, from
#: training rows only.
PROMPT_SCALES = (0.1, 0.2, 0.35, 0.6, 1.0)


def roofline_tdp() -> StepParams:
    """The roofline latency x TDP baseline as step constants (peaks, no overheads, power at the limit)."""
    return roofline_tdp_params(ENGINES)


def predictions(sr: ServingRows, p: StepParams, idx: np.ndarray) -> pd.DataFrame:
    """Predicted J per output token, latency (v3: median inter-token latency, s; v2: mean time per
    decode round, s) and power (W, all GPUs) of the rows ``idx`` under ``p``."""
    st = steady_state(take_shapes(sr.shapes, idx), p)
    rows = sr.rows.iloc[idx]
    v3 = (rows["release"] == "v3").to_numpy()
    return pd.DataFrame({"j": st.j_per_output_token, "latency": np.where(v3, st.itl_median_s, st.tpot_s),
                         "power": st.power_w}, index=rows.index)


def isolated_mask(sr: ServingRows, iso: IsolatedRows, mask: np.ndarray) -> np.ndarray:
    """The isolated rows that may enter a fit whose serving rows are ``mask``: those of GPUs and
    models that the held-out serving rows do not name (a held-out GPU or model is held out of
    every source)."""
    held = sr.rows[~mask]
    rows = iso.rows
    out = np.ones(len(rows), dtype=bool)
    if len(held):
        kept = sr.rows[mask]
        for col in ("device", "model"):
            gone = set(held[col]) - set(kept[col])
            out &= ~rows[col].isin(gone).to_numpy()
    return out


def fit_rows(sr: ServingRows, mask: np.ndarray, source: str, iso: IsolatedRows | None = None) -> StepParams:
    """Constants fitted on the serving rows under ``mask`` (and ``iso``'s rows that
    :func:`isolated_mask` allows), with the overheads of the engines they ran (the GPU work per
    sequence of those whose rows measured power); the unnamed engine of the Splitwise rows is never kept."""
    releases = set(sr.rows["release"][mask])
    engines = online = [e for e, rel in (("vllm", "v3"), ("vllm-v0", "v2")) if rel in releases]
    obs = sr.observations(mask)
    if iso is not None:
        imask = isolated_mask(sr, iso, mask)
        obs = obs + iso.observations(imask)
        engines = sorted(set(engines) | {iso.decode.engines[i] for i in np.flatnonzero(imask)})
    measured = sr.rows[mask]
    with_power = pd.to_numeric(measured.get("avg_power_w"), errors="coerce").notna().to_numpy()
    power = sorted({row_engine(r) for _, r in measured[with_power].iterrows()})
    fitted = fit_step_params(obs, engines, source=source, online_engines=online, power_engines=power)[0]
    return replace(fitted, engines={k: v for k, v in fitted.engines.items() if k != SPLITWISE_ENGINE})


def mean_log_error(sr: ServingRows, mask: np.ndarray, p: StepParams) -> float:
    """Mean over observation groups of the mean |log(predicted / measured)| of the rows under ``mask``."""
    return float(np.mean([np.mean(np.abs(np.log(np.maximum(o.predict(p), 1e-12) / o.measured))) for o in sr.observations(mask)]))


def fit_with_prompt_scales(builds: dict[float, ServingRows], mask: np.ndarray, source: str,
                           iso: IsolatedRows | None = None) -> tuple[StepParams, ServingRows]:
    """Constants fitted on the rows under ``mask`` and the rows rebuilt with each task's prompt
    scale (``builds``: the same rows built at each of :data:`PROMPT_SCALES`): fit at the trace's
    prompts, choose the scale of each task whose mean prompt is not public
    (:data:`TASK_PROMPT_TOKENS`) by a vote of its training models (each model's best-fitting scale;
    the lower median, so that a few models whose physics is off cannot drag the task's prompts; a
    task without training rows keeps 1.0), refit."""
    base = builds[1.0]
    p = fit_rows(base, mask, source, iso)
    tasks = base.rows["task"].to_numpy()
    choice = np.ones(len(tasks))
    models = base.rows["model"].to_numpy()
    for task in sorted(set(tasks[mask]) - set(TASK_PROMPT_TOKENS)):
        votes = sorted(min(builds, key=lambda k: mean_log_error(builds[k], mask & (tasks == task) & (models == m), p))
                       for m in sorted(set(models[mask & (tasks == task)])))
        choice[tasks == task] = votes[(len(votes) - 1) // 2]
    mixed = mix_builds(builds, choice)
    return fit_rows(mixed, mask, source, iso), mixed
