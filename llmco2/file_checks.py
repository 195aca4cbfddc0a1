"""Checks of the files a command reads and writes, before any work starts.

Input: missing, a directory, or not a regular file (``/dev/zero``, a FIFO) are each named as
such. Output: ``cannot write PATH: reason`` (a directory, a file used as a folder, a folder that
does not exist or cannot be written, a symbolic link loop). Both raise :class:`~llmco2.errors.InvalidInputError`.

JSON that llmco2 reads (config.json, checkpoint headers, manifests, caches, run logs) goes through
:func:`parse_json`, which refuses a document nested deeper than :data:`MAX_JSON_DEPTH` with a
:class:`JSONTooDeepError` (a ``ValueError``), never a ``RecursionError``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError

#: Deepest nesting of lists and objects accepted in a JSON document llmco2 reads (real ones reach
#: about 6: a config.json's ``rope_scaling``, a checkpoint's scaler, a manifest's fingerprint).
MAX_JSON_DEPTH = 64


class JSONTooDeepError(ValueError):
    """A JSON document nested deeper than its reader accepts."""

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"nested more than {max_depth} levels deep")
        self.max_depth = max_depth


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar: 0), computed without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
        else:
            deepest = max(deepest, d)
            continue
        deepest = max(deepest, d + 1)
    return deepest


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)`` with a depth limit: a document nested more than ``max_depth``
    levels deep (thousands of ``[``, which the decoder would answer with a ``RecursionError``) is a
    :class:`JSONTooDeepError`. Text that is not JSON is a ``json.JSONDecodeError`` as before."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise JSONTooDeepError(max_depth) from None
    if json_depth(value) > max_depth:
        raise JSONTooDeepError(max_depth)
    return value


def check_input_file(path: str | Path, field: str) -> Path:
    """``path`` if it is a readable regular file; otherwise what it is instead."""
    p = Path(path)
    if "\x00" in str(p):
        raise InvalidInputError(f"{str(p)!r} holds a NUL byte, which no file name can; give a file", field=field)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InvalidInputError(f"no such file {str(p)!r}", field=field) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {str(p)!r}: {exc.strerror or exc}", field=field) from None
    if stat.S_ISDIR(st.st_mode):
        raise InvalidInputError(f"{str(p)!r} is a directory; give a file", field=field)
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInputError(f"{str(p)!r} is not a regular file; give a file", field=field)
    if not os.access(p, os.R_OK):
        raise InvalidInputError(f"cannot read {str(p)!r}: permission denied", field=field)
    return p


def check_output_path(path: str | Path, field: str = "out", suffixes: tuple[str, ...] = ()) -> Path:
    """``path`` if a file can be written there (checked by creating and removing a temporary file
    in its folder); else ``cannot write PATH: reason``. ``suffixes``: the accepted file types."""
    p = Path(path)

    def refuse(reason: str) -> InvalidInputError:
        return InvalidInputError(f"cannot write {p}: {reason}", field=field)

    if "\x00" in str(p):
        raise InvalidInputError(f"cannot write {str(p)!r}: it holds a NUL byte, which no file name can", field=field)
    if suffixes and p.suffix.lower() not in suffixes:
        raise refuse(f"unknown file type {p.suffix or '(none)'!r}; use {' or '.join(suffixes)}")
    if loops(p):
        raise refuse("it is a symbolic link that leads back to itself (a loop); remove the link or give another path")
    if p.is_dir():
        raise refuse("it is a directory; give a file name")
    if p.exists() and not p.is_file():
        raise refuse("it exists and is not a regular file")
    folder = p.parent
    for above in [folder, *folder.parents]:
        if above.exists():
            if not above.is_dir():
                raise refuse(f"{above} is a file, not a folder")
            break
    if not folder.exists():
        raise refuse(f"folder {folder} does not exist")
    reason = unwritable(folder)
    if reason is not None:
        raise refuse(f"{reason} (folder {folder})")
    if p.exists() and not os.access(p, os.W_OK):
        raise refuse("the existing file is read-only")
    return p


def check_output_folder(path: str | Path, field: str = "out") -> Path:
    """``path`` if files can be written in it (it is created later when missing); else
    ``cannot write PATH: reason``."""
    p = Path(path)
    if loops(p):
        raise InvalidInputError(f"cannot write {p}: it is a symbolic link that leads back to itself (a loop); remove the "
                                "link or give another path", field=field)
    if p.exists() and not p.is_dir():
        raise InvalidInputError(f"cannot write {p}: it is a file, not a folder", field=field)
    existing = next(a for a in [p, *p.parents] if a.exists() or a == Path(a.anchor or "."))
    if not existing.is_dir():
        raise InvalidInputError(f"cannot write {p}: {existing} is a file, not a folder", field=field)
    reason = unwritable(existing)
    if reason is not None:
        raise InvalidInputError(f"cannot write {p}: {reason} (folder {existing})", field=field)
    return p


def loops(path: Path) -> bool:
    """Whether ``path`` (or a folder above it) is a symbolic link that leads back to itself."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def unwritable(folder: Path) -> str | None:
    """Why no file can be created in the existing ``folder`` (checked by creating and removing a
    temporary file there); None when one can."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".llmco2.", suffix=".probe"):
            pass
    except OSError as exc:
        return {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
                errno.EROFS: "read-only file system"}.get(exc.errno or 0, exc.strerror or str(exc))
    return None


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name the same file or folder (through links, ``..`` or another spelling)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_not_an_input(out: str | Path, inputs: dict[str, str | Path], field: str = "out") -> None:
    """Refuse an output that would overwrite one of the command's inputs (``inputs``: parameter or
    option name -> path that exists): the same file, a folder that holds an input file, or an input
    folder itself. A parameter name is written between backticks (the command line shows its flag)."""
    o = Path(out)
    given = mention(field)
    for name, path in inputs.items():
        p = Path(path)
        if same_path(o, p):
            raise InvalidInputError(f"cannot write {o}: it is the {mention(name)} input, which this command reads; give "
                                    f"another {given}", field=field)
        if o.is_dir() and p.is_file() and os.path.realpath(p).startswith(os.path.realpath(o) + os.sep):
            raise InvalidInputError(f"cannot write in {o}: it holds the {mention(name)} input {p}; give another {given}",
                                    field=field)


def mention(name: str) -> str:
    """How a message names a parameter: ``out`` between backticks (the command line prints its
    flag); a name already written as an option (``--out``, ``source``'s flag) as it is."""
    return f"`{name}`" if name.isidentifier() else name
