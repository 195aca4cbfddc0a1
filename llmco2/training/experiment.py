"""Experiments: ``train(cfg)`` and ``evaluate(cfg)`` as plain functions returning metrics, wrapped
by a thin Hydra entry point (``python -m llmco2.training.experiment ...``; bad overrides get one line,
see :mod:`llmco2.hydra_app`).

Ctrl-C (or SIGTERM) stops a run with one line: where the GNN's state after its last finished
epoch is kept and the command that resumes it (``hydra.run.dir=THE_RUN resume=true``), exit 130 (143).

A run loads the canonical energy rows named by ``cfg.data``, splits them as ``cfg.split`` says,
trains the predictor ``cfg.model`` (``_target_``), and writes to its output folder: the resolved
config, the split, ``metrics.json`` (overall, per phase, per device, per model family),
``predictions.csv`` and the checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.dataset import EnergyData, energy_data
from llmco2.data.paths import find_shared_data
from llmco2.data.scope import unused_idle_w
from llmco2.data.splits import Split, co2meter_trace_vs_uniform, leave_one_out, random_split
from llmco2.data.usable import family, held_out_only_rows, load_rows
from llmco2.errors import InvalidInputError
from llmco2.training.metrics import coverage, grouped_scores, scores

log = logging.getLogger(__name__)
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("shared"):
        def shared(rel: str) -> str:
            root = find_shared_data()
            if root is None:
                raise InvalidInputError("the shared data folder was not found; set LLMCO2_SHARED_DATA", field="data")
            return str(root / rel)

        OmegaConf.register_new_resolver("shared", shared)


register_resolvers()


def make_split(table: pd.DataFrame, cfg: Any) -> Split:
    """The split named by ``cfg`` (``kind``: random, leave_one_out, co2meter_trace, co2meter_uniform)."""
    kind = cfg.kind
    if kind == "random":
        return random_split(table, cfg.test_fraction, cfg.val_fraction, cfg.seed)
    if kind == "leave_one_out":
        return leave_one_out(table, cfg.column, cfg.holdout, cfg.val_fraction, cfg.seed)
    if kind in ("co2meter_trace", "co2meter_uniform"):
        trace, uniform = co2meter_trace_vs_uniform(table, cfg.test_fraction, cfg.val_fraction, cfg.seed)
        return trace if kind == "co2meter_trace" else uniform
    raise InvalidInputError(f"unknown split kind {kind!r}", field="split.kind")


def _metrics(frame: pd.DataFrame) -> dict[str, Any]:
    out = {
        **scores(frame["predicted_j"], frame["energy_j"]),
        "per_phase": grouped_scores(frame, "phase"),
        "per_device": grouped_scores(frame, "device"),
        "per_family": grouped_scores(frame, "family"),
    }
    if "engine" in frame.columns:
        out["per_engine"] = grouped_scores(frame, "engine")
    if "low_j" in frame.columns:
        out["coverage"] = coverage(frame["low_j"], frame["high_j"], frame["energy_j"])
        out["coverage_per_device"] = {str(k): coverage(g["low_j"], g["high_j"], g["energy_j"])
                                      for k, g in frame.groupby("device", sort=True)}
    return out


@runtime_checkable
class LatencyPredictor(Protocol):
    """A predictor that also predicts each row's time (the GNN), so that a node-wide reading can be
    compared at its scope."""

    def predict_row_latency(self, data: EnergyData) -> NDArray[np.float64]: ...


@runtime_checkable
class IntervalPredictor(Protocol):
    """A predictor that gives each row's interval with its prediction (the GNN): predicted energy,
    interval low and high (J)."""

    def predict_row_intervals(self, data: EnergyData) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]: ...


@runtime_checkable
class EpochTrainer(Protocol):
    """A predictor trained epoch by epoch (the GNN): it keeps its loss ``history``, writes its state after
    every epoch to ``checkpoint_dir`` and ``resume``s from it, and saves a safetensors checkpoint."""

    history: Any

    def fit(self, train: EnergyData, val: EnergyData | None = None, progress: bool = False,
            latency_data: EnergyData | None = None, checkpoint_dir: str | Path | None = None, resume: bool = False) -> Any: ...


def predictions_frame(model: Any, data: EnergyData) -> pd.DataFrame:
    """Rows of ``data`` with the model's prediction and the error. A reading that sums devices the
    run did not use (:func:`llmco2.data.scope.node_wide`) is compared at its scope: the prediction
    (and its interval) plus those devices' idle power (a card no process uses, ``unused_idle_w``) over
    the predicted time, over the measured time for a predictor that predicts none."""
    frame = data.table[["source", "source_file", "source_row", "device", "model", "batch_size", "prompt_tokens",
                        "generated_tokens", "phase", "energy_j"]].copy()
    frame["family"] = frame["model"].astype(str).map(family)
    if isinstance(model, IntervalPredictor):
        frame["predicted_j"], frame["low_j"], frame["high_j"] = model.predict_row_intervals(data)
    else:
        frame["predicted_j"] = model.predict_rows(data)
    frame["engine"] = [data.items[c][1].engine for c in data.config]
    idle = unused_idle_w(data.table)
    frame["unused_idle_w"] = idle
    if (idle > 0).any():
        if isinstance(model, LatencyPredictor):
            seconds = model.predict_row_latency(data)
        else:  # the reading's own time: the same as taking the unused devices' idle out of the reading
            seconds = pd.to_numeric(data.table["latency_s"], errors="coerce").to_numpy(float)
            log.info("%d node-wide readings compared at their scope over their measured time (%s predicts none)",
                     int((idle > 0).sum()), type(model).__name__)
        extra = idle * np.nan_to_num(seconds)
        for col in ("predicted_j", "low_j", "high_j"):
            if col in frame:
                frame[col] = frame[col] + extra
    frame["ape"] = np.abs(frame["predicted_j"] - frame["energy_j"]) / frame["energy_j"]
    return frame


def train(cfg: Any, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Load, split, train, evaluate on the test part; write the run's artefacts. Returns metrics."""
    from omegaconf import OmegaConf

    from llmco2.config_checks import check_experiment_config
    from llmco2.hydra_app import instantiate

    check_experiment_config(cfg)  # before anything is written or loaded
    out = Path(out_dir or cfg.get("out_dir") or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    start = time.perf_counter()
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data_cfg, dict)
    table = load_rows(data_cfg["sources"], data_cfg.get("exclude_flags"), data_cfg.get("exclude_sources"),
                      int(cfg.get("seed", 0)))
    loo = cfg.split.kind == "leave_one_out"
    table, left = held_out_only_rows(table, data_cfg.get("test_only"), cfg.split.column if loo else None,
                                 str(cfg.split.holdout) if loo else None)
    if left:
        log.info("left out %s", ", ".join(f"{n} rows: {r}" for r, n in left.items()))
    split = make_split(table, cfg.split)
    split.save(table, out)
    parts = {p: energy_data(split.frame(table, p), node_wide_readings=p == "test") for p in split.parts}
    if "test" in parts and not len(parts["test"].energy_j):
        why = "; ".join(f"{n} rows: {r}" for r, n in parts["test"].excluded.items()) or "no rows"
        raise InvalidInputError(f"split {split.name} leaves no test row with a usable energy ({why})", field="split.holdout")
    model = instantiate(cfg.model.predictor, "model.predictor")
    if isinstance(model, EpochTrainer):  # the GNN: last and best checkpoints after every epoch; resume=true continues
        model.fit(parts["train"], parts.get("val"), progress=True, checkpoint_dir=out / "checkpoints",
                  resume=bool(cfg.get("resume", False)))
    else:
        model.fit(parts["train"], parts.get("val"), progress=True)
    test = parts["test"]
    frame = predictions_frame(model, test)
    frame.to_csv(out / "predictions.csv", index=False)
    metrics = {
        "name": cfg.get("name", "run"), "model": cfg.model.name, "data": cfg.data.name, "split": split.name,
        "sizes": {p: len(d.energy_j) for p, d in parts.items()},
        "excluded": {p: d.excluded for p, d in parts.items()},
        "seconds": time.perf_counter() - start,
        "test": _metrics(frame),
    }
    if isinstance(model, EpochTrainer):
        metrics["best_epoch"] = model.history.best_epoch
        metrics["train_seconds"] = model.history.seconds
    model.save(out / ("checkpoint.safetensors" if isinstance(model, EpochTrainer) else "checkpoint.skops"))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    log.info("%s on %s/%s: MAPE %.3f EBA10 %.3f EBA30 %.3f", cfg.model.name, cfg.data.name, split.name,
             metrics["test"]["mape"], metrics["test"]["eba_10"], metrics["test"]["eba_30"])
    return metrics


