"""What every importer shares: the result record, a CSV reader that knows each record's line,
strict number parsing, catalog look-ups, and the drop / flag bookkeeping.

Policy (the same for every source):

* Malformed input — a missing column, a record with the wrong number of fields, a cell that is
  not a number where one is needed — raises `InvalidInputError` naming the file and the line.
  Nothing is returned, so there is never a partial table.
* Rows removed on purpose (a device or model the catalog does not have, a recording failure, a
  task that is not text generation, ...) are counted per reason in ``ImportResult.dropped``.
  Counts are of canonical rows: a source line that yields a prefill and a decode row counts twice.
* Rows kept with a known problem are marked in the ``flag`` column (``;``-separated) and counted
  per flag in ``ImportResult.flagged``.
* The result is validated with ``schema.validate(on_error="raise")``: a row still invalid after
  the documented cleaning is an error, never silently dropped.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.analytic.compressed import compressed_error
from llmco2.data.importers.names import device_name_variants, gpu_id, model_id  # noqa: F401  (re-exported)
from llmco2.data.schema import validate
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_input_file

ARCH_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size", "activation",
               "mlp_gated", "num_experts", "experts_per_token")


@dataclass
class ImportResult:
    """One imported file: the canonical (validated) table and what happened on the way."""

    table: pd.DataFrame
    source: str
    path: Path
    rows_read: int
    dropped: dict[str, int] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: rows read, rows imported, drops by reason, flags."""
        text = f"{self.source} {self.path.name}: {self.rows_read:,} rows read, {len(self.table):,} imported"
        if self.dropped:
            text += ", dropped " + "; ".join(f"{n:,} {reason}" for reason, n in self.dropped.items())
        if self.flagged:
            text += ", flagged " + "; ".join(f"{n:,} {name}" for name, n in self.flagged.items())
        return text


# -- reading --------------------------------------------------------------------------------------
@dataclass
class Source:
    """The records of a CSV file as text, with the line on which each record starts."""

    path: Path
    data: pd.DataFrame
    lines: np.ndarray

    @property
    def name(self) -> str:
        return self.path.name

    def __len__(self) -> int:
        return len(self.data)

    def error(self, i: int, column: str | None, message: str) -> InvalidInputError:
        where = f"{self.path}, line {int(self.lines[i])}"
        return InvalidInputError(f"{where}: {column}: {message}" if column else f"{where}: {message}", field=None)

    def fail_first(self, bad: np.ndarray | pd.Series, column: str | None, message: Callable[[int], str]) -> None:
        """Raise for the first row where ``bad`` holds (``message(i)`` says what is wrong)."""
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            more = int(bad.sum()) - 1
            suffix = f" ({more} more rows like it)" if more else ""
            raise self.error(i, column, message(i) + suffix)


def check_file(path: str | Path) -> Path:
    return check_input_file(path, "path")


