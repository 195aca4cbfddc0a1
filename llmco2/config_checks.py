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
#: ``conf/sample.yaml``.
SAMPLE_SCHEMA: Schema = {"n": (int, 1, 2**40), "seed": (int, 0, 2**32 - 1)}


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


def check_sample_config(cfg: Any) -> None:
    """A composed ``conf/sample.yaml`` (``n``, ``seed``)."""
    _check_keys(cfg, SAMPLE_SCHEMA, "")
