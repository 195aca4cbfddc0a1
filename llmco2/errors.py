"""Typed errors shared by every stage.

`InvalidInputError` is what a user caused (bad field, unknown id, missing file): the command line
turns it into exit code 2 and one line. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class LLMCO2Error(Exception):
    """Base class of every error llmco2 raises on purpose."""


class InvalidInputError(LLMCO2Error, ValueError):
    """A value given by the user is wrong; the message says what would be right.

    Attributes:
        field: name of the offending field or option (e.g. ``"num_heads"``), when there is one.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:  # the field survives pickling (Dask workers)
        return (type(self), (str(self.args[0]) if self.args else "", self.field))

    def __str__(self) -> str:  # one line, always
        text = super().__str__().replace("\n", " ")
        return f"{self.field}: {text}" if self.field and not text.startswith(self.field) else text


class UnknownIdError(InvalidInputError):
    """An id (model, GPU, dtype, region) is not in its catalog; the message lists close matches."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the signal arrives so that it stops a run the way Ctrl-C does."""

    exit_code = 143


class Interrupted(LLMCO2Error):
    """A run stopped by Ctrl-C or SIGTERM after committing part of its output.

    Attributes:
        exit_code: 130 after Ctrl-C (SIGINT), 143 after SIGTERM.
    """

    def __init__(self, done: int, total: int | None, exit_code: int = 130, resumable: bool = True) -> None:
        of = f" of {total:,}" if total is not None else ""
        again = "; run the same command again to resume" if resumable else ""
        super().__init__(f"interrupted after {done:,}{of} rows{again}")
        self.exit_code = exit_code


class Stopped(LLMCO2Error):
    """A run stopped by Ctrl-C or SIGTERM; the message says what was kept and how to go on.

    Attributes:
        exit_code: 130 after Ctrl-C (SIGINT), 143 after SIGTERM.
    """

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code
