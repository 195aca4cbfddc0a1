"""Checks at the command-line boundary, run before any work starts.

* every option: no empty text (``--region ""`` is refused, not read as the default), no NaN or
  infinite number, no integer beyond 2**53;
* options that a command would ignore or that contradict each other are refused
  (:data:`IGNORED_WITH_REQUESTS`, ``--out`` on a single request);
* input files: missing, a directory or not a regular file (``/dev/zero``) are named as such;
* output paths: ``cannot write PATH: reason`` (a directory, a file used as a folder, a folder that
  does not exist or cannot be written) before anything is computed;
* no output may overwrite an input: an output option (:data:`OUTPUT_OPTIONS`) that names the same
  file as any other option's existing file or folder (requests, checkpoint, config.json, hourly
  intensity file, import source, ...) is refused before anything is read or written.

Every failure is an :class:`~llmco2.errors.InvalidInputError`: exit code 2 and one line.
"""

from __future__ import annotations

import argparse
import logging
import math

from llmco2.carbon.hourly_datasets import find_dataset
from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_input_file, check_not_an_input, check_output_path
from llmco2.specs.limits import MAX_EXACT_INT

__all__ = ["check_combinations", "check_input_file", "check_output_path", "check_outputs_are_not_inputs", "check_values"]

log = logging.getLogger(__name__)

#: Destinations that are not options (the sub-command names).
_NOT_OPTIONS = ("command", "what")
#: ``predict`` options that describe one request; with ``--requests`` the file's columns do.
IGNORED_WITH_REQUESTS = {"model": None, "gpu": None, "gpus": None, "tp": None, "batch_size": None, "prompt_tokens": None,
                         "gen_tokens": None, "json": False, "serving": False, "concurrency": None, "rate": None,
                         "timestamp": None}


#: Options that name files or folders a command writes.
OUTPUT_OPTIONS = ("out", "csv")


#: ``predict`` options of the serving simulation, and their defaults: without ``--serving`` they would be ignored.
SERVING_ONLY = {"concurrency": None, "rate": None, "background": "conv", "serving_requests": 2000, "max_batch": 256,
                "max_batched_tokens": 8192, "chunked_prefill": True, "seed": 0, "no_calibration": False, "dp": 1}
#: ``predict`` options of the isolated-request analysis that the serving simulation does not take.
IGNORED_WITH_SERVING = {"causal": False, "flash_attention": True, "act_dtype": None, "kv_dtype": None, "on_error": "raise"}


def option_name(dest: str) -> str:
    """``--batch-size`` for the destination ``batch_size``."""
    return "--" + dest.replace("_", "-")


def check_values(args: argparse.Namespace) -> None:
    """No empty text, non-finite number or integer beyond 2**53 in any option."""
    for dest, value in vars(args).items():
        if dest in _NOT_OPTIONS or value is None or isinstance(value, bool):
            continue
        name = option_name(dest)
        if isinstance(value, str) and not value.strip():
            raise InvalidInputError("is empty; give a value or leave the option out for its default", field=name)
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInputError(f"must be a finite number, got {value}", field=name)
        if isinstance(value, int) and abs(value) > MAX_EXACT_INT:
            raise InvalidInputError(f"{value} is out of range (at most {MAX_EXACT_INT:,} in size)", field=name)


def check_combinations(args: argparse.Namespace) -> None:
    """Options that the command would ignore, or that contradict each other."""
    if args.command == "predict":
        if getattr(args, "requests", None):
            given = [option_name(d) for d, default in IGNORED_WITH_REQUESTS.items() if getattr(args, d, default) != default]
            if given:
                raise InvalidInputError(f"{', '.join(given)} apply to a single request, not to --requests FILE (its columns "
                                        "give each request); leave them out", field="--requests")
        elif any(getattr(args, d, None) is not None for d in ("cluster", "workers", "partition_rows")):
            given = [option_name(d) for d in ("cluster", "workers", "partition_rows") if getattr(args, d, None) is not None]
            raise InvalidInputError(f"{', '.join(given)} only apply with --requests GLOB_OR_DIR --out FOLDER",
                                    field=given[0])
        elif getattr(args, "out", None) is not None:
            raise InvalidInputError("only applies with --requests FILE; a single request prints its prediction "
                                    "(--json for a machine-readable copy)", field="--out")
        _check_serving_options(args)


def check_outputs_are_not_inputs(args: argparse.Namespace) -> None:
    """No output option names an input: every other option whose text is an existing file or folder
    is read by the command (``--requests``, ``--checkpoint``, ``--model config.json``,
    ``--intensity-file``, the source of ``data import``, ``--configs`` ...)."""
    import os

    inputs = {}
    for dest, value in vars(args).items():
        if dest in _NOT_OPTIONS or dest in OUTPUT_OPTIONS or not isinstance(value, str) or not value:
            continue
        if os.path.exists(value):
            inputs[option_name(dest) if dest != "path" else "source"] = value
        elif dest == "intensity_file" and (dataset := find_dataset(value)) is not None:
            inputs[option_name(dest)] = str(dataset.path())  # a bundled dataset named instead of a path
    for dest in OUTPUT_OPTIONS:
        out = getattr(args, dest, None)
        if isinstance(out, str) and out:
            field = option_name(dest) if dest != "out" or args.command not in ("data", "report") else "-o/--out"
            check_not_an_input(out, inputs, field)
            if args.command == "predict" and dest == "out" and getattr(args, "requests", None):
                check_not_an_input(out + ".totals.json", inputs, field)  # the totals written beside the output
                check_not_an_input(out + ".rejects.csv", inputs, field)  # the rows left out by --on-error skip


def _check_serving_options(args: argparse.Namespace) -> None:
    """Serving options without ``--serving``, and isolated-request options with it, would be ignored."""
    if getattr(args, "requests", None):
        return  # IGNORED_WITH_REQUESTS has spoken
    if not getattr(args, "serving", False):
        given = [option_name(d) for d, default in SERVING_ONLY.items() if getattr(args, d, default) != default]
        if given:
            verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
            raise InvalidInputError(f"{', '.join(given)} only {verb} with --serving (a request inside a loaded server); "
                                    f"add --serving or leave {them} out", field=given[0])
        return
    given = [option_name(d) for d, default in IGNORED_WITH_SERVING.items() if getattr(args, d, default) != default]
    if given:
        verb, them = ("does", "it") if len(given) == 1 else ("do", "them")
        raise InvalidInputError(f"{', '.join(given)} {verb} not apply with --serving (the server's kernels are the engine's); "
                                f"leave {them} out", field=given[0])
    if getattr(args, "no_calibration", False) and not getattr(args, "checkpoint", None):
        raise InvalidInputError("--no-calibration only applies with --serving --checkpoint (the calibration is that of a "
                                "learned cost model)", field="--no-calibration")
