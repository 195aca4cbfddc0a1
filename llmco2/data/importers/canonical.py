"""A file already in the canonical schema (``.csv`` or ``.parquet``), e.g. one written by
``llmco2 data import`` or by the project's own measurements: read and validated with
:func:`llmco2.data.schema.read_table` (any invalid row raises). ``engine`` is mapped to its
catalog id (:func:`~llmco2.specs.engines.engine_id`; older files say ``hf-transformers`` for
``hf``, a missing or unknown engine becomes ``unknown``). ``flagged`` counts the flags already
present in its ``flag`` column; nothing is dropped."""

from __future__ import annotations

from pathlib import Path

from llmco2.data.importers.base import ImportResult, check_file
from llmco2.data.schema import read_table
from llmco2.specs.engines import engine_id

FORMAT = "canonical"


def import_canonical(path: Path) -> ImportResult:
    p = check_file(path)
    table, _ = read_table(p, on_error="raise")
    engines = table["engine"].astype(object).where(table["engine"].notna(), None)
    table["engine"] = [engine_id(e) for e in engines]
    table["engine"] = table["engine"].astype("string")
    counts = table["flag"].dropna().astype(str).str.split(";").explode().str.strip()
    flagged = {str(k): int(v) for k, v in counts[counts != ""].value_counts().sort_index().items()}
    return ImportResult(table, FORMAT, p, len(table), {}, flagged)
