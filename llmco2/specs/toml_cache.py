"""TOML catalogs parsed once per content: a JSON copy in the user cache, keyed by the file's SHA-256.

``tomllib`` is pure Python and takes about 0.15 s for the shipped catalogs at every start of the
command line; the JSON copy loads in milliseconds. The cache is an optimisation only: when it
cannot be read or written, or its copy does not match the SHA-256 recorded beside it (an edited or
damaged cache file), the TOML file is parsed as before and the copy rewritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from llmco2.file_checks import parse_json

log = logging.getLogger(__name__)
#: Folder of the cached copies, named by their format (a copy with its digest): versions that wrote
#: bare copies read theirs from ``toml/`` and never meet these.
CACHE_FORMAT = "toml-v2"


def cache_dir() -> Path:
    """``$LLMCO2_CACHE_DIR``, else ``$XDG_CACHE_HOME/llmco2``, else ``~/.cache/llmco2``."""
    explicit = os.environ.get("LLMCO2_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmco2"


def loads_toml(text: str | bytes, name: str = "catalog") -> dict[str, Any]:
    """``tomllib.loads(text)``, from the JSON cache when this exact text was parsed before."""
    raw = text.encode() if isinstance(text, str) else text
    key = cache_dir() / CACHE_FORMAT / f"{name}-{hashlib.sha256(raw).hexdigest()[:24]}.json"
    cached = _read_cached(key)
    if cached is not None:
        return cached
    doc = tomllib.loads(raw.decode())
    try:
        body = json.dumps(doc, sort_keys=True)  # TOML dates are not JSON: such files are simply not cached
        payload = json.dumps({"sha256": hashlib.sha256(body.encode()).hexdigest(), "doc": body})
        key.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=key.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(payload)
        os.replace(tmp, key)
    except (OSError, TypeError, ValueError) as exc:
        log.debug("TOML cache not written for %s: %s", name, exc)
    return doc


def _read_cached(key: Path) -> dict[str, Any] | None:
    """The document cached at ``key``, or None when there is none, or it is not what was written
    (its body does not match its recorded SHA-256)."""
    try:
        entry = parse_json(key.read_text())
        body = entry["doc"]
        if hashlib.sha256(body.encode()).hexdigest() != entry["sha256"]:
            log.warning("ignoring the edited or damaged catalog cache %s", key)
            return None
        doc = parse_json(body)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load_toml(path: str | Path) -> dict[str, Any]:
    """``tomllib.load`` of a file, through :func:`loads_toml`."""
    p = Path(path)
    return loads_toml(p.read_bytes(), p.stem)
