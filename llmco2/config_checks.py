"""Checks of Hydra configs and training settings before any data is loaded.

Hydra turns ``n=3.5`` into a float and ``trainer.max_epochs=five`` into a string; left alone, the
first becomes 3 through ``int()`` and the second fails after the data has loaded. Here every value
named in a schema must have the exact type (an ``int`` for counts, a number for rates) and lie in
its range; the first that does not is an :class:`~llmco2.errors.InvalidInputError` naming its
dotted key, the range and the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmco2.errors import InvalidInputError

#: ``name: (kind, minimum, maximum)``, kind ``int`` or ``float`` (an int is a valid float).
Schema = Mapping[str, tuple[type, float, float]]

#: The GNN's training settings (:class:`llmco2.training.train.TrainConfig`).
TRAIN_SCHEMA: Schema = {
    "hidden": (int, 1, 2**16), "num_layers": (int, 1, 64), "dropout": (float, 0.0, 0.99), "lr": (float, 1e-12, 10.0),
    "weight_decay": (float, 0.0, 10.0), "batch_size": (int, 1, 2**20), "max_epochs": (int, 0, 10**6),
    "patience": (int, 0, 10**6), "seed": (int, 0, 2**32 - 1), "engine_dropout": (float, 0.0, 1.0), "threads": (int, 0, 4096),
}
#: ``conf/trainer/*.yaml``.
TRAINER_SCHEMA: Schema = {k: TRAIN_SCHEMA[k] for k in ("lr", "batch_size", "max_epochs", "patience", "threads")}
#: Most configurations one sample may draw, in ``llmco2 sample --n`` and the Hydra sample app's ``n``
#: (both write block by block, ~62 bytes of CSV per row: this bound is some 70 TB of output).
MAX_SAMPLE_ROWS = 2**40
#: ``conf/sample.yaml``.
SAMPLE_SCHEMA: Schema = {"n": (int, 1, MAX_SAMPLE_ROWS), "seed": (int, 0, 2**32 - 1)}
#: Counts of ``conf/sampler/*.yaml`` and of Algorithm 1's ``loop`` (``conf/experiment/focused_loop.yaml``).
SAMPLER_SCHEMA: Schema = {"max_rounds": (int, 1, 10**6)}
LOOP_SCHEMA: Schema = {"top_k": (int, 1, 2**31), "b": (int, 1, 2**31), "max_rounds": (int, 0, 10**6)}
#: Counts of the scikit-learn baselines (``conf/model/gbt.yaml``, ``deepen.yaml``) under ``model.predictor``.
BASELINE_SCHEMA: Schema = {"max_iter": (int, 1, 10**6), "n_estimators": (int, 1, 10**6), "learning_rate": (float, 1e-12, 10.0)}
#: ``max_rows`` of a data source (``conf/data/*.yaml``): null keeps every row.
MAX_ROWS: tuple[type, float, float] = (int, 1, 2**53)


def check_value(value: Any, key: str, kind: type, minimum: float, maximum: float) -> None:
    """``value`` has the exact type ``kind`` (no bool; an int counts as a float) and lies in range."""
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        what = f"an integer from {minimum:,} to {maximum:,}"
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        what = f"a number from {minimum:g} to {maximum:g}"
    if not ok or not minimum <= value <= maximum:
        raise InvalidInputError(f"must be {what}, got {value!r}", field=key)


def check_mapping(values: Mapping[str, Any], schema: Schema, prefix: str = "") -> None:
    """Every key of ``schema`` present in ``values`` (missing keys keep their defaults)."""
    for name, (kind, lo, hi) in schema.items():
        if name in values:
            check_value(values[name], f"{prefix}{name}", kind, lo, hi)


_UNSET = object()


def _select(cfg: Any, key: str) -> Any:
    """The resolved value at dotted ``key``; :data:`_UNSET` when absent, missing (``???``, set by a
    sweep) or not resolvable yet."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(cfg, key, default=_UNSET, throw_on_missing=True)
    except Exception:  # noqa: BLE001 - a value a sweep fills in later is checked when it is there
        return _UNSET
    if OmegaConf.is_config(value):
        return _UNSET
    return value


def _check_keys(cfg: Any, schema: Schema, prefix: str) -> None:
    for name, (kind, lo, hi) in schema.items():
        value = _select(cfg, f"{prefix}{name}")
        if value is not _UNSET:
            check_value(value, f"{prefix}{name}", kind, lo, hi)


def check_experiment_config(cfg: Any) -> None:
    """A composed ``conf/train.yaml`` (seed, trainer group, GNN settings) before data loads."""
    _check_keys(cfg, {"seed": SAMPLE_SCHEMA["seed"]}, "")
    _check_keys(cfg, TRAINER_SCHEMA, "trainer.")
    if str(_select(cfg, "model.predictor._target_")).endswith("GNNPredictor"):
        _check_keys(cfg, TRAIN_SCHEMA, "model.predictor.config.")
    else:
        _check_keys(cfg, BASELINE_SCHEMA, "model.predictor.")
    _check_sources(cfg)


def _check_sources(cfg: Any) -> None:
    """``max_rows`` of every ``data.sources`` entry: null (every row) or a positive count."""
    from omegaconf import OmegaConf

    try:
        sources = OmegaConf.select(cfg, "data.sources", default=None)
    except Exception:  # noqa: BLE001 - a node a sweep fills in later is checked when it is there
        return
    if not OmegaConf.is_list(sources):
        return
    for i in range(len(sources)):
        key = f"data.sources.{i}.max_rows"
        value = _select(cfg, key)
        if value is not _UNSET and value is not None:
            check_value(value, key, *MAX_ROWS)


def check_sample_config(cfg: Any) -> None:
    """A composed ``conf/sample.yaml`` (``n``, ``seed``, the sampler's and the loop's counts)."""
    _check_keys(cfg, SAMPLE_SCHEMA, "")
    _check_keys(cfg, SAMPLER_SCHEMA, "sampler.")
    _check_keys(cfg, LOOP_SCHEMA, "loop.")
