"""The parts of a distributed batch prediction: the plan, its manifest, and the task a worker runs.

Each input file is cut into partitions of consecutive rows (:data:`PARTITION_ROWS` by default); a
partition becomes one Parquet part in the output folder, named from its input file and index
(``STEM-HASH-00003.parquet``, HASH from the file's resolved path, so two inputs with the same name
in different folders do not collide). A worker writes its part to a hidden temporary name and
renames it into place, so a part exists under its final name only when it is complete.

The manifest (``_llmco2_manifest.json``, ignored by Parquet dataset readers as every name starting
with ``_`` or ``.`` is) records the fingerprint of the run (input files with their size and
modification time, options, checkpoint, partition size, version) and the parts. A rerun with the
same fingerprint skips the parts that exist; a rerun with another one is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llmco2.api.options import FileJob
from llmco2.errors import InvalidInputError
from llmco2.file_checks import parse_json

log = logging.getLogger(__name__)

#: Rows per partition by default (16 chunks of 16,384 rows).
PARTITION_ROWS = 262_144
MANIFEST_NAME = "_llmco2_manifest.json"
MANIFEST_VERSION = 1
#: Options that change where or how fast parts are computed, not their contents.


@dataclass(frozen=True)
class Part:
    """One partition of an input file and the Parquet part it becomes.

    Attributes:
        src: the input file (absolute path, as the workers read it).
        index: the partition's index within its file (from 0).
        start: first row (0-based, header excluded).
        stop: one past the last row.
        name: the part's file name in the output folder.
    """

    src: str
    index: int
    start: int
    stop: int
    name: str

    @property
    def rows(self) -> int:
        return self.stop - self.start


def part_name(src: Path, index: int) -> str:
    """``STEM-HASH-INDEX.parquet``: the stem made safe, 8 hex digits of the resolved path."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", src.stem)[:80] or "requests"
    digest = hashlib.sha1(str(src.resolve()).encode()).hexdigest()[:8]
    return f"{stem}-{digest}-{index:05d}.parquet"


def plan_parts(files: list[tuple[Path, int]], partition_rows: int) -> list[Part]:
    """The parts of ``(file, rows)`` pairs, each file cut into partitions of ``partition_rows``."""
    parts = []
    for src, rows in files:
        for index, start in enumerate(range(0, rows, partition_rows)):
            parts.append(Part(str(src.resolve()), index, start, min(start + partition_rows, rows), part_name(src, index)))
    return parts


