"""Hourly grid-intensity datasets shipped with the package, named instead of a file path
(``--intensity-file electricitymaps-2023``; ``llmco2.predict(..., intensity="electricitymaps-2023")``).

Each is a published dataset, converted to the Electricity Maps export layout the reader
recognises (:mod:`llmco2.carbon.hourly`), with its source, licence and attribution here and in a
README beside the file (``carbon/data/HOURLY_*.md``). A path that exists is always read as a path:
a name is looked up only when no such file exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class HourlyDataset:
    """A bundled hourly intensity dataset.

    Attributes:
        name: what ``--intensity-file`` takes (lower-case).
        file: the file under ``llmco2/carbon/data`` (gzip CSV, Electricity Maps layout: ``Datetime
            (UTC)``, ``Zone Id``, direct and life-cycle g CO2eq/kWh, ``Data Estimated``).
        readme: its README beside it (source, licence, conversion).
        title: the dataset as cited (publisher, product, year, version).
        licence: the licence the data is published (and bundled) under.
        attribution: the notice its licence asks users of the data to show.
        zones: the zones it holds, as written in it.
        hours: the hours of each zone (8,760 for a year, 8,784 for a leap year).
    """

    name: str
    file: str
    readme: str
    title: str
    licence: str
    attribution: str
    zones: tuple[str, ...]
    hours: int

    def path(self) -> Path:
        """The bundled file."""
        return Path(str(resources.files("llmco2.carbon") / "data" / self.file))

    def describe(self, basis: str) -> str:
        """What the ``grid`` assumptions of a prediction that used it say of it (``basis``: the
        column used, ``direct`` or ``lifecycle``)."""
        return (f"{self.title}, {basis} intensity (bundled dataset {self.name}: carbon/data/{self.readme}); "
                f"licence {self.licence}; {self.attribution}")


#: The bundled datasets by name. Electricity Maps 2023: the data portal's free hourly files of the
#: four zones, version of January 2024 (carbon/data/HOURLY_ELECTRICITYMAPS_2023.md).
DATASETS: dict[str, HourlyDataset] = {d.name: d for d in (
    HourlyDataset(
        name="electricitymaps-2023", file="hourly_electricitymaps_2023.csv.gz", readme="HOURLY_ELECTRICITYMAPS_2023.md",
        title="Electricity Maps, hourly carbon intensity 2023 (data portal, version of January 2024)",
        licence="ODbL 1.0 (Open Data Commons Open Database License)",
        attribution="Contains data from Electricity Maps (https://www.electricitymaps.com), made available under the "
                    "ODbL 1.0 (https://opendatacommons.org/licenses/odbl/1-0/)",
        zones=("DE", "FR", "GB", "US-CAL-CISO"), hours=8760),
)}


def find_dataset(name: str) -> HourlyDataset | None:
    """The bundled dataset called ``name`` (case and surrounding spaces ignored), else None."""
    return DATASETS.get(str(name).strip().lower())


def dataset_names() -> str:
    """``electricitymaps-2023 (DE, FR, GB, US-CAL-CISO)``: the names and zones of the bundled datasets."""
    return ", ".join(f"{d.name} ({', '.join(d.zones)})" for d in DATASETS.values())
