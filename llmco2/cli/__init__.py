"""The ``llmco2`` command.

Bad input never produces a traceback: exit code 2 and one line on stderr saying what is wrong
and what would be right. Each command group lives in its own module with a ``register`` function.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from llmco2.cli import analyze, checkpoint, compare, data, measure, predict, report, sample, ui
from llmco2.cli.boundary import check_combinations, check_outputs_are_not_inputs, check_values
from llmco2.cli.common import EXIT_USAGE, Parser
from llmco2.cli.flags import as_command_line
from llmco2.errors import Interrupted, InvalidInputError
from llmco2.version import __version__

Handler = Callable[[argparse.Namespace], int]
#: Modules of the optional extras (``pip install 'llmco2[EXTRA]'``) -> the extra that brings them.
EXTRA_OF = {"torch": "train", "torch_geometric": "train", "hydra": "train", "omegaconf": "train", "sklearn": "train",
            "skops": "train", "pynvml": "measure", "transformers": "measure", "accelerate": "measure",
            "dask": "cluster", "distributed": "cluster", "matplotlib": "plots", "fastapi": "ui", "uvicorn": "ui",
            "starlette": "ui", "multipart": "ui", "python_multipart": "ui"}
COMMAND_MODULES = (analyze, data, sample, measure, predict, compare, report, checkpoint, ui)


def build_parser() -> tuple[argparse.ArgumentParser, dict[tuple[str, str | None], Handler]]:
    parser = Parser(prog="llmco2", description="Predict the energy and carbon of LLM inference requests.")
    parser.add_argument("--version", action="version", version=f"llmco2 {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    handlers: dict[tuple[str, str | None], Handler] = {}
    for module in COMMAND_MODULES:
        module.register(sub, handlers)
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    handler = handlers[(args.command, getattr(args, "what", None))]
    try:
        check_values(args)
        check_combinations(args)
        check_outputs_are_not_inputs(args)
        return handler(args)
    except Interrupted as exc:
        sys.stderr.write(f"llmco2: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt as exc:
        sys.stderr.write("llmco2: interrupted\n")
        return int(getattr(exc, "exit_code", 130))
    except InvalidInputError as exc:
        sys.stderr.write(f"llmco2: error: {as_command_line(exc)}\n")
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        sys.stderr.write(f"llmco2: error: {args.command} needs the {extra} extra ({exc.name} is not installed): "
                         f"pip install 'llmco2[{extra}]'\n")
        return EXIT_USAGE
    except FileNotFoundError as exc:
        sys.stderr.write(f"llmco2: error: no such file {exc.filename!r}\n")
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the file system refused (disk full, permissions changed while running)
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"llmco2: error: {where}{exc.strerror or exc}\n")
        return EXIT_USAGE


def entrypoint() -> NoReturn:
    raise SystemExit(main())