def read_csv(path: Path, *, required: Sequence[str] = (), columns: Sequence[str] | None = None, kind: str = "source") -> Source:
    """Read a CSV file into text columns, remembering the line each record starts on.

    ``columns`` given: the file has no header and every record must have exactly these fields
    (the first record is line 1). Otherwise the first record is the header, it must name every
    column of ``required``, and every record must have as many fields as the header. Blank lines
    are skipped. Quoted fields may span lines (the record's first line is kept). A file without
    data rows is an error; one whose header (or first record) has little to do with the format is
    said not to look like a ``kind`` file.
    """
    path = check_file(path)
    records: list[list[str]] = []
    starts: list[int] = []
    header: list[str] | None = None
    header_line = 0
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh, strict=True)
            previous = 0
            for record in reader:
                start, previous = previous + 1, reader.line_num
                if not record or all(not f.strip() for f in record):
                    continue
                if columns is None and header is None:
                    header, header_line = [f.strip() for f in record], start
                    continue
                records.append(record)
                starts.append(start)
    except UnicodeDecodeError as exc:
        raise (compressed_error(path, "path")
               or InvalidInputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})", field="path")) from None
    except csv.Error as exc:
        raise InvalidInputError(f"{path}, line {reader.line_num}: not valid CSV ({exc})", field="path") from None
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot be read ({exc.strerror})", field="path") from None
    if columns is not None:
        names = list(columns)
    else:
        if header is None:
            raise InvalidInputError(f"{path}: empty file (no header line)", field="path")
        names = header
        missing = [c for c in required if c not in names]
        if required and len(missing) == len(required):
            raise InvalidInputError(f"{path} does not look like {_article(kind)} file (expected columns {', '.join(required)}; "
                                    f"line {header_line} has {_preview(names)})", field="path")
        dupes = sorted({c for c in names if names.count(c) > 1})
        if dupes:
            raise InvalidInputError(f"{path}, line {header_line}: duplicate columns {', '.join(dupes)}", field="columns")
        if missing:
            raise InvalidInputError(f"{path}, line {header_line}: missing column(s) {', '.join(missing)}; "
                                    f"the header has {', '.join(names)}", field="columns")
    if not records:
        raise InvalidInputError(f"{path}: no data rows", field="path")
    lines = np.asarray(starts, dtype=np.int64)
    width = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
    wrong = width != len(names)
    if columns is not None and wrong[0]:
        raise InvalidInputError(f"{path} does not look like {_article(kind)} file (expected {len(names)} fields per line: "
                                f"{', '.join(names)}; line {int(lines[0])} has {int(width[0])})", field="path")
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        what = f"the header has {len(names)}" if columns is None else f"the format has {len(names)}: {', '.join(names)}"
        raise InvalidInputError(f"{path}, line {int(lines[i])}: {int(width[i])} fields, expected {len(names)} ({what})",
                                field="columns")
    data = pd.DataFrame(records, columns=names, dtype=object)
    return Source(path, data, lines)


def _article(kind: str) -> str:
    return f"an {kind}" if kind[:1].lower() in "aeiou" else f"a {kind}"