def evaluate(model: Any, table: pd.DataFrame) -> dict[str, Any]:
    """Metrics of a trained model on every row of ``table`` (overall, per phase/device/family)."""
    data = energy_data(table)
    frame = predictions_frame(model, data)
    return {**_metrics(frame), "excluded_rows": data.excluded}


def interrupted_message(folder: Path, overrides: list[str], resume: bool, started: float) -> str:
    """What an interrupted run kept in its run ``folder`` and the command that resumes it
    (``overrides``: the run's own, as given; ``started``: when it began, ``time.time()`` seconds,
    so that a fresh run does not offer the state an earlier run left in the same folder)."""
    import shlex

    from llmco2.training.training_state import LAST, saved_epochs

    last = folder / "checkpoints" / LAST
    done = saved_epochs(last.parent) if resume or (last.is_file() and last.stat().st_mtime >= started) else None
    if done is None:
        return ("interrupted before the first epoch finished (the GNN keeps its state after every epoch; the other "
                "models keep none): nothing to resume; run the same command again to start over")
    kept = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in ("resume", "hydra.run.dir")]
    command = shlex.join(["python", "-m", "llmco2.training.experiment", *kept, f"hydra.run.dir={folder}", "resume=true"])
    epochs = f"{done} epoch" + ("s" if done != 1 else "")
    return f"interrupted; the training state after {epochs} is kept in {last}; resume with: {command}"


def _job(cfg: Any) -> float:  # pragma: no cover - run by Hydra
    from hydra.core.hydra_config import HydraConfig

    from llmco2.errors import Stopped
    from llmco2.interrupts import exit_code

    hydra = HydraConfig.get()
    started = time.time()
    try:
        metrics = train(cfg, hydra.runtime.output_dir)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (hydra_main raises it as one)
        message = interrupted_message(Path(hydra.runtime.output_dir), list(hydra.overrides.task),
                                      bool(cfg.get("resume", False)), started)
        raise Stopped(message, exit_code(exc)) from None
    return float(metrics["test"]["mape"])


def main() -> None:  # pragma: no cover - thin wrapper
    from llmco2.config_checks import check_experiment_config
    from llmco2.hydra_app import hydra_main

    hydra_main(CONF_DIR, "train", check_experiment_config)(_job)()


if __name__ == "__main__":  # pragma: no cover
    main()