def fingerprint(job: FileJob, files: list[tuple[Path, int]], partition_rows: int,
                chunk_rows: int) -> dict[str, Any]:
    """What a resumed run must share with the run it continues (JSON-ready), the columns the parts
    add among it: the parts of an llmco2 that added other columns are refused, not mixed."""
    from llmco2.api.chunks import OUTPUT_COLUMNS
    from llmco2.prediction.loading import checkpoint_path
    from llmco2.resumable_output import file_identity
    from llmco2.version import __version__

    options = job.fingerprint_options()
    return json.loads(json.dumps({
        "inputs": [{**file_identity(src), "rows": rows} for src, rows in files], "options": options,
        "checkpoint": file_identity(checkpoint_path(job.options.checkpoint)), "partition_rows": partition_rows,
        "chunk_rows": chunk_rows, "columns": list(OUTPUT_COLUMNS), "llmco2": __version__}, sort_keys=True))


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between two fingerprints, in a few words."""
    if old.get("inputs") != new.get("inputs"):
        before = {i["path"]: i for i in old.get("inputs", [])}
        after = {i["path"]: i for i in new.get("inputs", [])}
        changed = sorted(set(before) ^ set(after)) or sorted(p for p in after if before.get(p) != after[p])
        return f"input files ({Path(changed[0]).name}{' and others' if len(changed) > 1 else ''} added, removed or changed)"
    for key, words in (("options", "options"), ("checkpoint", "checkpoint"), ("partition_rows", "`partition_rows`"),
                       ("chunk_rows", "chunk size"), ("columns", "output columns (written by an earlier version)"),
                       ("llmco2", "llmco2 version")):
        if old.get(key) != new.get(key):
            if key == "options":
                keys = sorted(k for k in set(old[key]) | set(new[key]) if old[key].get(k) != new[key].get(k))
                return "options (" + ", ".join(f"`{k}`" for k in keys) + ")"
            return words
    return "settings"


def check_manifest(out: Path, fp: dict[str, Any]) -> bool:
    """Whether ``out`` holds the manifest of an earlier run of the same fingerprint (its complete
    parts are reused; False: a new or empty folder). A manifest of another run, or a folder holding
    anything else, is refused."""
    path = out / MANIFEST_NAME
    if path.exists():
        try:
            state = parse_json(path.read_text())
            old = state["fingerprint"]
            if state.get("version") != MANIFEST_VERSION or not isinstance(old, dict):
                raise ValueError("version")
        except (OSError, ValueError, KeyError, TypeError):
            raise InvalidInputError(f"cannot read {path} (not a manifest this version wrote); delete {out} or give another "
                                    "`out`", field="out") from None
        if old != fp:
            raise InvalidInputError(f"{out} holds the parts of a run with other {_difference(old, fp)}; delete the folder "
                                    "or give another `out` (parts are reused only for the same input and options)",
                                    field="out")
        return True
    others = [p.name for p in out.iterdir() if not p.name.startswith(".")] if out.exists() else []
    if others:
        raise InvalidInputError(f"{out} is not empty ({others[0]}{' and more' if len(others) > 1 else ''}) and holds no "
                                "llmco2 manifest; give a new or empty folder", field="out")
    return False


def write_manifest(out: Path, fp: dict[str, Any], parts: list[Part], finished: bool, totals: dict[str, int] | None = None) -> None:
    """Replace the manifest atomically."""
    state = {"version": MANIFEST_VERSION, "fingerprint": fp, "finished": finished, "totals": totals or {},
             "parts": [asdict(p) for p in parts]}
    tmp = out / f".{MANIFEST_NAME}.new"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, out / MANIFEST_NAME)


def remove_stray_temporaries(out: Path) -> None:
    """Hidden temporaries of parts whose worker was killed (``.NAME.parquet.TOKEN.tmp``)."""
    for stray in out.glob(".*.parquet.*.tmp"):
        stray.unlink(missing_ok=True)
        log.info("removed %s, left by a worker that was stopped", stray)


def discard(out: Path, parts: list[Part]) -> None:
    """Remove what this plan wrote in ``out`` (after bad input that a rerun cannot get past)."""
    for p in parts:
        (out / p.name).unlink(missing_ok=True)
    (out / MANIFEST_NAME).unlink(missing_ok=True)
    remove_stray_temporaries(out)


def predict_part(part: Part, out: str, job: FileJob, assume: dict[str, Any], keep: list[int],
                 chunk_rows: int) -> dict[str, int]:
    """Predict one partition and write its Parquet part (runs on a worker). Returns its ``rows``
    and ``written`` (0 when the part was already complete). Bad input raises
    :class:`~llmco2.errors.InvalidInputError` with the whole message (it crosses processes)."""
    import pyarrow.parquet as pq

    from llmco2.analytic.request_files import iter_request_chunks
    from llmco2.api.chunks import prediction_batch, rare_collections, reused_memory
    from llmco2.prediction.loading import load_predictor

    final = Path(out) / part.name
    if final.exists():
        return {"rows": part.rows, "written": 0}
    tmp = final.with_name(f".{part.name}.{uuid.uuid4().hex[:12]}.tmp")
    rows = 0
    writer = None
    try:
        predictor = load_predictor(job.options.checkpoint)
        regions = None
        if job.assumptions.carbon_intensity is None:  # a region column: each row at its own region
            from llmco2.carbon.region_rows import ChunkRegions

            regions = ChunkRegions(part.src, job.assumptions.region)
        with reused_memory(), rare_collections():  # as in a single-process run: no page-fault churn
            for chunk in iter_request_chunks(Path(part.src), defaults=job.options.row_defaults(), chunk_rows=chunk_rows, rows=(part.start, part.stop)):
                batch, _ = prediction_batch(chunk, keep, predictor, assume, regions)
                writer = writer or pq.ParquetWriter(str(tmp), batch.schema)  # created with the usual permissions
                writer.write_batch(batch)
                rows += batch.num_rows
        if writer is None or rows != part.rows:
            raise InvalidInputError(f"{part.src} changed while it was being predicted (rows {part.start:,}-{part.stop:,}); "
                                    "run the command again", field="requests")
        writer.close()
        writer = None
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        if not (Path(out) / MANIFEST_NAME).exists():  # the run stopped on bad input elsewhere and was discarded
            return {"rows": rows, "written": 0}
        os.replace(tmp, final)
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
    return {"rows": rows, "written": 1}
