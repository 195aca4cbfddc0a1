"""Where a sweep's results go, one finished configuration at a time.

Three files beside each other (``NAME`` = the output file without ``.csv``):

* ``NAME.csv`` — the canonical energy table (:mod:`llmco2.data.schema`), one row per measured
  (configuration, phase), appended with the header written once, flushed and fsync'ed;
* ``NAME.runs.jsonl`` — the run log: one JSON line per finished configuration, written *after* its
  rows: its key, the CSV size once its rows were in, the rows' line numbers, and everything the
  canonical table has no column for (standard deviations of latency, energy above idle, clocks,
  temperatures, software versions, driver, GPU names, idle power). A configuration counts as done
  only once its line is in the log; rows appended after the last logged size (an append that a
  crash cut short) are truncated away on resume;
* ``NAME.failed.csv`` — configurations that failed: key, reason, time (UTC).

A configuration is identified by a stable key of its columns (:func:`config_key`), independent of
how the configuration file spells numbers or ids.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from llmco2.analytic.batch import ARCH_COLUMNS
from llmco2.data.schema import COLUMN_NAMES, validate
from llmco2.errors import InvalidInputError
from llmco2.file_checks import parse_json
from llmco2.measure.results import RunResult
from llmco2.specs import DTYPE_BITS, GPU, ModelArch, Request, get_gpu, model_catalog

log = logging.getLogger(__name__)

SOURCE = "llmco2"
#: The columns that identify a configuration, in key order.
KEY_FIELDS = ("model", "gpu", "num_gpus", "tensor_parallel", "batch_size", "prompt_tokens", "generated_tokens", "dtype",
              "flash_attention", *ARCH_COLUMNS, "engine")
FAILED_COLUMNS = ("key", "reason", "time")
HEADER = ",".join(COLUMN_NAMES)


def config_fields(arch: ModelArch, request: Request, gpu: GPU, engine: str = "hf") -> dict[str, Any]:
    """The identifying columns of a configuration (as parsed, so ``"2.0"`` and ``"2"`` agree);
    ``engine`` is ``hf`` (eager decode) or ``hf-static`` (static cache + compiled decode)."""
    return {
        "model": arch.id, "gpu": gpu.id, "num_gpus": request.num_gpus, "tensor_parallel": request.tensor_parallel,
        "batch_size": request.batch_size, "prompt_tokens": request.prompt_tokens, "generated_tokens": request.generated_tokens,
        "dtype": request.weight_dtype, "flash_attention": int(request.flash_attention),
        **{c: getattr(arch, c) for c in ARCH_COLUMNS}, "engine": engine,
    }


def config_key(fields: Mapping[str, Any]) -> str:
    """``model=...|gpu=...|...``: a readable, stable key of a configuration's columns."""
    return "|".join(f"{k}={fields[k]}" for k in KEY_FIELDS)