def _preview(names: Sequence[str], n: int = 6) -> str:
    """The first ``n`` fields of a header, each cut to 20 characters."""
    shown = ", ".join(repr(x[:20]) for x in names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def number(src: Source, column: str, *, integer: bool = False, required: bool = True) -> np.ndarray:
    """The column as float64; a cell that is not a finite number (or, with ``integer``, not a
    whole number; or, with ``required``, empty) raises with file and line."""
    raw = src.data[column].astype(object)
    text = raw.where(raw.notna(), "").astype(str).str.strip()
    empty = (text == "").to_numpy()
    values = pd.to_numeric(text.where(~empty, None), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    src.fail_first(np.isnan(values) & ~empty, column, lambda i: f"{raw.iloc[i]!r} is not a number")
    src.fail_first(np.isinf(values), column, lambda i: f"{raw.iloc[i]!r} is not a finite number")
    if required:
        src.fail_first(empty, column, lambda i: "is empty (a number is required)")
    if integer:
        src.fail_first(~np.isnan(values) & (values != np.floor(values)), column, lambda i: f"{raw.iloc[i]!r} is not a whole number")
    return values


def text(src: Source, column: str, *, required: bool = True) -> pd.Series:
    """The column as stripped text; an empty cell raises with file and line when ``required``."""
    raw = src.data[column].astype(object)
    out = raw.where(raw.notna(), "").astype(str).str.strip()
    if required:
        src.fail_first((out == "").to_numpy(), column, lambda i: "is empty")
    return out


# -- catalogs -------------------------------------------------------------------------------------

def arch_columns(model_ids: pd.Series) -> dict[str, pd.Series]:
    """Architecture columns from the catalog entry of each row's model id (null where no id)."""
    from llmco2.specs import model_catalog

    cat = model_catalog()
    archs = {m: cat.get(m) for m in pd.unique(model_ids.dropna())}
    out = {}
    for name in ARCH_FIELDS:
        table = {m: getattr(a, name) for m, a in archs.items()}
        out[name] = model_ids.map(table).astype(object)
    return out


# -- drops and flags ------------------------------------------------------------------------------
class Rows:
    """Which rows are kept, why the others were dropped, and the flags of the kept ones."""

    def __init__(self, n: int) -> None:
        self.keep = np.ones(n, dtype=bool)
        self.dropped: dict[str, int] = {}
        self.flags: dict[str, np.ndarray] = {}

    def drop(self, mask: np.ndarray | pd.Series, reason: str) -> None:
        """Drop the still-kept rows of ``mask``, counted under ``reason`` (first reason wins)."""
        m = np.asarray(mask, dtype=bool) & self.keep
        if m.any():
            self.dropped[reason] = self.dropped.get(reason, 0) + int(m.sum())
            self.keep &= ~m

    def drop_unresolved(self, ids: pd.Series, names: pd.Series, what: str, note: Callable[[str], str] | None = None) -> None:
        """Drop rows whose id is null, one reason per source name: ``"<what> not in catalog: <name>"``."""
        missing = ids.isna().to_numpy()
        for name in sorted(pd.unique(names[missing])):
            extra = f" ({note(name)})" if note and note(name) else ""
            self.drop(missing & (names == name).to_numpy(), f"{what} not in catalog: {name}{extra}")

    def flag(self, mask: np.ndarray | pd.Series, name: str) -> None:
        m = np.asarray(mask, dtype=bool)
        self.flags[name] = self.flags.get(name, np.zeros(len(self.keep), dtype=bool)) | m

    def flag_column(self) -> np.ndarray:
        col = pd.Series(None, index=range(len(self.keep)), dtype=object)
        for name, mask in self.flags.items():
            current = col[mask]
            col[mask] = np.where(current.isna(), name, current.astype(str) + ";" + name)
        return col.to_numpy()

    def flagged(self) -> dict[str, int]:
        counts = {name: int((mask & self.keep).sum()) for name, mask in self.flags.items()}
        return {name: n for name, n in counts.items() if n}


def resolve_ids(rows: Rows, device_names: pd.Series, model_names: pd.Series, *, devices: Mapping[str, str] | None = None,
                models: Mapping[str, str] | None = None, device_labels: pd.Series | None = None) -> tuple[pd.Series, pd.Series]:
    """Catalog ids of every row's device and model (explicit mappings first); rows whose device or
    model the catalogs do not know are dropped and counted under a reason naming them."""
    device_ids = device_names.map({d: gpu_id(d, devices) for d in pd.unique(device_names)})
    model_ids = model_names.map({m: model_id(m, models) for m in pd.unique(model_names)})
    rows.drop_unresolved(device_ids, device_names if device_labels is None else device_labels, "device")
    rows.drop_unresolved(model_ids, model_names, "model")
    return device_ids, model_ids


def finish(raw: pd.DataFrame, rows: Rows, source: str, path: Path, rows_read: int) -> ImportResult:
    """Keep the rows left, add source / flag columns and validate (any invalid row raises)."""
    if len(raw) != len(rows.keep):
        raise AssertionError(f"{source}: {len(raw)} rows but {len(rows.keep)} keep flags")
    flags = rows.flag_column()
    raw = raw.assign(source=source, source_file=path.name, flag=flags)
    raw = raw.loc[rows.keep].reset_index(drop=True)
    table, _ = validate(raw, on_error="raise", origin=str(path))
    return ImportResult(table, source, path, rows_read, dict(rows.dropped), rows.flagged())


def interleave(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-phase frames built over the same source rows, ordered by source line
    (prefill before decode for the same line)."""
    frames = list(frames)
    out = pd.concat(frames, ignore_index=True)
    order = np.lexsort((np.repeat(np.arange(len(frames)), [len(f) for f in frames]), out["source_row"].to_numpy()))
    return out.iloc[order].reset_index(drop=True)


def with_source_columns(result: ImportResult, path: Path, columns: Mapping[str, str]) -> pd.DataFrame:
    """The imported rows of ``result`` joined with source columns the canonical table does not keep:
    ``columns`` maps a column of the file at ``path`` to its name in the output. Rows are matched by
    ``source_row`` (the file line; line 1 is the header)."""
    raw = pd.read_csv(Path(path), usecols=list(columns))
    src = raw.iloc[result.table["source_row"].to_numpy(dtype=np.int64) - 2].reset_index(drop=True)
    out = result.table.copy()
    for col, name in columns.items():
        out[name] = src[col].to_numpy()
    return out
