"""Hourly grid carbon intensity.

An intensity file is a CSV (or a gzip-compressed CSV) with columns ``timestamp`` (ISO 8601, UTC; a
time without a zone offset is read as UTC), ``g_co2eq_per_kwh`` and optionally ``region``, one row
per hour (and region), or an Electricity Maps hourly export (``Datetime (UTC)``, ``Zone Id``,
``Carbon Intensity gCO₂eq/kWh (direct)``, ``... (LCA)`` or ``... (Life cycle)``, ...), recognised
by its header. Instead of a path, the name of a bundled dataset (:mod:`llmco2.carbon.hourly_datasets`:
``electricitymaps-2023``, published hourly figures of DE, FR, GB and US-CAL-CISO) reads that one.

A request gets the intensity of the hour that contains its timestamp, and of its region when the
file has several regions. Region names match case-insensitively, and through the grid-region
catalog's aliases (``FR`` = ``fra`` = ``france``). Every failure is an
:class:`~llmco2.errors.InvalidInputError` naming the file and the line (the header is line 1).
"""

from __future__ import annotations

import csv
import functools
import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.carbon.hourly_datasets import HourlyDataset, dataset_names, find_dataset
from llmco2.carbon.timestamps import hour_text, hours_of, parse_seconds
from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)

#: The shipped sample file (synthetic, illustrative values in Electricity Maps' layout, not
#: measurements; kept for tests) and what every grid assumption built from it says. The published
#: figures are the bundled datasets (``electricitymaps-2023``).
ILLUSTRATIVE_SAMPLE = "hourly_intensity_sample.csv"
ILLUSTRATIVE_NOTE = "; ILLUSTRATIVE VALUES, NOT MEASUREMENTS (the shipped sample: carbon/data/HOURLY_SAMPLE.md)"
#: Largest intensity accepted (g CO2eq/kWh); the dirtiest grids are near 1,100.
MAX_INTENSITY = 5000.0
BASES = ("direct", "lifecycle")
#: Electricity Maps export columns (compared lower-case, with ``co2`` for ``co₂``).
EM_TIME, EM_ZONE = "datetime (utc)", "zone id"
EM_VALUE = {"direct": ("carbon intensity gco2eq/kwh (direct)",),
            "lifecycle": ("carbon intensity gco2eq/kwh (lca)", "carbon intensity gco2eq/kwh (life cycle)",
                          "carbon intensity gco2eq/kwh (life cycle assessment)")}


