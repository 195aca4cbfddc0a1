"""Many requests from a file (``llmco2 predict --requests FILE --out FILE.csv``), streamed in chunks.

The file (CSV, gzip-compressed CSV or Parquet; the output is Parquet when ``--out`` ends in
``.parquet``, gzip-compressed CSV when it ends in ``.gz``, else CSV) is read, predicted and written
one chunk at a time (:data:`~llmco2.analytic.request_files.CHUNK_ROWS` rows), so memory does not
grow with the file. Each chunk is committed to a hidden partial file beside the output as soon as
it is written (:mod:`llmco2.resumable_output`); the output appears under its name only when every
row is written (a ``.csv.gz`` output is compressed from the partial CSV then, into a temporary file
renamed into place, so it resumes as a CSV does). Ctrl-C or SIGTERM stop the run with exit code
130 or 143; running the same command again resumes after the last committed chunk, and the final
file is the same, byte for byte, as an uninterrupted run's.
"""

from __future__ import annotations

import collections
import itertools
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from llmco2.analytic.request_parsing import Reject
from llmco2.api.chunks import (  # noqa: F401 - PREDICTION_COLUMNS and prediction_arrays are used from here too
    OUTPUT_COLUMNS,
    PREDICTION_COLUMNS,
    batch_totals,
    file_gpus,
    kept_columns,
    prediction_arrays,
    prediction_batch,
    progress_bar,
    rare_collections,
    reused_memory,
    totals_line,
    totals_record,
)
from llmco2.api.options import FileJob
from llmco2.api.output_files import OUTPUT_SUFFIXES, chunk_writer, output_conversion, write_rejects, write_totals
from llmco2.errors import Interrupted, InvalidInputError
from llmco2.file_checks import check_input_file, check_not_an_input, check_output_path
from llmco2.interrupts import terminate_as_interrupt

log = logging.getLogger(__name__)

#: Chunks of at least this many rows are predicted side by side, one per CPU (:func:`predicted_chunks`);
#: smaller ones, one after the other (each then spreads its own network over the CPUs).
SIDE_BY_SIDE_ROWS = 4096

def first_chunk_gpus_suffice(gpus: list[Any], rows: int, job: FileJob) -> bool:
    """Whether the first chunk's GPUs give the same assumptions as all of the file's GPUs.
    `resolve_assumptions` uses the GPUs only for the default PUE (``edge_device`` when every GPU
    is an edge module or SoC), so the rest of the file matters only when the first chunk is not
    the whole file, no numeric PUE is given and every GPU so far is an edge device."""
    from llmco2.carbon.assumptions import EDGE_FORM_FACTORS

    if rows < first_chunk_limit() or isinstance(job.assumptions.pue_value(), (int, float)):
        return True
    return bool(gpus) and any(g.form_factor not in EDGE_FORM_FACTORS for g in gpus)


