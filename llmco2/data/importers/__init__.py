"""Importers: public measurement files -> the canonical energy table (:mod:`llmco2.data.schema`).

One module per source format, each with ``import_<format>(path) -> ImportResult``; the module
docstrings say what a source row means and every judgement made on it. The shared policy
(:mod:`.base`): malformed input raises `InvalidInputError` with file and line and returns
nothing; rows removed on purpose are counted per reason (``dropped``); rows kept with a known
problem are marked in ``flag`` and counted (``flagged``); the table is validated with
``on_error="raise"``. Devices and models not in the catalogs are dropped and counted under
``"device not in catalog: <name>"`` / ``"model not in catalog: <name>"`` (never an error: the
public files hold many models the catalog does not describe).

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
from llmco2.data.importers.delavande import import_delavande
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
    "canonical": import_canonical,
}

# How import_all recognises a file of the shared data folder (path relative to it, '/'-separated).
_REFUSE = (
    (re.compile(r"(^|/)azure/"), "Azure LLM inference trace: requests without energy (a workload prior; read it with "
                                 "llmco2.data.azure)"),
    (re.compile(r"\.md$", re.I), "documentation, not data"),
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
    return None, "no importer recognises this file name"


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
