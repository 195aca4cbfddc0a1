"""``llmco2 checkpoint ...``: check a checkpoint file, convert one of earlier versions once.

Checkpoints are safetensors files with JSON metadata (:mod:`llmco2.prediction.checkpoint_file`):
reading one runs no code. Earlier versions wrote ``torch.save`` pickles, which can; those are
converted only when the user says they trust the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmco2.cli.common import Parser, print_json
from llmco2.errors import InvalidInputError


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    ck = sub.add_parser("checkpoint", help="inspect a checkpoint; convert one written by an earlier llmco2 version")
    csub = ck.add_subparsers(dest="what", required=True, parser_class=Parser)

    conv = csub.add_parser("convert", help="convert a pickle-based checkpoint (.pt, earlier versions) to .safetensors")
    conv.add_argument("path", help="the old checkpoint (.pt)")
    conv.add_argument("--out", default=None, help="the new checkpoint (default: PATH with the suffix .safetensors)")
    conv.add_argument("--trust", action="store_true",
                      help="required: loading a pickle can run code, so convert only files whose origin you trust")

    ins = csub.add_parser("inspect", help="check a checkpoint (digests, metadata, a prediction of ordinary requests) and "
                                          "print what it was trained on")
    ins.add_argument("path")
    ins.add_argument("--json", action="store_true")

    handlers.update({("checkpoint", "convert"): cmd_convert, ("checkpoint", "inspect"): cmd_inspect})


def cmd_convert(args: argparse.Namespace) -> int:
    from llmco2.prediction.checkpoint_file import convert_legacy

    out = convert_legacy(args.path, args.out, trust=args.trust)
    print(f"wrote {out}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from llmco2.prediction.checkpoint_file import read_checkpoint
    from llmco2.prediction.inference import InferenceModel

    try:
        tensors, meta = read_checkpoint(Path(args.path))
        InferenceModel.from_checkpoint(tensors, meta, Path(args.path))  # metadata usable, ordinary requests predicted
    except InvalidInputError as exc:  # the command takes the checkpoint as its PATH, not as --checkpoint
        if exc.field != "checkpoint":
            raise
        raise type(exc)(str(exc.args[0]) if exc.args else "", field="path") from None
    domain = meta.get("domain", {})
    summary = {
        "path": str(args.path), "kind": meta.get("kind"), "format": meta.get("format"),
        "feature_schema_version": meta.get("feature_schema_version"), "tensors": len(tensors),
        "parameters": int(sum(a.size for a in tensors.values())), "digests": "ok", "predicts": "ok",
        "devices": domain.get("devices", []), "engines": domain.get("engines", []), "models": len(domain.get("models", [])),
    }
    if args.json:
        print_json(summary)
    else:
        for k, v in summary.items():
            print(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}")
    return 0
