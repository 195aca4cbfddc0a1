"""``llmco2 predict --requests GLOB_OR_DIR --out DIR --cluster local|ADDRESS``: request files on Dask.

The files (a folder's ``.csv``/``.csv.gz``/``.parquet`` files, a glob, or one file) are checked here first:
their headers, and their rows counted (which also refuses a malformed CSV with its line). Each file
is cut into partitions (:mod:`llmco2.api.cluster_parts`); every partition is predicted on a worker
by the same code as a single-process run (:func:`llmco2.api.files.prediction_batch`, on the
same chunks of the file), so the numbers are the same, and written as one Parquet part. Parts that
exist are skipped, so a run stopped at any point resumes; bad input removes what the run wrote.

``local`` starts a :class:`distributed.LocalCluster` of worker processes (``--workers``, default
``min(CPUs, 4)``); any other value is the address of a running Dask scheduler, whose workers must
see the input files and the output folder under the same paths (a shared file system).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

from llmco2.api.cluster_parts import PARTITION_ROWS, Part
from llmco2.api.options import FileJob
from llmco2.errors import Interrupted, InvalidInputError

log = logging.getLogger(__name__)

#: Seconds to wait for a scheduler given by address: its TCP connection and Dask's handshake together.
CONNECT_TIMEOUT_S = 5.0
#: Request file types read from a folder.
SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")
_GLOB = re.compile(r"[*?\[]")
_LOCK_NAME = ".llmco2.lock"


def names_many_files(requests: str) -> bool:
    """Whether ``--requests`` names a folder or a glob rather than one file."""
    return Path(requests).is_dir() or (not Path(requests).exists() and bool(_GLOB.search(requests)))


#: Peak memory of one local worker predicting its partitions (bytes): a single process peaks at 316-344 MB
#: on a million rows (``experiments/bench_predict.py``), rounded up.
WORKER_BYTES = 400e6
#: Share of the machine's memory the local workers may take together.
MEMORY_SHARE = 0.8


def machine_memory_bytes() -> float | None:
    """Physical memory of this machine (bytes), or ``None`` where the system does not say."""
    import os

    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_cluster_options(job: FileJob) -> None:
    """The options that go with a cluster (and those that need one)."""
    cluster, workers, partition_rows = job.cluster.address, job.cluster.workers, job.cluster.partition_rows
    if cluster is None:
        given = [f for f, v in (("workers", workers), ("partition_rows", partition_rows)) if v is not None]
        if given:
            raise InvalidInputError(f"{', '.join(f'`{g}`' for g in given)} only apply with `cluster` (local or a scheduler "
                                    "address)", field=given[0])
        if names_many_files(job.requests):
            what = "is a directory" if Path(job.requests).is_dir() else "is a glob"
            raise InvalidInputError(f"{job.requests!r} {what}; give one file, or predict many with `cluster='local'` (or "
                                    "a scheduler address) and `out` a folder", field="requests")
        return
    if job.on_error != "raise":
        raise InvalidInputError("rows are left out (`on_error='skip'`) by single-process runs only: predict each file "
                                "with `on_error='skip'` and no `cluster`", field="on_error")
    if job.assumptions.intensity is not None:
        raise InvalidInputError("hourly intensities are applied by single-process runs only: predict each file with "
                                "`intensity` and no `cluster`, or drop `intensity` to use the annual average of `region`",
                                field="intensity")
    if workers is not None and cluster != "local":
        raise InvalidInputError("only applies with `cluster='local'` (a running cluster has its own workers)", field="workers")
    if workers is not None and not 1 <= workers <= 1024:
        raise InvalidInputError(f"must be from 1 to 1,024, got {workers}", field="workers")
    if workers is not None:
        memory = machine_memory_bytes()
        most = max(1, int(memory * MEMORY_SHARE // WORKER_BYTES)) if memory else 1024
        if workers > most:
            raise InvalidInputError(f"{workers} local workers need about {workers * WORKER_BYTES / 1e9:,.0f} GB "
                                    f"({WORKER_BYTES / 1e6:.0f} MB each), more than this machine's {memory / 1e9:,.0f} GB "
                                    f"allows; use at most {most}", field="workers")
    if partition_rows is not None:
        from llmco2.analytic.request_files import CHUNK_ROWS

        n = partition_rows
        if not (n > 0 and n % CHUNK_ROWS == 0 and n <= 1 << 30):
            raise InvalidInputError(f"must be a multiple of {CHUNK_ROWS:,} (the chunk size, so that a part holds the "
                                    f"chunks of a single-process run), got {n:,}", field="partition_rows")
    if not job.out:
        raise InvalidInputError("`cluster` needs `out` FOLDER for the Parquet parts", field="out")
    out = Path(job.out)
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"cannot write parts in {out}: it is a file; with `cluster` give a folder", field="out")
    if not out.exists() and out.suffix.lower() in (".csv", ".gz", ".parquet", ".pq"):
        raise InvalidInputError(f"with `cluster`, `out` is a folder of Parquet parts, not a {out.suffix} file; give a "
                                f"folder name such as {out.with_name(out.name.split('.')[0] or 'parts')}", field="out")


def input_files(spec: str) -> list[Path]:
    """The request files ``--requests`` names: a folder's CSV and Parquet files, a glob's files, or
    one file (sorted, each once)."""
    from llmco2.file_checks import check_input_file

    p = Path(spec)
    if p.is_dir():
        found = [f for f in p.iterdir() if f.name.lower().endswith(SUFFIXES) and not f.name.startswith((".", "_"))]
        what = f"folder {spec!r} holds no .csv or .parquet files (nor .csv.gz)"
    elif not p.exists() and _GLOB.search(spec):
        import glob

        found = [Path(f) for f in glob.glob(spec)]
        what = f"no files match {spec!r}"
    else:
        return [check_input_file(p, "requests")]
    files = sorted({f.resolve(): f for f in found if f.is_file()}.values(), key=lambda f: str(f))
    if not files:
        raise InvalidInputError(f"{what}; give a folder of request files, a glob such as 'logs/*.csv' (quoted) or a file",
                                field="requests")
    return files


def _out_folder(spec: str, files: list[Path]) -> Path:
    from llmco2.file_checks import check_output_folder

    out = check_output_folder(spec)
    if any(f.resolve().parent == out.resolve() for f in files):
        raise InvalidInputError(f"{out} holds `requests` files; give another folder for the parts", field="out")
    return out


@contextmanager
def _locked(out: Path) -> Iterator[None]:
    """``out`` locked against a second run writing it (``flock`` on a hidden file)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield
        return
    fd = os.open(out / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InvalidInputError(f"another llmco2 run is writing {out}; wait for it or give another `out`",
                                    field="out") from None
        yield
    finally:
        os.close(fd)
        (out / _LOCK_NAME).unlink(missing_ok=True)


@contextmanager
def _workers_ignore_ctrl_c() -> Iterator[None]:
    """Processes started meanwhile ignore SIGINT (an ignored signal stays ignored in a child, and
    Python then installs no KeyboardInterrupt handler): Ctrl-C reaches the whole process group,
    and this process, not each worker, stops the run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def dask_client(cluster: str, workers: int | None, verbose: bool = False) -> Iterator[Any]:
    """A :class:`distributed.Client` of a new local cluster or of the scheduler at ``cluster``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise InvalidInputError("needs Dask: pip install 'llmco2[cluster]' (or pip install 'dask[distributed]')",
                                field="cluster") from None
    quiet = logging.WARNING if verbose else logging.CRITICAL  # a failed part is reported once, by the client
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(quiet)
    if cluster == "local":
        cpus = os.cpu_count() or 1
        n = workers or max(1, min(cpus, 4))
        # each worker's forward pass gets its share of the CPUs (else the threads of every worker contend)
        env = {"LLMCO2_THREADS": os.environ.get("LLMCO2_THREADS") or str(max(1, cpus // n))}
        with _workers_ignore_ctrl_c():
            local = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                 silence_logs=quiet, env=env)
        client = Client(local)
    else:
        local = None
        from llmco2.api.cluster_connect import check_scheduler_answers

        try:
            check_scheduler_answers(cluster, CONNECT_TIMEOUT_S)
            client = Client(cluster, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            raise InvalidInputError(f"cannot reach a Dask scheduler at {cluster!r} within {CONNECT_TIMEOUT_S:g} s ({reason}); "
                                    "give its address (tcp://HOST:8786) or 'local'", field="cluster") from None
    try:
        yield client
    finally:
        client.close()
        if local is not None:
            local.close()


def predict_cluster(job: FileJob) -> int:
    """Predict every request of the files ``job.requests`` names into Parquet parts in
    ``job.out`` on the Dask cluster ``job.cluster.address``; summary line on stderr."""
    from llmco2.interrupts import terminate_as_interrupt

    progress = {"rows": 0, "total": 0}
    try:
        with terminate_as_interrupt():
            return _predict_cluster(job, progress)
    except KeyboardInterrupt as exc:
        raise Interrupted(progress["rows"], progress["total"] or None, getattr(exc, "exit_code", 130),
                          resumable=progress["rows"] > 0) from None


def _file_setup(src: Path, job: FileJob, engine: str) -> tuple[int, list[int], dict]:
    """``(rows, kept input columns, assumptions)`` of one input file, as a single-process run has them."""
    from llmco2.analytic.request_files import request_header, request_rows
    from llmco2.api.chunks import file_gpus, kept_columns
    from llmco2.carbon.assumptions import resolve_assumptions

    header = request_header(src)
    rows = request_rows(src, header)
    if not rows:
        raise InvalidInputError(f"{src} has a header but no requests", field="requests")
    return rows, kept_columns(src, header), resolve_assumptions(file_gpus(src), **job.assumptions.annual(), engine=engine)


def _predict_cluster(job: FileJob, progress: dict[str, int]) -> int:
    from llmco2.analytic.request_files import CHUNK_ROWS
    from llmco2.api import cluster_parts as cp
    from llmco2.api.chunks import progress_bar
    from llmco2.prediction.loading import load_predictor
    from llmco2.specs import get_engine

    start = time.perf_counter()
    check_cluster_options(job)
    files = input_files(job.requests)
    assert job.out is not None  # checked above
    out = _out_folder(job.out, files)
    engine = get_engine(job.options.engine).id
    load_predictor(job.options.checkpoint)  # a bad checkpoint is refused before any worker starts
    partition_rows = job.cluster.partition_rows or PARTITION_ROWS
    chunk_rows = CHUNK_ROWS
    setup = {src: _file_setup(src, job, engine) for src in files}
    parts = cp.plan_parts([(src, s[0]) for src, s in setup.items()], partition_rows)
    fp = cp.fingerprint(job, [(src, s[0]) for src, s in setup.items()], partition_rows, chunk_rows)
    total = progress["total"] = sum(p.rows for p in parts)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with _locked(out), _discarded_on_bad_input(out, parts) as owned:
            resumed = owned["parts"] = cp.check_manifest(out, fp)
            cp.remove_stray_temporaries(out)
            todo = [p for p in parts if not (out / p.name).exists()]
            done_before = progress["rows"] = total - sum(p.rows for p in todo)
            if resumed and done_before:
                log.info("resuming %s: %d of %d parts complete", out, len(parts) - len(todo), len(parts))
            # the cluster is reached before anything is written
            with dask_client(job.cluster.address, job.cluster.workers, job.cluster.verbose) if todo else nullcontext() as client:
                if not resumed:
                    cp.write_manifest(out, fp, parts, finished=False)
                    owned["parts"] = True
                try:
                    with progress_bar(total if sys.stderr.isatty() else None) as advance:
                        advance(done_before)
                        if todo:
                            _run_parts(client, job, todo, out, setup, chunk_rows, progress, advance)
                except InvalidInputError:
                    (out / cp.MANIFEST_NAME).unlink(missing_ok=True)  # parts still running are not published
                    raise
            totals = _totals(out, parts)
            cp.write_manifest(out, fp, parts, finished=True, totals=totals)
    finally:
        if created:
            with suppress(OSError):
                out.rmdir()  # only when nothing was written
    seconds = time.perf_counter() - start
    new = total - done_before
    again = f"; {len(parts) - len(todo)} parts ({done_before:,} rows) were already complete" if done_before else ""
    sys.stderr.write(f"predicted {total:,} requests from {len(files)} file{'s' * (len(files) != 1)} in {seconds:.2f} s "
                     f"({new / seconds:,.0f}/s) -> {out}/ ({len(parts)} Parquet parts, {len(todo)} written now{again}); "
                     f"engine {engine} (rows without an engine column); {totals['extrapolated']:,} extrapolated\n")
    return 0


@contextmanager
def _discarded_on_bad_input(out: Path, parts: list[Part]) -> Iterator[dict[str, bool]]:
    """The parts in ``out`` are removed after bad input (a rerun cannot get past it), once the
    cluster is closed, when they belong to this run's plan (the caller sets ``parts`` in the dict
    yielded once the manifest is its own) and the manifest is gone (see :func:`_run_parts`)."""
    from llmco2.api import cluster_parts as cp

    owned = {"parts": False}
    try:
        yield owned
    except InvalidInputError:
        if owned["parts"] and not (out / cp.MANIFEST_NAME).exists():
            cp.discard(out, parts)
        raise


def _run_parts(client: Any, job: FileJob, todo: list[Part], out: Path, setup: dict[Path, tuple[int, list[int], dict]],
               chunk_rows: int, progress: dict[str, int], advance: Any) -> None:
    """Submit every part of ``todo`` to the cluster and wait for them, advancing the progress."""
    from distributed import as_completed

    from llmco2.api.cluster_parts import predict_part

    futures = []
    run = uuid.uuid4().hex[:8]  # keys unique to this run on a scheduler that outlives it
    by_src = {str(src.resolve()): s for src, s in setup.items()}
    for part in todo:
        _, keep, assume = by_src[part.src]
        futures.append(client.submit(predict_part, part, str(out.resolve()), job, assume, keep, chunk_rows,
                                     key=f"llmco2-{run}-{part.name}", pure=False, retries=0))
    try:
        for future in as_completed(futures):
            result = future.result()  # bad input in a part raises here
            progress["rows"] += result["rows"]
            advance(result["rows"])
    except BaseException:
        client.cancel(futures)
        raise


def _totals(out: Path, parts: list[Part]) -> dict[str, int]:
    """Rows and extrapolated rows over every part (read back from the parts)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = extrapolated = 0
    for p in parts:
        column = pq.read_table(out / p.name, columns=["extrapolated"]).column("extrapolated")
        rows += len(column)
        extrapolated += int(pc.sum(column).as_py() or 0)
    return {"rows": rows, "extrapolated": extrapolated}
