"""Arguments of a sweep read from text: GPU lists, ``MODEL=PATH`` checkpoints and the ``engine``
column of a configurations file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from llmco2.errors import InvalidInputError
from llmco2.measure.modes import ENGINE_OF_MODE


def read_engines(path: Path, n: int, default: str) -> list[str]:
    """The ``engine`` of every configuration: the file's ``engine`` column (``hf`` / ``hf-static``,
    catalog aliases allowed) or ``default`` for every row."""
    import csv

    from llmco2.analytic.compressed import open_text
    from llmco2.specs.engines import get_engine

    with open_text(path) as fh:  # a gzip-compressed file as the request reader takes it
        reader = csv.DictReader(fh)
        if "engine" not in [h.strip() for h in (reader.fieldnames or [])]:
            return [default] * n
        out = []
        for line, raw in enumerate(reader, start=2):
            row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
            if not row.get("engine"):
                out.append(default)
                continue
            engine = get_engine(row["engine"]).id
            if engine not in ENGINE_OF_MODE.values():
                raise InvalidInputError(f"{path}, line {line}: engine {engine!r}: llmco2 measure runs transformers engines "
                                        f"({', '.join(ENGINE_OF_MODE.values())})", field=None)
            out.append(engine)
    return out


def parse_gpus(text: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"0,1"`` (``--gpus``) or ``[0, 1]`` (the Hydra app's ``gpus``) -> ``(0, 1)``; at least one
    index, none negative."""
    if text is None:
        return (0,)
    if not isinstance(text, str):
        indices = list(text)
        if not indices or any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in indices):
            raise InvalidInputError(f"must be a list of GPU indices like [0,1], got {indices}", field="gpus")
        return tuple(indices)
    try:
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidInputError(f"must be comma-separated GPU indices like 0,1, got {text!r}", field="gpus") from None
    if not gpus or any(g < 0 for g in gpus):
        raise InvalidInputError(f"must be comma-separated GPU indices like 0,1, got {text!r}", field="gpus")
    return gpus


def parse_model_paths(items: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    """``["llama3.1-8b=/ckpt/llama"]`` -> ``{"llama3.1-8b": "/ckpt/llama"}`` (ids resolved in the catalog)."""
    from llmco2.specs import get_model

    if not items:
        return {}
    pairs = items.items() if isinstance(items, Mapping) else (_split_pair(i) for i in items)
    out: dict[str, str] = {}
    for model, path in pairs:
        if not Path(path).is_dir():
            raise InvalidInputError(f"{path} is not a folder", field="model_path")
        out[get_model(model).id] = str(path)
    return out


def _split_pair(item: str) -> tuple[str, str]:
    model, sep, path = item.partition("=")
    if not sep or not model or not path:
        raise InvalidInputError(f"must be MODEL=PATH, got {item!r}", field="model_path")
    return model, path
