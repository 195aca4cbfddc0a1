"""Evaluate a checkpoint on measured rows (``llmco2 evaluate``): the scores of convention 4
(docs/reference/conventions.md) over rows with positive measured energy, with the intervals'
coverage and the rows left out."""

from __future__ import annotations

from typing import Any

from llmco2.errors import InvalidInputError

#: Formats of measured rows ``evaluate`` reads (``canonical``: a table in the canonical schema).
EVAL_FORMATS = ("canonical", "co2meter", "argonne", "mlenergy_v2", "mlenergy_v3", "wilkins", "delavande", "tokenpowerbench")


def row_interval(pred: Any, data: Any) -> tuple[Any, Any]:
    """Interval ends (J) of each measured row's phase (a ``total`` row: the sum of the phases' ends)."""
    import numpy as np

    lo, hi = pred.energy_low_j[data.config], pred.energy_high_j[data.config]
    pick = np.where(data.phase == 1, 1, 0)
    rows = np.arange(len(pick))
    low = np.where(data.phase == 2, lo.sum(axis=1), lo[rows, pick])
    high = np.where(data.phase == 2, hi.sum(axis=1), hi[rows, pick])
    return low, high


def evaluate(data_path: str, data_format: str = "canonical", checkpoint: str | None = None) -> dict[str, Any]:
    """Accuracy of a checkpoint (default: the shipped one) on measured energy rows: ``n``, ``mape``,
    ``median_ape``, ``eba_5/10/30`` (fractions), the 10-90% interval's coverage, the same per
    phase, device and model family, and the rows left out with their reasons (convention 4)."""
    import numpy as np

    from llmco2.data.dataset import energy_data
    from llmco2.prediction.loading import load_predictor
    from llmco2.training.metrics import coverage, grouped_scores, scores

    predictor = load_predictor(checkpoint)
    dropped: dict[str, int] = {}
    if data_format == "canonical":
        from llmco2.data.schema import read_table

        table, _ = read_table(data_path, on_error="raise")
    else:
        from llmco2.data.importers import import_file

        result = import_file(data_format, data_path)
        table, dropped = result.table, dict(result.dropped)
    data = energy_data(table)
    excluded = {**dropped, **data.excluded}
    if not len(data.energy_j):
        counts = "; ".join(f"{n:,} {reason}" for reason, n in excluded.items()) or "the file has no rows"
        raise InvalidInputError(f"no usable rows with positive measured energy in {data_path} (left out: {counts}); "
                                "give measurements of catalog models and GPUs with batch, prompt and generated tokens",
                                field="data")
    pred = predictor.predict(data.items)
    per_config = pred.energy_j[data.config]
    predicted = np.where(data.phase == 0, per_config[:, 0], per_config[:, 1])
    predicted = np.where(data.phase == 2, per_config.sum(axis=1), predicted)
    low, high = row_interval(pred, data)
    frame = data.table[["device", "model", "phase", "energy_j"]].copy()
    from llmco2.data.usable import family

    frame["family"] = frame["model"].astype(str).map(family)
    frame["predicted_j"] = predicted
    out = scores(predicted, data.energy_j)
    out = {k: out[k] for k in ("n", "mape", "median_ape", "eba_5", "eba_10", "eba_30")}
    phases = data.table["phase"].astype(str).to_numpy()
    out["interval"] = {"levels": list(pred.levels), "nominal": float(pred.levels[1] - pred.levels[0]),
                       **coverage(low, high, data.energy_j),
                       "per_phase": {ph: coverage(low[phases == ph], high[phases == ph], data.energy_j[phases == ph])
                                     for ph in sorted(set(phases))}}
    out.update(per_phase=grouped_scores(frame, "phase"), per_device=grouped_scores(frame, "device"),
               per_family=grouped_scores(frame, "family"), excluded_rows=excluded)
    return out
