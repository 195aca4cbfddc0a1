"""Per-row grid regions of a request file: each request is charged at its own region's intensity.

A request file (CSV or Parquet) with a ``region`` column is a log of requests served in several
places: each row's operational carbon uses the annual grid intensity of the region in its cell
(any name or alias of the region table: ``FR``, ``fra``, ``france``, ``aws:eu-west-3``); an empty
cell takes ``--region`` (or the world average). Every distinct region of the file is checked before
anything is written: an unknown one is refused with its file and line.

>>> from llmco2.carbon.region_rows import region_intensity
>>> region_intensity("fra") < region_intensity("deu")
True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.carbon.accounting import region
from llmco2.carbon.footprint import with_hourly_carbon
from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)
#: Rows read at a time when the region column is checked.
CHECK_ROWS = 65_536
COLUMN = "region"


def region_intensity(name: str | None) -> float:
    """Annual grid intensity (g CO2eq/kWh) of a region of the table (``None``: the world average)."""
    return float(region(name).g_co2eq_per_kwh)


@dataclass(frozen=True)
class RowRegions:
    """The regions of one request file's rows.

    Attributes:
        requests: the request file.
        default_region: the region of rows with an empty cell (``--region``; ``None``: world).
        intensity: region cell (stripped) -> annual intensity (g CO2eq/kWh), every cell of the file.
        regions: region cell (stripped) -> region id of the table.
        used_mean: mean intensity over the file's rows (g CO2eq/kWh).
    """

    requests: str
    default_region: str | None
    intensity: dict[str, float]
    regions: dict[str, str]
    used_mean: float

    @property
    def grid(self) -> dict[str, Any]:
        """The ``grid`` assumptions of the file's predictions."""
        ids = sorted(set(self.regions.values()))
        return {"g_co2eq_per_kwh": self.used_mean, "region": f"per row ({COLUMN} column): {', '.join(ids)}",
                "source": "the region table's annual intensity of each row's region; empty cells: "
                          f"{self.default_region or 'world'}; g_co2eq_per_kwh is the mean over the file's rows"}

    def intensities(self, batch: Any, first_line: int) -> NDArray[np.float64]:
        """The intensity (g CO2eq/kWh) of each row of an Arrow record batch of the file."""
        cells = batch.column(batch.schema.names.index(COLUMN)).to_pylist()
        out = np.empty(len(cells), dtype=np.float64)
        for i, cell in enumerate(cells):
            key = "" if cell is None else str(cell).strip()
            value = self.intensity.get(key)
            if value is None:  # the checking pass has seen every cell, so only a file changed meanwhile gets here
                raise InvalidInputError(f"{self.requests}, line {first_line + i}: region {key!r} appeared after the file "
                                        "was checked; run the command again", field="requests")
            out[i] = value
        return out

    def apply(self, fp: Any, chunk: Any) -> Any:
        """``fp`` (the footprint of a request chunk) with each row's operational carbon at its region."""
        return with_hourly_carbon(fp, self.intensities(chunk.batch, chunk.first_line))


def _region_batches(path: Path) -> Any:
    """Record batches of the file's region column, as text."""
    import pyarrow as pa

    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=CHECK_ROWS, columns=[COLUMN]):
            yield pc.cast(batch.column(0), pa.string())
        return
    import pyarrow.csv as pa_csv

    from llmco2.analytic.compressed import arrow_csv_batches

    for batch in arrow_csv_batches(path, read_options=pa_csv.ReadOptions(block_size=1 << 22),
                                   convert_options=pa_csv.ConvertOptions(include_columns=[COLUMN],
                                                                         column_types={COLUMN: pa.string()})):
        yield batch.column(0)


def request_file_regions(requests: str | Path, header: list[str], default_region: str | None) -> RowRegions | None:
    """The regions of the rows of ``requests`` (whose columns are ``header``), every distinct one
    checked against the region table; ``None`` when the file has no region column."""
    if COLUMN not in header:
        return None
    path = Path(requests)
    intensity: dict[str, float] = {"": region_intensity(default_region)}
    ids: dict[str, str] = {}
    line = 2  # the first data line of a CSV (line 1 is the header)
    total, rows = 0.0, 0
    for column in _region_batches(path):
        cells = column.to_pylist()
        for cell in set(cells):
            key = "" if cell is None else str(cell).strip()
            if key == "":
                ids[key] = region(default_region).id
            if key in intensity:
                continue
            try:
                r = region(key)
            except InvalidInputError as exc:
                cells = [("" if c is None else str(c).strip()) for c in column.to_pylist()]
                where = line + cells.index(key)
                raise InvalidInputError(f"{path}, line {where}: {exc}", field="requests") from None
            intensity[key], ids[key] = float(r.g_co2eq_per_kwh), r.id
        total += sum(intensity["" if c is None else str(c).strip()] for c in cells)
        rows += len(cells)
        line += len(column)
    log.info("%s: %d regions in its region column", path, len(set(ids.values())))
    return RowRegions(str(path), default_region, intensity, ids, total / rows if rows else intensity[""])


def row_intensities(cells: list[Any], default_region: str | None, where: str = "the table",
                    first_line: int = 2) -> NDArray[np.float64]:
    """Annual intensity (g CO2eq/kWh) of each row's region cell (an empty cell: ``default_region``);
    an unknown region is refused naming its line (``first_line`` is the first cell's: in a CSV of
    the table the header is line 1)."""
    cache: dict[str, float] = {}
    out = np.empty(len(cells), dtype=np.float64)
    for i, cell in enumerate(cells):
        key = "" if cell is None or (isinstance(cell, float) and cell != cell) else str(cell).strip()
        if key not in cache:
            try:
                cache[key] = region_intensity(key or default_region)
            except InvalidInputError as exc:
                raise InvalidInputError(f"{where}, line {i + first_line}: {exc}", field="region") from None
        out[i] = cache[key]
    return out


@dataclass(frozen=True)
class ChunkRegions:
    """Each chunk's rows at their own region (a worker's view: no pass over the whole file first).

    Attributes:
        requests: the request file (for messages).
        default_region: the region of empty cells (``--region``; ``None``: world).
    """

    requests: str
    default_region: str | None

    def intensities(self, batch: Any, first_line: int) -> NDArray[np.float64] | None:
        """The intensity (g CO2eq/kWh) of each row of an Arrow record batch of the file whose first
        row is on line ``first_line``; ``None`` when it has no region column (the run's grid applies)."""
        names = batch.schema.names
        if COLUMN not in names:
            return None
        return row_intensities(batch.column(names.index(COLUMN)).to_pylist(), self.default_region, self.requests, first_line)

    def apply(self, fp: Any, chunk: Any) -> Any:
        """``fp`` with each row's operational carbon at its region (unchanged without a region column)."""
        values = self.intensities(chunk.batch, chunk.first_line)
        return fp if values is None else with_hourly_carbon(fp, values)
