"""Write the bundled hourly grid intensities ``llmco2/carbon/data/hourly_electricitymaps_2023.csv.gz``
(``--intensity-file electricitymaps-2023``) from Electricity Maps' published hourly CSVs.

Source: the Electricity Maps data portal's free hourly files for 2023 (``{ZONE}_2023_hourly.csv``,
the version published in January 2024; https://www.electricitymaps.com/data-portal), licensed
under the Open Data Commons Open Database License (ODbL) v1.0. This machine has no internet; the
files were taken from a public GitHub repository that holds them unchanged, fetched with the
``fetch`` tool (``github:westkath/ichnos``, the Ichnos workflow-carbon tool; its commit
52b81f4469d05dfd5d702e8107b9dcfd9c17f9a2, files added in f6630dd5 on 2024-03-26)::

    fetch github:westkath/ichnos            # -> /work/.mirror/westkath+ichnos/repo (a bare git dir)
    .venv/bin/python experiments/bundle_hourly_intensity.py --git-dir /work/.mirror/westkath+ichnos/repo
    .venv/bin/python experiments/bundle_hourly_intensity.py --folder DIR   # or a folder of the four CSVs

Cross-check: FR, DE and US-CAL-CISO hold the same cells as the copies in ``github:satrai-lab/cozybench``
(models/carbon_intensity/, commit 33371464), an independent download (the files differ only in their
line ends, CRLF here).
The GB file of westkath/ichnos went through a spreadsheet: its times read ``31/12/2023 23:00`` (day
first, no seconds) and its flags ``FALSE``; they are read as such and written in the portal's form.

Kept per zone and hour: the time (UTC, the start of the hour), the zone id, the direct and the
life-cycle intensity (g CO2eq/kWh, as published: two decimals) and whether Electricity Maps
estimated the hour. Dropped: country and zone names, low-carbon and renewable percentages, the data
source and the estimation method. Every zone must have the 8,760 hours of 2023, once each. The
gzip member has no name and a zero time stamp, so the same input gives the same bytes.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import subprocess
from datetime import datetime
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "llmco2" / "carbon" / "data" / "hourly_electricitymaps_2023.csv.gz"
#: The commit of github:westkath/ichnos the bundle was made from, and the folder of the files in it.
COMMIT = "52b81f4469d05dfd5d702e8107b9dcfd9c17f9a2"
FOLDER = "data/emaps"
#: Zone ids (Electricity Maps), in the order written.
ZONES = ("DE", "FR", "GB", "US-CAL-CISO")
YEAR = 2023
HOURS = 8760  # 365 days x 24: 2023 is not a leap year
DIRECT, LCA = "Carbon Intensity gCO₂eq/kWh (direct)", "Carbon Intensity gCO₂eq/kWh (LCA)"
HEADER = ["Datetime (UTC)", "Zone Id", DIRECT, LCA, "Data Estimated"]
#: The two time layouts met: the portal's and the spreadsheet-saved GB file's.
TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%d/%m/%Y %H:%M")


def read_source(zone: str, git_dir: Path | None, folder: Path | None) -> bytes:
    """The bytes of ``{zone}_2023_hourly.csv`` from the fetched repository or a folder."""
    name = f"{zone}_{YEAR}_hourly.csv"
    if folder is not None:
        return (folder / name).read_bytes()
    assert git_dir is not None
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{COMMIT}:{FOLDER}/{name}"], check=True,
                          capture_output=True).stdout


def parse_time(text: str) -> datetime:
    """The hour of a ``Datetime (UTC)`` cell in either layout."""
    for fmt in TIME_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise ValueError(f"unreadable time {text!r}")


def zone_rows(zone: str, raw: bytes) -> list[list[str]]:
    """The kept cells of one zone's hours, checked: one zone id, 8,760 distinct hours of the year,
    intensities from 0 to 2,000 g CO2eq/kWh."""
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))
    out, seen = [], set()
    for row in rows:
        if row["Zone Id"] != zone:
            raise ValueError(f"{zone}: a row of zone {row['Zone Id']!r}")
        t = parse_time(row["Datetime (UTC)"])
        if t.year != YEAR or t in seen:
            raise ValueError(f"{zone}: hour {t} outside {YEAR} or repeated")
        seen.add(t)
        direct, lca = float(row[DIRECT]), float(row[LCA])
        if not (0 <= direct <= 2000 and 0 <= lca <= 2000):
            raise ValueError(f"{zone} {t}: intensity {direct}, {lca} out of range")
        out.append([t.strftime(TIME_FORMATS[0]), zone, row[DIRECT].strip(), row[LCA].strip(),
                    row["Data Estimated"].strip().lower()])
    if len(out) != HOURS:
        raise ValueError(f"{zone}: {len(out)} hours, expected {HOURS}")
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--git-dir", type=Path, help="the fetched github:westkath/ichnos (a bare git directory)")
    where.add_argument("--folder", type=Path, help="a folder holding the four {ZONE}_2023_hourly.csv files")
    args = parser.parse_args()
    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(HEADER)
    for zone in ZONES:
        raw = read_source(zone, args.git_dir, args.folder)
        rows = zone_rows(zone, raw)
        values = sorted(float(r[2]) for r in rows)
        print(f"{zone}: {len(rows)} hours, source sha256 {hashlib.sha256(raw).hexdigest()[:16]}..., direct median "
              f"{values[len(values) // 2]:.1f}, mean {sum(values) / len(values):.1f} g/kWh, "
              f"{sum(r[4] == 'true' for r in rows)} hours estimated")
        writer.writerows(rows)
    with open(OUT, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(text.getvalue().encode("utf-8"))
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB, sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()})")


if __name__ == "__main__":
    main()