@dataclass(frozen=True, eq=False)
class HourlyIntensity:
    """Hourly intensities (g CO2eq/kWh) of one or more regions.

    Attributes:
        source: the file (or ``"frame"``) they were read from.
        format: ``"llmco2"`` (timestamp, g_co2eq_per_kwh[, region]) or ``"electricitymaps"``.
        basis: ``"as given"`` for the llmco2 format; ``"direct"`` or ``"lifecycle"`` for an export.
        regions: the regions as written (``("",)`` when the file has no region column).
        hours: per region, the sorted hours (whole hours since 1970-01-01 UTC).
        values: per region, the intensity of each of those hours (g CO2eq/kWh).
        keys: region key (:func:`region_key`) -> index in :attr:`regions`.
        dataset: the bundled dataset read (``source`` is then its name), else None.
    """

    source: str
    format: str
    basis: str
    regions: tuple[str, ...]
    hours: tuple[NDArray[np.int64], ...]
    values: tuple[NDArray[np.float64], ...]
    keys: dict[str, int] = field(default_factory=dict)
    dataset: HourlyDataset | None = None

    @property
    def first_hour(self) -> int:
        return int(min(h[0] for h in self.hours))

    @property
    def last_hour(self) -> int:
        return int(max(h[-1] for h in self.hours))

    def span(self) -> str:
        """``2023-11-16T00:00Z to 2023-11-17T23:00Z`` (the first and last hour's start)."""
        return f"{hour_text(self.first_hour)} to {hour_text(self.last_hour)}"

    def within_span(self, hour: int) -> bool:
        """Whether ``hour`` lies between the file's first and last hour (one it lacks is then a gap)."""
        return self.first_hour <= hour <= self.last_hour

    @property
    def illustrative(self) -> bool:
        """Whether this is the shipped sample of made-up values (``carbon/data/HOURLY_SAMPLE.md``)."""
        return Path(str(self.source)).name == ILLUSTRATIVE_SAMPLE

    def region_index(self, name: str | None) -> int | None:
        """Index of region ``name`` in :attr:`regions` (None when the file has no such region)."""
        if name is None or not str(name).strip():
            return None
        return self.keys.get(region_key(str(name)))

    def grid(self, used: NDArray[np.float64], region: str | None = None, hour: int | None = None) -> dict[str, Any]:
        """The ``grid`` assumptions of predictions that used the intensities ``used``: their
        energy-unweighted mean (g CO2eq/kWh), the file and, for one request, its region and hour."""
        if self.dataset is not None:
            source = self.dataset.describe(self.basis)
        else:
            source = (f"hourly intensity file {self.source} ({self.format} layout, {self.basis})"
                      f"{ILLUSTRATIVE_NOTE if self.illustrative else ''}")
        out: dict[str, Any] = {"g_co2eq_per_kwh": float(np.mean(used)) if len(used) else float("nan"),
                               "region": region, "source": source, "intensity_file": self.source}
        if self.dataset is not None:
            out.update(dataset=self.dataset.name, licence=self.dataset.licence, attribution=self.dataset.attribution)
        if hour is not None:
            out["hour"] = hour_text(hour)
        else:
            out["hourly"] = "mean over the requests; each request uses the hour of its timestamp"
        return out


@functools.lru_cache(maxsize=256)
def region_key(name: str) -> str:
    """The key regions match by: the grid-region catalog id when ``name`` is a known id or alias,
    else the lower-case name."""
    from llmco2.carbon.accounting import region

    text = name.strip().lower()
    try:
        return region(text).id
    except InvalidInputError:
        return text


def _norm(name: str) -> str:
    return " ".join(name.replace("\ufeff", "").replace("₂", "2").strip().lower().split())


def _columns(header: list[str], where: str, basis: str) -> tuple[str, str, int, int, int | None]:
    """(format, basis, timestamp column, intensity column, region column or None) of a header."""
    names = [_norm(h) for h in header]
    if "timestamp" in names and "g_co2eq_per_kwh" in names:
        region = names.index("region") if "region" in names else None
        return "llmco2", "as given", names.index("timestamp"), names.index("g_co2eq_per_kwh"), region
    if EM_TIME in names:
        for candidate in EM_VALUE[basis]:
            if candidate in names:
                return "electricitymaps", basis, names.index(EM_TIME), names.index(candidate), \
                    names.index(EM_ZONE) if EM_ZONE in names else None
        raise InvalidInputError(f"{where}, line 1: an Electricity Maps export without a {basis} carbon-intensity column "
                                f"(expected one of {', '.join(repr(c) for c in EM_VALUE[basis])})", field="intensity")
    shown = ", ".join(repr(h[:30]) for h in header[:6]) or "nothing"
    raise InvalidInputError(f"{where}, line 1: not an hourly intensity file: expected columns timestamp, g_co2eq_per_kwh"
                            f"[, region] or an Electricity Maps hourly export (Datetime (UTC), Zone Id, Carbon Intensity "
                            f"gCO₂eq/kWh (direct), ...); its header has {shown}", field="intensity")