def canonical_rows(result: RunResult, arch: ModelArch, request: Request, device: str, *, source_file: str,
                   first_line: int, flag_bound: float = 0.02) -> list[dict[str, Any]]:
    """Rows of the canonical table for a run: one per phase (prefill, then decode if any).

    ``first_line`` is the line of the output file the first row lands on (``source_row``).
    Several GPUs run as a layer-wise split, so ``tensor_parallel`` is 1 and ``pipeline_parallel``
    the GPU count. ``flag`` notes random weights, architecture approximations and, per phase,
    ``counter_quantised`` when the quantisation bound exceeds ``flag_bound``. The engine,
    attention implementation, clocks, power limit, idle power and window columns are filled.
    """
    from llmco2.measure.windows import QUANTISED_FLAG

    flags = []
    if result.weights == "random":
        flags.append("random_weights")
    if result.notes:
        flags.append("approximate_architecture")
    bits = DTYPE_BITS[request.weight_dtype]
    base = {
        "source": SOURCE, "source_file": source_file, "device": device, "num_devices": request.num_gpus,
        "tensor_parallel": 1, "pipeline_parallel": request.num_gpus, "engine": result.engine, "model": arch.id,
        "hidden_size": arch.hidden_size, "intermediate_size": arch.intermediate_size, "num_layers": arch.num_layers,
        "num_heads": arch.num_heads, "num_kv_heads": arch.num_kv_heads, "vocab_size": arch.vocab_size,
        "activation": arch.activation, "mlp_gated": arch.mlp_gated, "num_experts": arch.num_experts,
        "experts_per_token": arch.experts_per_token, "weight_bits": bits, "kv_bits": bits,
        "flash_attention": request.flash_attention, "kv_cache": True, "batch_size": request.batch_size,
        "prompt_tokens": request.prompt_tokens, "generated_tokens": request.generated_tokens, "level": "request",
        "attention": result.attention, "power_limit_w": result.power_limit_w, "idle_power_w": result.idle_power_w,
    }
    rows = []
    for i, phase in enumerate(result.phases):
        bound = phase.quantisation_bound
        quantised = bound is not None and bound > flag_bound
        rows.append(base | {"source_row": first_line + i, "phase": phase.phase, "energy_j": phase.energy_j,
                            "energy_std_j": phase.energy_std_j, "latency_s": phase.latency_s, "repeats": phase.repeats,
                            "measurement": phase.method, "flag": ";".join(flags + [QUANTISED_FLAG] * quantised) or None,
                            "sm_clock_mhz": phase.sm_clock_mhz, "mem_clock_mhz": phase.mem_clock_mhz,
                            "window_method": phase.window_method, "window_passes": phase.window_passes, "window_s": phase.window_s,
                            "quantisation_bound": None if bound is None else min(bound, 1e9)})
    return rows


