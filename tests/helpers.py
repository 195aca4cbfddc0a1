"""Helpers shared by the tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def interrupted_on_call(real: Callable[..., Any], n: int) -> Callable[..., Any]:
    """``real``, except that its ``n``-th call raises KeyboardInterrupt (Ctrl-C in the middle of a run)."""
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return wrapper