def _rows_of_file(path: Path, where: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a CSV file, gzip-compressed or not (``where``: its name in messages)."""
    from llmco2.analytic.compressed import compressed_error, open_text
    from llmco2.file_checks import check_input_file

    check_input_file(path, "intensity")
    try:
        with open_text(path, encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except UnicodeDecodeError as exc:
        raise (compressed_error(path, "intensity")
               or InvalidInputError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}); give a CSV file",
                                    field="intensity")) from None
    except csv.Error as exc:
        raise InvalidInputError(f"{where}: not a CSV file ({exc})", field="intensity") from None
    except InvalidInputError as exc:  # a damaged gzip file
        raise InvalidInputError(str(exc.args[0]) if exc.args else str(exc), field="intensity") from None
    if not rows:
        raise InvalidInputError(f"{where} is empty; give a CSV with columns timestamp, g_co2eq_per_kwh[, region]",
                                field="intensity")
    return rows[0], rows[1:]


def resolve_source(source: str | Path) -> tuple[Path, HourlyDataset | None]:
    """The file ``source`` names, and the bundled dataset when it is one's name rather than a path
    that exists; a missing path says which datasets could have been meant."""
    path = Path(source)
    try:
        if path.exists():
            return path, None
    except OSError as exc:  # a name too long for a path: no file, perhaps a dataset's name
        if find_dataset(str(source)) is None:
            raise InvalidInputError(f"cannot read {str(source)[:80]!r}: {exc.strerror or exc}", field="intensity") from None
    dataset = find_dataset(str(source))
    if dataset is not None:
        return dataset.path(), dataset
    raise InvalidInputError(f"no such file {str(source)!r}; give an hourly intensity CSV or a bundled dataset: "
                            f"{dataset_names()}", field="intensity")


def _rows_of_frame(frame: Any) -> tuple[list[str], list[list[Any]]]:
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        if not callable(getattr(frame, "to_pandas", None)):
            raise InvalidInputError(f"must be a CSV path, a bundled dataset name, a pandas DataFrame or a pyarrow Table, "
                                    f"got {type(frame).__name__}", field="intensity")
        frame = frame.to_pandas()  # a pyarrow Table
    return [str(c) for c in frame.columns], frame.astype(object).where(frame.notna(), "").values.tolist()


def load_intensity(source: str | Path | Any, basis: str = "direct") -> HourlyIntensity:
    """Read an hourly intensity file (CSV path) or frame (pandas DataFrame or pyarrow Table with
    the same columns). ``basis`` picks the column of an Electricity Maps export: ``direct``
    (operational emissions, the GHG Protocol's Scope 2 figure) or ``lifecycle``."""
    if not isinstance(basis, str) or basis not in BASES:
        raise InvalidInputError(f"must be one of {', '.join(BASES)}, got {basis!r}", field="basis")
    if isinstance(source, (str, Path)):
        path, dataset = resolve_source(source)
        if dataset is not None:
            return _load_dataset(dataset.name, basis)
        where = str(path)
        header, rows = _rows_of_file(path, where)
    else:
        where = "frame"
        header, rows = _rows_of_frame(source)
    return _parse(header, rows, where, basis)


@functools.lru_cache(maxsize=8)
def _load_dataset(name: str, basis: str) -> HourlyIntensity:
    """A bundled dataset, read once per process and basis (its arrays are read-only)."""
    dataset = find_dataset(name)
    assert dataset is not None
    header, rows = _rows_of_file(dataset.path(), name)
    out = replace(_parse(header, rows, name, basis), dataset=dataset)
    for array in (*out.hours, *out.values):
        array.setflags(write=False)
    return out


def _parse(header: list[str], rows: list[list[Any]], where: str, basis: str) -> HourlyIntensity:
    """The hours of a file's (or frame's) header and rows (``where``: its name in messages)."""
    fmt, basis_used, t_col, v_col, r_col = _columns(header, where, basis)
    if not rows or all(not any(str(c).strip() for c in r) for r in rows):
        raise InvalidInputError(f"{where} has a header but no hours", field="intensity")
    lines, times, values, regions = [], [], [], []
    width = len(header)
    for n, row in enumerate(rows, start=2):
        if not any(str(c).strip() for c in row):
            continue  # a blank line
        if len(row) != width:
            raise InvalidInputError(f"{where}, line {n}: {len(row)} cells, the header has {width}", field="intensity")
        lines.append(n)
        times.append(row[t_col])
        values.append(row[v_col])
        regions.append(str(row[r_col]).strip() if r_col is not None else "")
    line_arr = np.asarray(lines, dtype=np.int64)
    hours = hours_of(parse_seconds(times, line_arr, where, header[t_col].strip()))
    g = np.empty(len(values))
    for i, v in enumerate(values):
        try:
            g[i] = float(str(v).strip())
        except ValueError:
            g[i] = math.nan
        if not math.isfinite(g[i]) or not 0.0 <= g[i] <= MAX_INTENSITY:
            raise InvalidInputError(f"{where}, line {lines[i]}: {header[v_col].strip()}: must be a number from 0 to "
                                    f"{MAX_INTENSITY:g} g CO2eq/kWh, got {v!r}", field="intensity")
    return _build(where, fmt, basis_used, regions, hours, g, line_arr)


def _build(where: str, fmt: str, basis: str, regions: list[str], hours: NDArray[np.int64], g: NDArray[np.float64],
           lines: NDArray[np.int64]) -> HourlyIntensity:
    names: list[str] = []
    keys: dict[str, int] = {}
    code = np.empty(len(regions), dtype=np.int64)
    for i, name in enumerate(regions):
        key = region_key(name) if name else ""
        if key not in keys:
            keys[key] = len(names)
            names.append(name)
        code[i] = keys[key]
    if len(names) > 1 and "" in keys:
        i = int(np.argmax(code == keys[""]))
        raise InvalidInputError(f"{where}, line {lines[i]}: region is empty (the file has several regions)",
                                field="intensity")
    per_hours, per_values = [], []
    for r in range(len(names)):
        mine = np.flatnonzero(code == r)
        order = mine[np.argsort(hours[mine], kind="stable")]
        h = hours[order]
        dup = np.flatnonzero(h[1:] == h[:-1])
        if len(dup):
            a, b = lines[order[dup[0]]], lines[order[dup[0] + 1]]
            a, b = min(a, b), max(a, b)
            what = f" of region {names[r]}" if names[r] else ""
            raise InvalidInputError(f"{where}, line {b}: a second row for hour {hour_text(int(h[dup[0]]))}{what} (the first is "
                                    f"line {a}); give one row per hour", field="intensity")
        per_hours.append(h)
        per_values.append(g[order])
    log.info("read %d hours of %d region(s) from %s", len(hours), len(names), where)
    return HourlyIntensity(where, fmt, basis, tuple(names), tuple(per_hours), tuple(per_values), keys)


# -- looking requests up ----------------------------------------------------------------------------
def lookup(intensity: HourlyIntensity, timestamps: Any, regions: Any = None, default_region: str | None = None,
           lines: NDArray[np.int64] | None = None, where: str = "") -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """``(intensity of each request (g CO2eq/kWh; NaN outside the file), whether it is outside)``.

    ``regions``: each request's region (empty or None: ``default_region``); used only when the
    file has several regions. A bad timestamp or an unknown region raises at once."""
    seconds = parse_seconds(timestamps, lines, where)
    hours = hours_of(seconds)
    n = len(hours)
    code = np.zeros(n, dtype=np.int64)
    if len(intensity.regions) > 1:
        code = _region_codes(intensity, regions, default_region, n, lines, where)
    elif intensity.regions and intensity.regions[0]:
        _check_single_region(intensity, regions, default_region, n, lines, where)
    out = np.full(n, np.nan)
    for r, (h, v) in enumerate(zip(intensity.hours, intensity.values, strict=True)):
        mine = np.flatnonzero(code == r)
        if not len(mine):
            continue
        at = np.minimum(np.searchsorted(h, hours[mine]), len(h) - 1)
        found = h[at] == hours[mine]
        out[mine[found]] = v[at[found]]
    return out, np.isnan(out)


def _check_single_region(intensity: HourlyIntensity, regions: Any, default_region: str | None, n: int,
                         lines: NDArray[np.int64] | None, where: str) -> None:
    """A file of one named region answers only for that region: a request (or ``--region``) that
    names another one is refused rather than charged at the file's region."""
    names = [None] * n if regions is None else ["" if r is None else str(r) for r in list(regions)]
    for i, name in enumerate(names):
        text = (name or "").strip() or (default_region or "")
        if text and intensity.region_index(text) is None:
            raise InvalidInputError(f"{_prefix(i, n, lines, where)}region {text!r} is not in {intensity.source}, which "
                                    f"holds only {intensity.regions[0]}", field="intensity")


def _prefix(i: int, n: int, lines: NDArray[np.int64] | None, where: str) -> str:
    """``FILE, line N: `` before a message about request ``i`` of ``n`` (nothing for one request
    given without a file line, such as ``--timestamp``)."""
    line = f"line {int(lines[i])}" if lines is not None else (f"row {i}" if n > 1 else "")
    prefix = ", ".join(p for p in (where if lines is not None or n > 1 else "", line) if p)
    return f"{prefix}: " if prefix else ""


def _region_codes(intensity: HourlyIntensity, regions: Any, default_region: str | None, n: int,
                  lines: NDArray[np.int64] | None, where: str) -> NDArray[np.int64]:
    names = [None] * n if regions is None else ["" if r is None else str(r) for r in list(regions)]
    code = np.empty(n, dtype=np.int64)
    cache: dict[str, int] = {}
    listed = ", ".join(intensity.regions)
    for i, name in enumerate(names):
        text = (name or "").strip() or (default_region or "")
        if text not in cache:
            index = intensity.region_index(text)
            if index is None:
                prefix = _prefix(i, n, lines, where)
                if not text:
                    raise InvalidInputError(f"{prefix}no region: {intensity.source} has regions {listed}; give each "
                                            "request's region (a region column or `region`)", field="intensity")
                raise InvalidInputError(f"{prefix}region {text!r} is not in {intensity.source} (its regions: {listed})",
                                        field="intensity")
            cache[text] = index
        code[i] = cache[text]
    return code


def intensity_for(intensity: HourlyIntensity, timestamps: Any, regions: Any = None, default_region: str | None = None,
                  lines: NDArray[np.int64] | None = None, where: str = "") -> NDArray[np.float64]:
    """The intensity (g CO2eq/kWh) of the hour (and region) of every request; requests outside
    the file's hours raise one :class:`InvalidInputError` with their count and the first one."""
    values, outside = lookup(intensity, timestamps, regions, default_region, lines, where)
    if outside.any():
        raise outside_error(intensity, int(outside.sum()), int(np.argmax(outside)), timestamps, lines, where)
    return values


def outside_error(intensity: HourlyIntensity, count: int, first: int, timestamps: Any, lines: NDArray[np.int64] | None,
                  where: str = "") -> InvalidInputError:
    """The error for ``count`` requests outside the file's hours, the first being row ``first``."""
    import pyarrow as pa

    cell = timestamps[first]
    if isinstance(cell, pa.Scalar):
        cell = cell.as_py()
    line = f"line {int(lines[first])}" if lines is not None else f"row {first}"
    of = f" of {where}" if where else ""
    regions = " for its region" if len(intensity.regions) > 1 else ""
    many = "requests fall" if count != 1 else "request falls"
    try:
        hour: int | None = int(hours_of(parse_seconds([cell]))[0])
    except InvalidInputError:  # parsed once already; a type parse_seconds takes only in bulk
        hour = None
    if hour is not None and intensity.within_span(hour):  # a gap inside the file, not a request before or after it
        return InvalidInputError(f"{count:,} {many} on hours that {intensity.source} lacks{regions} (it spans "
                                 f"{intensity.span()} with gaps: no row for hour {hour_text(hour)}); first: {line}{of}, "
                                 f"timestamp {str(cell)!r}", field="intensity")
    return InvalidInputError(f"{count:,} {many} outside the hours of {intensity.source} ({intensity.span()}){regions}; "
                             f"first: {line}{of}, timestamp {str(cell)!r}", field="intensity")
