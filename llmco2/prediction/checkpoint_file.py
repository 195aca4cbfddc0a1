"""The checkpoint file: tensors in safetensors, everything else as JSON, nothing that can run code.

A checkpoint is one ``.safetensors`` file. Its tensors are the network's weights (float32, keyed
by the PyTorch state-dict names); its ``__metadata__`` holds

* ``llmco2``: one JSON document with every other entry (kind, feature-schema version, training
  config, feature scaler, output head, training domain, history);
* ``weights_sha256``: the SHA-256 of the tensors (name, dtype, shape and bytes of each, in name
  order) and ``meta_sha256``: the SHA-256 of the JSON text.

Reading parses the safetensors header (plain JSON) and the raw tensor bytes only: no pickle, no
code. Both digests are checked on load, and the weights must be finite, so a corrupted file is an
:class:`~llmco2.errors.InvalidInputError` (exit code 2), never a NaN prediction. Reading needs
NumPy and ``safetensors`` only, not torch.

Files written by earlier llmco2 versions (``torch.save`` pickles, ``.pt``) are refused with the
one-time conversion (:data:`CONVERT_HINT`; the command line prints its command, ``llmco2 checkpoint
convert PATH --trust``); :func:`convert_legacy` loads one only when the caller trusts it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.file_checks import JSONTooDeepError, parse_json

log = logging.getLogger(__name__)

CHECKPOINT_SUFFIX = ".safetensors"
#: 2: safetensors + JSON (this module); 1: the ``torch.save`` pickle of earlier versions
CHECKPOINT_FORMAT = 2
META_KEY = "llmco2"
#: Largest safetensors header accepted (bytes); real ones are a few hundred KB at most.
MAX_HEADER_BYTES = 64 << 20
#: The one-time conversion of a pickle-based checkpoint at ``{path}``, as a call (the command line
#: prints it as ``llmco2 checkpoint convert PATH --trust``: :data:`llmco2.cli.flags.COMMANDS`).
CONVERT_HINT = "`llmco2.prediction.checkpoint_file.convert_legacy({path!r}, trust=True)`"
#: Deepest nesting of lists and objects accepted in the metadata (real checkpoints reach about 6).
MAX_META_DEPTH = 16


def _weights_digest(tensors: Mapping[str, NDArray]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def jsonable(obj: Any) -> Any:
    """Lists, dicts, str, float, int, bool and None only (tensors and arrays become lists)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "detach"):  # a torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise InvalidInputError(f"checkpoint entry of type {type(obj).__name__} cannot be stored as JSON", field="checkpoint")


def write_checkpoint(path: str | Path, tensors: Mapping[str, NDArray], meta: Mapping[str, Any]) -> Path:
    """Write ``tensors`` (converted to contiguous float32 where floating) and the JSON of ``meta``
    to ``path`` atomically (a temporary file in the same folder, then a rename)."""
    from safetensors.numpy import save

    arrays = {str(k): np.ascontiguousarray(v, dtype=np.float32 if np.issubdtype(np.asarray(v).dtype, np.floating) else None)
              for k, v in tensors.items()}
    text = json.dumps(jsonable(dict(meta)), sort_keys=True)
    blob = save(arrays, metadata={META_KEY: text, "weights_sha256": _weights_digest(arrays), "meta_sha256": _text_digest(text)})
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; checkpoints are package data, readable by all
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def _looks_like_pickle(blob: bytes) -> bool:
    """A ``torch.save`` zip archive (a zip holding a ``data.pkl``, read by its table of contents
    only), a legacy torch file or a plain pickle (protocol 2+)."""
    if blob.startswith(b"PK\x03\x04"):
        import io
        import zipfile

        try:
            with zipfile.ZipFile(io.BytesIO(blob)) as archive:
                return any(name == "data.pkl" or name.endswith("/data.pkl") for name in archive.namelist())
        except (zipfile.BadZipFile, ValueError, OSError):
            return False
    return len(blob) >= 2 and blob[0] == 0x80 and 2 <= blob[1] <= 5


def check_checkpoint_file(path: str | Path, field: str = "checkpoint") -> Path:
    """``path`` if it is an existing regular file; else what it is instead (missing, a directory,
    not a regular file such as a FIFO or ``/dev/zero``), naming ``field``."""
    p = Path(path)
    if "\x00" in str(p):
        raise InvalidInputError(f"checkpoint {str(p)!r} holds a NUL byte, which no file name can", field=field)
    try:
        p.stat()
    except OSError as exc:  # missing, a loop (said below), or a name too long for a path
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidInputError(f"cannot read checkpoint {str(p)[:80]!r}: {exc.strerror or exc}", field=field) from None
    if p.is_dir():
        raise InvalidInputError(f"checkpoint {str(p)!r} is a directory, not a file", field=field)
    if not p.exists():
        raise InvalidInputError(f"no such checkpoint {str(p)!r}", field=field)
    if not p.is_file():
        raise InvalidInputError(f"checkpoint {str(p)!r} is not a regular file", field=field)
    return p


