"""Ctrl-C and SIGTERM stop a long run the same way, in every front door (the command line, the
Hydra apps, the API's file runs).

:func:`terminate_as_interrupt` turns SIGTERM into :class:`~llmco2.errors.Terminated`, a
``KeyboardInterrupt``, so that one ``except KeyboardInterrupt`` (or ``finally``) cleans up after
both; :func:`exit_code` is the status a run stopped by either ends with: 130 (SIGINT), 143 (SIGTERM).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmco2.errors import Terminated

#: Exit status of a run stopped by Ctrl-C (SIGINT), as a shell reports it (128 + 2).
EXIT_SIGINT = 130
#: Exit status of a run stopped by SIGTERM (128 + 15).
EXIT_SIGTERM = 143


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`~llmco2.errors.Terminated` (a ``KeyboardInterrupt``) while this runs.
    Outside the main thread (where no signal handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_code(interrupt: BaseException) -> int:
    """The exit status of a run stopped by ``interrupt``: 143 for SIGTERM, else 130."""
    return int(getattr(interrupt, "exit_code", EXIT_SIGINT))
