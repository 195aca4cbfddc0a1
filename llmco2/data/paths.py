"""Where the public reference data lives: ``$LLMCO2_SHARED_DATA``, else a ``shared/data`` folder
beside (or above) the working directory or the package checkout."""

from __future__ import annotations

import os
from pathlib import Path

from llmco2.errors import InvalidInputError

ENV_VAR = "LLMCO2_SHARED_DATA"


def find_shared_data() -> Path | None:
    """The shared data folder, or ``None`` when there is none."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env) if Path(env).is_dir() else None
    starts = [Path.cwd(), Path(__file__).resolve().parent]
    for start in starts:
        for folder in (start, *start.parents):
            candidate = folder / "shared" / "data"
            if candidate.is_dir() and (candidate / "DATA.md").is_file():
                return candidate
    return None


def shared_data(*parts: str) -> Path:
    """A path inside the shared data folder; `InvalidInputError` saying how to point at it."""
    root = find_shared_data()
    if root is None:
        raise InvalidInputError(f"the shared data folder was not found; set {ENV_VAR} to the folder that holds DATA.md",
                                field=ENV_VAR)
    path = root.joinpath(*parts)
    if not path.exists():
        raise InvalidInputError(f"no such file {str(path)!r} in the shared data folder", field="path")
    return path