def check_rows(rows: Sequence[Mapping[str, Any]], origin: str) -> pd.DataFrame:
    """The rows as a validated canonical table (`InvalidInputError` on any bad value)."""
    frame = pd.DataFrame(list(rows))
    for device in frame["device"].unique():
        get_gpu(str(device))  # the device is always a catalog id
    catalog = model_catalog()
    check_catalog = all(str(m) in catalog for m in frame["model"])  # a model may come from a config.json
    typed, _ = validate(frame, on_error="raise", origin=origin, check_catalog=check_catalog)
    return typed


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _append_line(path: Path, text: str) -> None:
    new = not path.exists()
    with path.open("a", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if new:
        _fsync_dir(path.parent)


def one_line(reason: str, limit: int = 500) -> str:
    """A reason on one line, at most ``limit`` characters."""
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class ResultStore:
    """The output table, its run log and its failure file; :meth:`open` resumes an earlier sweep."""

    out: Path
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    rows_written: int = 0
    readonly: bool = False

    @property
    def runs_path(self) -> Path:
        return self.out.with_name(self.out.stem + ".runs.jsonl")

    @property
    def failed_path(self) -> Path:
        return self.out.with_name(self.out.stem + ".failed.csv")

    @classmethod
    def open(cls, out: str | Path, readonly: bool = False) -> ResultStore:
        """Check the files of an earlier run of the same sweep (if any) and load what is done.

        Unless ``readonly`` (a dry run), the files are repaired after a crash: an unfinished last
        log line and rows of an unfinished configuration are cut off.
        """
        path = Path(out)
        if path.suffix.lower() != ".csv":
            raise InvalidInputError(f"{path}: measurements are appended to a .csv file", field="out")
        if not path.parent.is_dir():
            raise InvalidInputError(f"folder {str(path.parent)!r} does not exist", field="out")
        store = cls(path, readonly=readonly)
        store._load_runs()
        store._load_failed()
        return store

    def _load_runs(self) -> None:
        out, runs = self.out, self.runs_path
        size = out.stat().st_size if out.exists() else 0
        if size:
            with out.open("r", encoding="utf-8", newline="") as fh:
                header = fh.readline().rstrip("\r\n")
            if header != HEADER:
                raise InvalidInputError(f"{out} does not start with the canonical header; it was not written by llmco2 measure "
                                        f"(choose another `out`)", field="out")
        records: list[dict[str, Any]] = []
        if runs.exists():
            raw = runs.read_bytes()
            complete = raw[: raw.rfind(b"\n") + 1]
            if len(complete) < len(raw) and not self.readonly:
                log.warning("%s: dropping an unfinished last line", runs)
                with runs.open("r+b") as fh:
                    fh.truncate(len(complete))
            for n, line in enumerate(complete.decode("utf-8").splitlines(), start=1):
                if line.strip():
                    try:
                        records.append(parse_json(line))
                    except ValueError:  # not JSON, or nested absurdly deep
                        raise InvalidInputError(f"{runs}, line {n}: not valid JSON; the run log is damaged", field="out") from None
        if not records:
            data_lines = out.read_bytes().count(b"\n") - 1 if size else 0
            if data_lines > 0 and not runs.exists():
                raise InvalidInputError(f"{out} holds rows but has no run log {runs.name}, so the finished configurations are "
                                        f"unknown; restore the log or choose another `out`", field="out")
            if self.readonly:
                return
            if size:  # only a header, or the first append cut short: start afresh
                log.warning("%s: no configuration finished; starting the file afresh", out)
                with out.open("r+b") as fh:
                    fh.truncate(0)
            runs.touch()  # marks the output as ours from the first append on
            return
        committed = max(int(r["csv_bytes"]) for r in records)
        if size < committed:
            raise InvalidInputError(f"{out} is shorter ({size} bytes) than its run log says ({committed} bytes); was it edited? "
                                    f"choose another `out`", field="out")
        if size > committed and not self.readonly:
            log.warning("%s: removing %d bytes of rows whose configuration did not finish", out, size - committed)
            with out.open("r+b") as fh:
                fh.truncate(committed)
                fh.flush()
                os.fsync(fh.fileno())
        for r in records:
            self.done[str(r["key"])] = r
        self.rows_written = sum(len(r.get("rows", ())) for r in records)

    def _load_failed(self) -> None:
        if not self.failed_path.exists():
            return
        with self.failed_path.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row.get("key"):
                    self.failed[row["key"]] = row.get("reason") or ""

    @property
    def next_line(self) -> int:
        """Line of the output file the next row lands on (line 1 is the header)."""
        return 2 + self.rows_written

    def append(self, key: str, table: pd.DataFrame, record: Mapping[str, Any]) -> None:
        """Append the rows of one finished configuration, then log it as done (both fsync'ed)."""
        if self.readonly:
            raise RuntimeError("the store was opened read-only")
        if key in self.done:
            raise InvalidInputError(f"configuration {key} is already in {self.out}", field="out")
        new = not self.out.exists() or self.out.stat().st_size == 0
        with self.out.open("a", encoding="utf-8", newline="") as fh:
            if new:
                fh.write(HEADER + "\n")
            table.to_csv(fh, header=False, index=False, lineterminator="\n")
            fh.flush()
            os.fsync(fh.fileno())
            size = fh.tell()
        if new:
            _fsync_dir(self.out.parent)
        first = self.next_line
        entry = {"key": key, "csv_bytes": size, "rows": list(range(first, first + len(table))), **record}
        _append_line(self.runs_path, json.dumps(entry, default=str) + "\n")
        self.done[key] = entry
        self.rows_written += len(table)
        self.failed.pop(key, None)

    def record_failure(self, key: str, reason: str, when: dt.datetime | None = None) -> None:
        """Log a failed configuration (key, one-line reason, UTC time) to the failure file."""
        when = when or dt.datetime.now(dt.UTC)
        new = not self.failed_path.exists()
        with self.failed_path.open("a", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            if new:
                writer.writerow(FAILED_COLUMNS)
            writer.writerow([key, one_line(reason), when.isoformat(timespec="seconds")])
            fh.flush()
            os.fsync(fh.fileno())
        self.failed[key] = one_line(reason)


def failed_rows(path: str | Path) -> Iterable[dict[str, str]]:
    """The rows of a failure file (key, reason, time)."""
    with Path(path).open(newline="", encoding="utf-8") as fh:
        yield from csv.DictReader(fh)