def predicted_chunks(first: Any, chunks: Iterator[Any], keep: list[int], predictor: Any, assume: dict[str, Any],
                     hourly: Any, skip: int = 0) -> Iterator[tuple[Any, tuple[Any, Any] | None]]:
    """``(chunk, (record batch, footprint))`` of ``first`` and every chunk of ``chunks``, in file
    order (:func:`~llmco2.api.chunks.prediction_batch`); ``None`` in place of the prediction of the
    first ``skip`` chunks (committed by an interrupted run).

    With two or more CPUs (:func:`~llmco2.prediction.numpy_forward.forward_threads`) and more
    than one chunk of at least :data:`SIDE_BY_SIDE_ROWS` rows, that many threads predict chunks side by side, each on its own (the forward pass of a chunk runs in its
    thread), while the caller writes the finished ones: a few chunks are read ahead. Each chunk's
    numbers are the same either way. An error reading a chunk is raised after every chunk before
    it has been given out, as in the sequential run."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from llmco2.prediction.numpy_forward import forward_threads, one_thread

    workers = forward_threads()
    stream = itertools.chain([first], chunks)
    if workers < 2 or len(first.table) < max(first_chunk_limit(), SIDE_BY_SIDE_ROWS):  # one chunk, or small ones
        for index, chunk in enumerate(stream):
            yield chunk, None if index < skip else prediction_batch(chunk, keep, predictor, assume, hourly)
        return

    def alone(chunk: Any) -> tuple[tuple[Any, Any], dict[str, Any]]:
        own = private_assumptions(assume)
        with one_thread():
            return prediction_batch(chunk, keep, predictor, own, hourly), own

    pending: collections.deque[tuple[Any, Future[tuple[tuple[Any, Any], dict[str, Any]]] | None]] = collections.deque()

    def oldest() -> tuple[Any, tuple[Any, Any] | None]:
        chunk, future = pending.popleft()
        if future is None:
            return chunk, None
        predicted, own = future.result()
        merge_assumptions(assume, own)  # in file order, as one chunk after the other fills them
        return chunk, predicted

    pool = ThreadPoolExecutor(workers, thread_name_prefix="llmco2-chunk")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 2e-4))  # a thread back from NumPy waits less for the GIL
    try:
        for index in itertools.count():
            try:
                chunk = next(stream, None)
            except Exception:
                while pending:  # the chunks before the one that failed, then its error
                    yield oldest()
                raise
            if chunk is None:
                break
            pending.append((chunk, None if index < skip else pool.submit(alone, chunk)))
            while len(pending) > workers:
                yield oldest()
        while pending:
            yield oldest()
    finally:
        for _, future in pending:  # stopped early (an error, an interrupt): the rest is not predicted
            if future is not None:
                future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        sys.setswitchinterval(switch)


def private_assumptions(assume: dict[str, Any]) -> dict[str, Any]:
    """A copy of a run's assumptions for one chunk predicted beside others: what a prediction
    adds to them (the scope's ``platforms``, GPU id -> platform id) goes into a dict of its own."""
    own = dict(assume)
    if isinstance(assume.get("scope"), dict):
        own["scope"] = {k: v for k, v in assume["scope"].items() if k != "platforms"}
    return own


def merge_assumptions(assume: dict[str, Any], own: dict[str, Any]) -> None:
    """Add to ``assume`` what predicting one chunk added to its :func:`private_assumptions` ``own``."""
    platforms = (own.get("scope") or {}).get("platforms")
    if platforms is not None:
        assume["scope"].setdefault("platforms", {}).update(platforms)


def predict_file(job: FileJob) -> int:
    """Predict every request of ``job.requests`` into ``job.out`` (on a Dask cluster when
    ``job.cluster.address`` is set); summary lines on stderr, the totals beside the output.
    Ctrl-C or SIGTERM stop it with :class:`~llmco2.errors.Interrupted`, keeping the chunks
    committed so far for the next run of the same job."""
    from llmco2.api.cluster import check_cluster_options

    check_cluster_options(job)
    if job.cluster.address:
        from llmco2.api.cluster import predict_cluster

        return predict_cluster(job)
    progress = {"rows": 0}
    try:
        with reused_memory(), terminate_as_interrupt():
            return _predict_file(job, progress)
    except KeyboardInterrupt as exc:
        from llmco2.analytic.request_files import count_rows

        src = Path(job.requests)
        total = count_rows(src) if src.is_file() else None
        raise Interrupted(progress["rows"], total, getattr(exc, "exit_code", 130), resumable=progress["rows"] > 0) from None


def _fingerprint(job: FileJob, src: Path, parquet_out: bool) -> dict[str, Any]:
    """What a resumed run must share with the run it continues: input file, checkpoint, every
    option, chunk size, output format, the columns added and version (a partial output of an
    llmco2 that added other columns is not resumed: it is removed, with a warning, and the run
    starts afresh)."""
    from llmco2.analytic.request_files import CHUNK_ROWS
    from llmco2.prediction.loading import checkpoint_path
    from llmco2.resumable_output import file_identity
    from llmco2.version import __version__

    options = job.fingerprint_options()
    return {"input": file_identity(src), "checkpoint": file_identity(checkpoint_path(job.options.checkpoint)), "options": options,
            "chunk_rows": CHUNK_ROWS, "parquet": parquet_out, "columns": list(OUTPUT_COLUMNS), "llmco2": __version__}


def read_inputs(job: FileJob) -> dict[str, str | Path]:
    """The files besides the requests that a file job reads (parameter name -> path): its checkpoint
    and its hourly intensity file, or the bundled dataset named instead of one."""
    from llmco2.carbon.hourly_datasets import find_dataset

    inputs: dict[str, str | Path] = {}
    if isinstance(job.options.checkpoint, str) and Path(job.options.checkpoint).exists():
        inputs["checkpoint"] = job.options.checkpoint
    intensity = job.assumptions.intensity
    if isinstance(intensity, str | Path):
        if Path(intensity).exists():
            inputs["intensity"] = intensity
        elif (dataset := find_dataset(str(intensity))) is not None:
            inputs["intensity"] = dataset.path()
    return inputs


def _predict_file(job: FileJob, progress: dict[str, int]) -> int:
    from llmco2.analytic.compressed import is_gzip_output
    from llmco2.analytic.request_files import count_rows, iter_request_chunks
    from llmco2.carbon.assumptions import resolve_assumptions
    from llmco2.prediction.inference import load_inference  # noqa: F401 - the model code is start-up, not prediction
    from llmco2.prediction.loading import load_predictor
    from llmco2.resumable_output import ResumableOutput
    from llmco2.specs import get_engine

    if not job.out:
        raise InvalidInputError("`requests` needs `out='FILE.csv'` for the predictions", field="out")
    src = check_input_file(job.requests, "requests")
    out = check_output_path(job.out, "out")
    if is_gzip_output(out) and Path(out.stem).suffix.lower() in (".parquet", ".pq"):
        raise InvalidInputError(f"cannot write {out}: Parquet compresses its own columns; give "
                                f"`out={str(out.with_suffix(''))!r}` (or FILE.csv.gz for compressed CSV)", field="out")
    if out.resolve() == src.resolve():
        raise InvalidInputError(f"cannot write {out}: it is the `requests` file; give another `out`", field="out")
    for written in (out, Path(f"{out}.totals.json"), Path(f"{out}.rejects.csv")):
        check_not_an_input(written, read_inputs(job), "out")
    kind = Path(out.stem).suffix.lower() if is_gzip_output(out) else out.suffix.lower()
    if kind not in OUTPUT_SUFFIXES:
        raise InvalidInputError(f"cannot write {out}: unknown file type {kind or '(none)'!r}; give FILE.csv, FILE.csv.gz "
                                "or FILE.parquet (the suffix decides the format)", field="out")
    engine = get_engine(job.options.engine).id
    start = time.perf_counter()
    predictor = load_predictor(job.options.checkpoint)
    rejects: list[Reject] | None = [] if job.on_error == "skip" else None
    chunks = iter_request_chunks(src, defaults=job.options.row_defaults(), rejects=rejects)
    first = next(chunks, None)  # header and first rows checked before anything is written
    if first is None:
        why = f" (the first: line {rejects[0].line}: {rejects[0].reason})" if rejects else ""
        raise InvalidInputError(f"every row of {src} was left out{why}", field="requests")
    keep = kept_columns(src, first.header)
    gpus = first.table.gpus if first_chunk_gpus_suffice(first.table.gpus, len(first.table), job) else file_gpus(src)
    assume = resolve_assumptions(gpus, **job.assumptions.annual(), engine=engine)
    hourly = None
    if job.assumptions.intensity is not None:  # every row's hour checked before anything is written
        from llmco2.carbon.hourly_files import request_file_hours

        hourly = request_file_hours(src, job.assumptions.intensity, job.assumptions.region)
        assume["grid"] = hourly.grid
    elif job.assumptions.carbon_intensity is None:  # a region column: each row at its own region
        from llmco2.carbon.region_rows import request_file_regions

        hourly = request_file_regions(src, list(first.header), job.assumptions.region)
        if hourly is not None:
            assume["grid"] = hourly.grid
    total = count_rows(src) if sys.stderr.isatty() else None
    parquet_out = out.suffix.lower() in (".parquet", ".pq")
    output = ResumableOutput(out, _fingerprint(job, src, parquet_out)).open()
    resumed = progress["rows"] = output.rows
    try:
        with progress_bar(total) as advance, rare_collections():
            skip, seen = output.chunks, 0
            for index, (chunk, predicted) in enumerate(predicted_chunks(first, chunks, keep, predictor, assume, hourly, skip)):
                seen = index + 1
                if predicted is None:  # committed by an earlier, interrupted run
                    advance(len(chunk.table))
                    continue
                batch, fp = predicted
                write = chunk_writer(batch, index == 0, parquet_out)
                output.commit(len(chunk.table), write, {"extrapolated": int(np.count_nonzero(fp.extrapolated)), **batch_totals(fp)})
                progress["rows"] = output.rows
                advance(len(chunk.table))
            if seen < skip:
                raise InvalidInputError(f"{src} has fewer rows than the interrupted run committed; delete "
                                        f"{output.manifest_path} to start afresh", field="requests")
        output.finish(output_conversion(out))
    except KeyboardInterrupt:
        output.keep()
        raise
    except BaseException:
        output.discard()
        raise
    n, extrapolated = output.rows, output.counts.get("extrapolated", 0)
    seconds = time.perf_counter() - start
    g = assume["grid"]
    again = f" ({resumed:,} of them by the interrupted run)" if resumed else ""
    sys.stderr.write(f"predicted {n:,} requests{again} in {seconds:.2f} s ({(n - resumed) / seconds:,.0f}/s) -> {out}; engine "
                     f"{engine} (rows without an engine column), grid {g['g_co2eq_per_kwh']:g} g/kWh "
                     f"({g['region'] or 'user value'}), PUE {assume['pue']['value']:g}; {extrapolated:,} extrapolated\n")
    totals = totals_record(output.counts, n, job.assumptions.scope)
    if rejects is not None:
        totals["rejected_rows"] = len(rejects)
        if rejects:
            sys.stderr.write(f"left out {len(rejects):,} rows that failed their checks (lines and reasons: "
                             f"{write_rejects(out, rejects)})\n")
    sys.stderr.write(totals_line(totals) + f" -> {write_totals(out, totals, assume)}\n")
    return 0


def first_chunk_limit() -> int:
    """A first chunk shorter than this is the whole file (its GPUs are all the file's GPUs)."""
    from llmco2.analytic.request_files import CHUNK_ROWS

    return CHUNK_ROWS

