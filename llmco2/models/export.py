"""Export a trained checkpoint (``.pt``, the source of truth) to the inference sidecar that
:mod:`llmco2.models.inference` reads without torch.

The sidecar ``NAME.infer.npz`` sits next to ``NAME.pt``: the network's weights as float32 arrays
(``w:`` + the state-dict key) and everything else of the checkpoint — feature scaler, target
standardisation, output head, latency calibration, training domain, config — as one JSON
document (``meta``), with the SHA-256 of the ``.pt`` it came from so that a stale sidecar is
noticed and rewritten. Reading the ``.pt`` needs torch (not torch_geometric); reading the sidecar
needs NumPy only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from llmco2.errors import InvalidInputError

log = logging.getLogger(__name__)

SIDECAR_FORMAT = 1
SIDECAR_SUFFIX = ".infer.npz"
WEIGHT_PREFIX = "w:"


def sidecar_path(checkpoint: str | Path) -> Path:
    """``dir/NAME.infer.npz`` for ``dir/NAME.pt``."""
    p = Path(checkpoint)
    return p.with_name(p.stem + SIDECAR_SUFFIX)


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _jsonable(obj: Any) -> Any:
    """Lists, dicts, str, float, int, bool and None only (tensors and arrays become lists)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "detach"):  # a torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise InvalidInputError(f"checkpoint entry of type {type(obj).__name__} cannot be exported for inference", field="checkpoint")


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The ``.pt`` checkpoint dict (needs torch)."""
    import torch

    p = Path(path)
    try:
        state = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input error
        raise InvalidInputError(f"{p} is not an llmco2 checkpoint ({type(exc).__name__})", field="checkpoint") from None
    if not isinstance(state, dict) or state.get("kind") != "llmco2-gnn":
        raise InvalidInputError(f"{p} is not an llmco2 GNN checkpoint", field="checkpoint")
    return state


def export_inference(checkpoint: str | Path, out: str | Path | None = None) -> Path:
    """Write the inference sidecar of ``checkpoint`` (default path: :func:`sidecar_path`) atomically."""
    src = Path(checkpoint)
    state = read_checkpoint(src)
    weights = {WEIGHT_PREFIX + k: v.detach().cpu().numpy().astype(np.float32) for k, v in state["state_dict"].items()}
    meta = _jsonable({k: v for k, v in state.items() if k != "state_dict"})
    meta.update(sidecar_format=SIDECAR_FORMAT, source_sha256=file_sha256(src), source_name=src.name)
    dest = Path(out) if out is not None else sidecar_path(src)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **weights)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the sidecar is package data, readable by all
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m llmco2.models.export CHECKPOINT.pt [OUT]``."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) > 2:
        sys.stderr.write("usage: python -m llmco2.models.export CHECKPOINT.pt [OUT.infer.npz]\n")
        return 2
    print(export_inference(args[0], args[1] if len(args) > 1 else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
