"""The H100 rows measured with ``llmco2 measure`` before windows were amortised
(``shared/data/h100_hf/h100_hf_train.csv``): already canonical, read with
:func:`llmco2.data.schema.read_table` and corrected on the way in.

What the rows are (the folder's README): single requests on one NVIDIA H100 80GB HBM3, HF
transformers eager decoding (engine ``hf``), SDPA attention, random weights, 1 warm-up + 2
measured repeats, NVML total-energy counter, each phase measured in ONE window of ONE pass.

* ``engine`` is mapped to its catalog id (the file says ``hf-transformers`` -> ``hf``).
* ``source`` is ``h100_hf`` (the file says ``llmco2``), so that these rows can be told from the
  amortised measurements in ``data/measurements/`` (source ``llmco2``).
* Prefill windows were 17-180 ms, at or below the update period of the H100's energy counter, so
  a prefill repeat read either 0 J or whole counter increments. Every prefill row is flagged
  ``counter_quantised`` (kept, excluded from training): its single-pass window is shorter than the
  harness's minimum window (:data:`MIN_WINDOW_S`), so its quantisation bound is far above 2%; the rows with
  a repeat at 0 J (``energy_std_j / energy_j > 1``: 25 of 35) are the visible part of that.
  Any other row with a repeat at 0 J would be flagged the same way.
* Decode rows (windows of 0.08-5.2 s, median coefficient of variation 5%) are kept unflagged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llmco2.data.importers.base import ImportResult, Rows, check_file, finish
from llmco2.data.schema import read_table
from llmco2.specs.engines import engine_id

FORMAT = "h100_hf"
QUANTISED = "counter_quantised"
ZERO_REPEAT_CV = 1.0  # with 2 repeats one at 0 J gives std / mean = sqrt(2)
MIN_WINDOW_S = 1.0  # the harness's minimum window (llmco2.measure.windows.WindowPolicy.min_window_s)


def import_h100_hf(path: Path) -> ImportResult:
    p = check_file(path)
    table, _ = read_table(p, on_error="raise")
    n = len(table)
    rows = Rows(n)
    energy = table["energy_j"].to_numpy(dtype=float, na_value=np.nan)
    std = table["energy_std_j"].to_numpy(dtype=float, na_value=0.0)
    prefill = (table["phase"] == "prefill").to_numpy(dtype=bool, na_value=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero_repeat = std / energy > ZERO_REPEAT_CV
    latency = table["latency_s"].to_numpy(dtype=float, na_value=np.nan)
    rows.flag(zero_repeat | (prefill & ~(latency >= MIN_WINDOW_S)), QUANTISED)  # one pass, shorter than the minimum window
    existing = table["flag"].astype(object).where(table["flag"].notna(), None).to_numpy()
    raw = table.assign(engine=[engine_id(e) for e in table["engine"].astype(object).where(table["engine"].notna(), None)])
    result = finish(raw.drop(columns=["flag"]), rows, FORMAT, p, n)
    # keep the flags the harness wrote (random_weights, ...) before the ones added here
    merged = [";".join(x for x in (old, new) if isinstance(x, str) and x) or None
              for old, new in zip(existing, rows.flag_column(), strict=True)]
    result.table["flag"] = merged
    result.table["flag"] = result.table["flag"].astype("string")
    counts = result.table["flag"].dropna().str.split(";").explode().value_counts()
    result.flagged = {str(k): int(v) for k, v in counts.sort_index().items()}
    return result
