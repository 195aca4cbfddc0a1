"""Hourly intensity applied to request files (``llmco2 predict --requests FILE --intensity-file CSV``,
or a bundled dataset's name) and the synthetic sample intensity file shipped for tests.

:func:`request_file_hours` reads the intensity file and checks, in one pass over the request
file's ``timestamp`` (and ``region``) columns, that every request has an hour in it, before
anything is predicted; :meth:`RequestHours.apply` then gives each predicted chunk its operational
carbon at its own hour.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.compressed import arrow_csv_batches, open_text
from llmco2.carbon.footprint import with_hourly_carbon
from llmco2.carbon.hourly import ILLUSTRATIVE_SAMPLE, HourlyIntensity, load_intensity, lookup, outside_error
from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)

SAMPLE_FILE = ILLUSTRATIVE_SAMPLE
#: Rows of a request file looked up together in the checking pass.
CHECK_ROWS = 65_536


def sample_intensity_path() -> Path:
    """The shipped synthetic sample, for tests: 48 hours of two zones (FR, DE) in Electricity Maps'
    export layout, with illustrative values, not measured ones (see ``carbon/data/HOURLY_SAMPLE.md``).
    Published figures: the bundled dataset ``electricitymaps-2023``
    (:mod:`llmco2.carbon.hourly_datasets`)."""
    return Path(str(resources.files("llmco2.carbon") / "data" / SAMPLE_FILE))


@dataclass(frozen=True)
class RequestHours:
    """An intensity file applied to the requests of one file.

    Attributes:
        intensity: the hourly intensities.
        requests: the request file.
        default_region: the region of rows without a ``region`` cell (``--region``).
        used_mean: mean intensity over the file's requests (g CO2eq/kWh).
    """

    intensity: HourlyIntensity
    requests: str
    default_region: str | None
    used_mean: float

    @property
    def grid(self) -> dict[str, Any]:
        """The ``grid`` assumptions of the file's predictions."""
        return self.intensity.grid(np.array([self.used_mean]), region=self.default_region)

    def intensities(self, batch: Any, first_line: int) -> NDArray[np.float64]:
        """The intensity (g CO2eq/kWh) of each row of an Arrow record batch of the file whose
        first row is on line ``first_line``."""
        lines = first_line + np.arange(batch.num_rows, dtype=np.int64)
        names = batch.schema.names
        regions = batch.column(names.index("region")) if "region" in names else None
        values, outside = lookup(self.intensity, batch.column(names.index("timestamp")),
                                 None if regions is None else regions.to_pylist(), self.default_region, lines, self.requests)
        if outside.any():  # the checking pass has seen every row, so only a file changed meanwhile gets here
            first = int(np.argmax(outside))
            raise outside_error(self.intensity, int(outside.sum()), first, batch.column(names.index("timestamp")), lines,
                                self.requests)
        return values

    def apply(self, fp: Any, chunk: Any) -> Any:
        """``fp`` (the footprint of a :class:`~llmco2.analytic.request_files.RequestChunk`) with
        each request's operational carbon at its own hour."""
        return with_hourly_carbon(fp, self.intensities(chunk.batch, chunk.first_line))


def _header(path: Path, parquet: bool) -> list[str]:
    if parquet:
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    with open_text(path) as fh:
        return [h.strip() for h in next(csv.reader(fh), [])]


def _columns(path: Path, parquet: bool, names: list[str]) -> Iterator[Any]:
    """Record batches of the columns ``names`` of a request file, as strings."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    if parquet:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=CHECK_ROWS, columns=names):
            cols = [c if pa.types.is_timestamp(c.type) else pc.cast(c, pa.string()) for c in batch.columns]
            yield pa.RecordBatch.from_arrays(cols, names=names)
        return
    with open_text(path) as fh:
        raw = next(csv.reader(fh), [])
    wanted = [h for h in raw if h.strip() in names]
    for batch in arrow_csv_batches(path, read_options=pa_csv.ReadOptions(block_size=1 << 22, use_threads=False),
                                   convert_options=pa_csv.ConvertOptions(include_columns=wanted,
                                                                         column_types={h: pa.string() for h in wanted},
                                                                         strings_can_be_null=False)):
        yield batch.rename_columns([h.strip() for h in batch.schema.names])


def request_file_hours(requests: str | Path, intensity_file: str | Path, region: str | None = None,
                       basis: str = "direct") -> RequestHours:
    """Read ``intensity_file`` and check that every request of the file ``requests`` (CSV or
    Parquet, with a ``timestamp`` column and optionally ``region``) has an hour in it; the
    requests outside raise one :class:`InvalidInputError` with their count and the first one."""
    import pyarrow as pa

    intensity = load_intensity(intensity_file, basis)
    path = Path(requests)
    parquet = path.suffix.lower() in (".parquet", ".pq")
    try:
        header = _header(path, parquet)
    except (OSError, UnicodeDecodeError, csv.Error, pa.ArrowInvalid):
        header = []  # reported by the request reader, with its reason
    if "timestamp" not in header:
        raise InvalidInputError(f"{path} has no timestamp column; `intensity` needs each request's time "
                                "(ISO 8601, UTC) in a timestamp column", field="intensity")
    names = ["timestamp", *(["region"] if "region" in header else [])]
    where = str(path)
    outside, first, total, n = 0, None, 0.0, 0
    line = 2
    try:
        for batch in _columns(path, parquet, names):
            lines = line + np.arange(batch.num_rows, dtype=np.int64)
            regions = batch.column(1).to_pylist() if len(names) > 1 else None
            values, out = lookup(intensity, batch.column(0), regions, region, lines, where)
            if out.any():
                if first is None:
                    i = int(np.argmax(out))
                    first = (i, batch.column(0), lines)
                outside += int(out.sum())
            total += float(np.nansum(values))
            n += int((~out).sum())
            line += batch.num_rows
    except pa.ArrowInvalid:
        pass  # a malformed file is reported, with its line, by the request reader
    if first is not None:
        raise outside_error(intensity, outside, first[0], first[1], first[2], where)
    return RequestHours(intensity, where, region, total / n if n else float("nan"))