def _header(p: Path, blob: bytes) -> dict[str, Any]:
    """The safetensors header of ``blob`` (checked for shape, not yet for digests)."""
    n = int.from_bytes(blob[:8], "little") if len(blob) >= 8 else 0
    if n < 2 or n > MAX_HEADER_BYTES or 8 + n > len(blob) or blob[8:9] != b"{":
        if _looks_like_pickle(blob):
            raise InvalidInputError(
                f"{p} is a pickle-based checkpoint (the format of earlier llmco2 versions), which can run code when loaded; "
                f"it is not loaded. If you trust where it came from, convert it once: {CONVERT_HINT.format(path=str(p))}",
                field="checkpoint")
        what = "a zip archive" if blob.startswith(b"PK\x03\x04") else f"{len(blob)} bytes of something else"
        raise InvalidInputError(f"{p} is not an llmco2 checkpoint (expected a safetensors file, got {what})",
                                field="checkpoint")
    try:
        header = parse_json(blob[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError, JSONTooDeepError):
        raise InvalidInputError(f"{p} is not an llmco2 checkpoint (its safetensors header is not JSON)", field="checkpoint") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get(META_KEY), str):
        raise InvalidInputError(f"{p} is a safetensors file but not an llmco2 checkpoint (no llmco2 metadata)", field="checkpoint")
    return meta


def read_checkpoint(path: str | Path) -> tuple[dict[str, NDArray[np.float32]], dict[str, Any]]:
    """``(tensors, meta)`` of the checkpoint at ``path``, after checking both digests and that every
    weight is finite. Any problem is an :class:`InvalidInputError` naming the file."""
    p = check_checkpoint_file(path)
    try:
        blob = p.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read checkpoint {str(p)!r}: {exc.strerror or exc}", field="checkpoint") from None
    header = _header(p, blob)
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        tensors = load(blob)
    except (SafetensorError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"{p} is a damaged checkpoint ({str(exc).splitlines()[0][:120]})", field="checkpoint") from None
    text = header[META_KEY]
    if header.get("meta_sha256") != _text_digest(text) or header.get("weights_sha256") != _weights_digest(tensors):
        raise InvalidInputError(f"{p} is corrupted: its SHA-256 does not match the one recorded when it was written",
                                field="checkpoint")
    try:
        meta = parse_json(text, max_depth=MAX_META_DEPTH)
    except json.JSONDecodeError:
        raise InvalidInputError(f"{p} is corrupted: its metadata is not JSON", field="checkpoint") from None
    except JSONTooDeepError:
        raise InvalidInputError(f"{p} is not a usable checkpoint: its metadata is nested more than {MAX_META_DEPTH} levels "
                                "deep", field="checkpoint") from None
    if not isinstance(meta, dict) or meta.get("kind") != "llmco2-gnn":
        raise InvalidInputError(f"{p} is not an llmco2 GNN checkpoint", field="checkpoint")
    for name, a in tensors.items():
        if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
            raise InvalidInputError(f"{p} is corrupted: weight {name} holds values that are not finite", field="checkpoint")
    return tensors, meta


def convert_legacy(src: str | Path, dest: str | Path | None = None, *, trust: bool = False) -> Path:
    """Convert a checkpoint of earlier llmco2 versions (a ``torch.save`` pickle) to the safetensors
    format. Unpickling can run code, so this refuses unless ``trust`` is true; even then it first
    tries PyTorch's restricted loader (``weights_only=True``), which runs nothing, and falls back to
    a full unpickle only where that fails. Needs torch."""
    p = check_checkpoint_file(src, "src")
    if not trust:
        raise InvalidInputError(f"converting {p} unpickles it, which can run code; pass `trust=True` if you trust where it came from",
                                field="trust")
    out = Path(dest) if dest is not None else p.with_suffix(CHECKPOINT_SUFFIX)
    if out.resolve() == p.resolve():
        raise InvalidInputError(f"the converted checkpoint would overwrite {p}; pass another `dest`", field="dest")
    import torch

    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - the restricted loader refused something; the user trusts the file
        log.warning("%s needs a full unpickle (%s); loading it as trusted", p, type(exc).__name__)
        try:
            state = torch.load(p, map_location="cpu", weights_only=False)
        except Exception as exc2:  # noqa: BLE001 - any unreadable file is the user's input error
            raise InvalidInputError(f"{p} is not an llmco2 checkpoint ({type(exc2).__name__})", field="src") from None
    if not isinstance(state, dict) or state.get("kind") != "llmco2-gnn" or not isinstance(state.get("state_dict"), Mapping):
        raise InvalidInputError(f"{p} is not an llmco2 GNN checkpoint", field="src")
    tensors = {k: v.detach().cpu().numpy() for k, v in state["state_dict"].items()}
    meta = {k: v for k, v in state.items() if k != "state_dict"}
    meta["format"] = CHECKPOINT_FORMAT
    return write_checkpoint(out, tensors, meta)


#: Name prefixes of the training state a resumable run keeps beside the network weights.
OPTIMIZER_PREFIX, BEST_WEIGHTS_PREFIX = "optimizer.", "best_weights."


def is_training_state(name: str) -> bool:
    """Whether a tensor of a checkpoint is training state rather than a network weight."""
    return name.startswith((OPTIMIZER_PREFIX, BEST_WEIGHTS_PREFIX)) or name == "torch_rng"
