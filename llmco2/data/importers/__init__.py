"""Importers: public measurement files -> the canonical energy table (:mod:`llmco2.data.schema`).

One module per source format, each with ``import_<format>(path) -> ImportResult``; the module
docstrings say what a source row means and every judgement made on it. The shared policy
(:mod:`.base`): malformed input raises `InvalidInputError` with file and line and returns
nothing; rows removed on purpose are counted per reason (``dropped``); rows kept with a known
problem are marked in ``flag`` and counted (``flagged``); the table is validated with
``on_error="raise"``. Device and model names resolve through the catalogs (ids, aliases, the name
without vendor words or a trailing "GPU", close matches that keep every numbered word; see
:func:`.base.gpu_id` / :func:`.base.model_id`); names the catalogs do not have are dropped and
counted under ``"device not in catalog: <name>"`` / ``"model not in catalog: <name>"`` (never an
error: the public files hold many models the catalog does not describe). Every importer sets
``engine`` to a catalog id (:func:`llmco2.specs.engines.engine_id`). :func:`import_all` refuses,
with a reason, what is not data (documentation, scripts, script results, sweep configurations,
failure logs, the Azure traces).

>>> result = import_file("co2meter", "shared/data/co2meter/train_trace.csv")  # doctest: +SKIP
>>> table, results, refused = import_all(Path("shared/data"))                   # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from llmco2.data.importers.argonne import import_argonne
from llmco2.data.importers.base import ImportResult, check_file
from llmco2.data.importers.canonical import import_canonical
from llmco2.data.importers.co2meter import import_co2meter
from llmco2.data.importers.collected import import_collected
from llmco2.data.importers.delavande import import_delavande
from llmco2.data.importers.h100_hf import import_h100_hf
from llmco2.data.importers.mlenergy_v2 import import_mlenergy_v2
from llmco2.data.importers.mlenergy_v3 import import_mlenergy_v3
from llmco2.data.importers.splitwise import import_splitwise
from llmco2.data.importers.tokenpowerbench import import_tokenpowerbench
from llmco2.data.importers.wilkins import import_wilkins
from llmco2.data.schema import concat_tables
from llmco2.errors import InvalidInputError

__all__ = ["IMPORTERS", "ImportResult", "detect_format", "import_all", "import_file"]

IMPORTERS: dict[str, Callable[[Path], ImportResult]] = {
    "co2meter": import_co2meter,
    "argonne": import_argonne,
    "mlenergy_v2": import_mlenergy_v2,
    "mlenergy_v3": import_mlenergy_v3,
    "wilkins": import_wilkins,
    "delavande": import_delavande,
    "tokenpowerbench": import_tokenpowerbench,
    "splitwise": import_splitwise,
    "h100_hf": import_h100_hf,
    "collected": import_collected,
    "canonical": import_canonical,
}

# How import_all recognises a file of the shared data folder (path relative to it, '/'-separated).
_REFUSE = (
    (re.compile(r"(^|/)azure/"), "Azure LLM inference trace: requests without energy (a workload prior; read it with "
                                 "llmco2.data.azure)"),
    (re.compile(r"\.md$", re.I), "documentation, not data"),
    (re.compile(r"\.failed\.csv$", re.I), "failure log of a measurement sweep (key, reason, time): configurations without energy"),
    (re.compile(r"(^|/)configs?[^/]*\.csv$", re.I), "sweep configurations: requests without energy"),
    (re.compile(r"\.runs\.jsonl$", re.I), "run log of a measurement sweep (its rows are in the .csv beside it)"),
    (re.compile(r"\.py$", re.I), "script, not data"),
    (re.compile(r"\.json$", re.I), "JSON results of a script, not a table an importer reads"),
    (re.compile(r"\.(txt|log)$", re.I), "notes (text), not data"),
    (re.compile(r"\.(png|pdf|svg)$", re.I), "figure, not data"),
    (re.compile(r"(^|/)collected/raw/"), "source file that collected/*.csv was converted from (the collected importer reads "
                                         "the converted rows)"),
)
_FORMATS = (
    (re.compile(r"(^|/)co2meter/[^/]+\.csv$", re.I), "co2meter"),
    (re.compile(r"(^|/)argonne[^/]*\.csv$", re.I), "argonne"),
    (re.compile(r"(^|/)mlenergy_v2[^/]*\.csv$", re.I), "mlenergy_v2"),
    (re.compile(r"(^|/)mlenergy_v3[^/]*\.csv$", re.I), "mlenergy_v3"),
    (re.compile(r"(^|/)wilkins[^/]*\.csv$", re.I), "wilkins"),
    (re.compile(r"(^|/)delavande[^/]*\.csv$", re.I), "delavande"),
    (re.compile(r"(^|/)tokenpowerbench[^/]*\.csv$", re.I), "tokenpowerbench"),
    (re.compile(r"(^|/)splitwise[^/]*\.csv$", re.I), "splitwise"),
    (re.compile(r"(^|/)h100_hf[^/]*\.csv$", re.I), "h100_hf"),
    (re.compile(r"(^|/)collected/[^/]+\.csv$", re.I), "collected"),
    (re.compile(r"(^|/)measurements/[^/]+\.(csv|parquet)$", re.I), "canonical"),
)


def import_file(fmt: str, path: str | Path) -> ImportResult:
    """Import one file with the importer of ``fmt`` (a key of :data:`IMPORTERS`)."""
    key = str(fmt).strip().lower()
    if key not in IMPORTERS:
        raise InvalidInputError(f"unknown format {fmt!r}; formats: {', '.join(IMPORTERS)}", field="format")
    return IMPORTERS[key](check_file(path))


def detect_format(path: Path, root: Path | None = None) -> tuple[str | None, str]:
    """``(format, "")`` for a file :func:`import_all` imports, ``(None, reason)`` otherwise."""
    rel = (path.relative_to(root) if root is not None else path).as_posix()
    for pattern, reason in _REFUSE:
        if pattern.search(rel):
            return None, reason
    for pattern, fmt in _FORMATS:
        if pattern.search(rel):
            return fmt, ""
    if path.name.startswith("."):
        return None, "hidden file"
    if path.suffix.lower() == ".csv" and _has_canonical_header(path):
        return "canonical", ""
    return None, "no importer recognises this file name"


def _has_canonical_header(path: Path) -> bool:
    """Whether a CSV file starts with the canonical table's first columns (``llmco2 measure`` output)."""
    from llmco2.data.schema import COLUMN_NAMES

    try:
        with path.open(encoding="utf-8-sig") as fh:
            first = fh.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return [c.strip() for c in first.split(",")[:3]] == list(COLUMN_NAMES[:3])


def import_all(data_dir: Path) -> tuple[pd.DataFrame, list[ImportResult], list[tuple[Path, str]]]:
    """Import every file of the shared data folder that an importer recognises by its name.

    Returns the concatenated canonical table, one result per imported file, and the files left
    out with the reason (the Azure traces, documentation, unrecognised names). A recognised
    file that is malformed raises (file and line) rather than being skipped.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise InvalidInputError(f"{root} is not a folder", field="path")
    results: list[ImportResult] = []
    refused: list[tuple[Path, str]] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        fmt, reason = detect_format(path, root)
        if fmt is None:
            refused.append((path, reason))
        else:
            results.append(IMPORTERS[fmt](path))
    return concat_tables(r.table for r in results), results, refused
