"""The analytic work of every request of a file (``llmco2 analyze batch --requests FILE --out OUT``).

The output is written as ``predict --requests`` writes its own, by the same code: every input
column with its own type (an Arrow schema in, the same schema out; a CSV input's cells as text),
then :data:`~llmco2.analytic.batch.ANALYSIS_COLUMNS`; CSV stays CSV and Parquet stays Parquet, the
output's suffix decides (:func:`~llmco2.api.output_files.chunk_writer`). The file is read, analysed and
written one chunk at a time; the output appears under its name only when every row is written, and
a run that fails or is interrupted leaves nothing behind.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from llmco2.analytic.request_parsing import RowDefaults
from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)


def analysis_batch(chunk: Any, keep: list[int]) -> Any:
    """One chunk of a request file (a :class:`~llmco2.analytic.request_files.RequestChunk`) as the
    Arrow record batch written for it: its ``keep`` input columns, as the file types them, then the
    analysis of each row (:func:`~llmco2.analytic.batch.analysis_columns`)."""
    import pyarrow as pa

    from llmco2.analytic.arrow_arrays import arrow_array
    from llmco2.analytic.batch import analysis_columns

    added = analysis_columns(chunk.table.layer_batch())
    inputs = [chunk.written.column(i) for i in keep]
    names = [chunk.header[i] for i in keep]
    return pa.RecordBatch.from_arrays([*inputs, *(arrow_array(v) for v in added.values())], names=[*names, *added])


def analyze_file(requests: str | Path, out: str | Path, defaults: RowDefaults | None = None) -> int:
    """Write the analysis of every request of ``requests`` (CSV, gzip-compressed CSV or Parquet) to
    ``out`` (``.csv`` or ``.parquet``): the input's columns and their types, then the analysis
    columns (an input column named like one of these, from an earlier output, is replaced). Returns
    the number of rows written. ``defaults``: what a row takes where the file has no column."""
    from llmco2.analytic.batch import ANALYSIS_COLUMNS
    from llmco2.analytic.request_files import CHUNK_ROWS, iter_request_chunks
    from llmco2.api.chunks import replaced_columns
    from llmco2.api.output_files import chunk_writer, output_conversion
    from llmco2.file_checks import check_input_file, check_output_path
    from llmco2.resumable_output import ResumableOutput, file_identity
    from llmco2.version import __version__

    src = check_input_file(requests, "requests")
    target = check_output_path(out, "out", (".csv", ".parquet"))
    if target.resolve() == src.resolve():
        raise InvalidInputError(f"cannot write {target}: it is the `requests` file; give another `out`", field="out")
    defaults = defaults or RowDefaults()
    chunks = iter_request_chunks(src, defaults)
    first = next(chunks)  # header and first rows checked before anything is written
    keep = replaced_columns(src, first.header, ANALYSIS_COLUMNS, "analysis columns", "the new analysis")
    parquet = target.suffix.lower() == ".parquet"
    fingerprint = {"command": "analyze batch", "input": file_identity(src), "options": asdict(defaults),
                   "chunk_rows": CHUNK_ROWS, "parquet": parquet, "columns": list(ANALYSIS_COLUMNS), "llmco2": __version__}
    output = ResumableOutput(target, fingerprint).open()
    try:
        for index, chunk in enumerate(itertools.chain([first], chunks)):
            if index < output.chunks:  # committed by a run that was killed
                continue
            output.commit(len(chunk.table), chunk_writer(analysis_batch(chunk, keep), index == 0, parquet))
        output.finish(output_conversion(target))
    except BaseException:
        output.discard()
        raise
    log.info("analysed %d requests of %s into %s", output.rows, src, target)
    return output.rows
