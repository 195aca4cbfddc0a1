"""Helpers shared by the tests."""

from __future__ import annotations

import pytest

from llmco2.cli import main


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``llmco2 ARGS``; the exit code (argparse usage errors included), stdout and stderr."""
    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
