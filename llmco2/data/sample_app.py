"""Hydra entry point for sampling (``conf/sample.yaml``) and Algorithm 1 (``conf/experiment/focused_loop.yaml``).

    python -m llmco2.data.sample_app out=samples.csv                    # 50K focused samples
    python -m llmco2.data.sample_app sampler=random n=1000 out=random.csv
    python -m llmco2.data.sample_app +experiment=focused_loop           # small Algorithm 1 demo

The work is done by the plain functions :func:`run_sample` and :func:`run_focused_loop`, which take
a composed config and return metrics; :func:`main` is the thin Hydra entry point
(:func:`~llmco2.hydra_app.hydra_main`: bad overrides get one line) that picks one by ``task``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from llmco2.errors import InvalidInputError
from llmco2.file_checks import check_output_folder, check_output_path
from llmco2.hydra_app import hydra_main, instantiate

log = logging.getLogger(__name__)

#: The repository's Hydra configuration folder.
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
TASKS = ("sample", "focused_loop")


def _out(cfg: DictConfig) -> str | None:
    if OmegaConf.is_missing(cfg, "out"):
        return None
    out = cfg.get("out")
    return None if out is None else str(out)


class SampleTally:
    """The counts of a sample's columns, gathered block by block as it is written (memory: the
    distinct values, not the rows)."""

    COLUMNS = ("trace", "gpu", "num_gpus", "batch_size", "dtype")

    def __init__(self) -> None:
        self.rows = 0
        self.counts: dict[str, dict[str, int]] = {c: {} for c in self.COLUMNS}
        self.models: set[str] = set()

    def passing(self, frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """``frames`` unchanged, each one counted on its way."""
        for frame in frames:
            self.rows += len(frame)
            for col in self.COLUMNS:
                tally = self.counts[col]
                for value, count in frame[col].value_counts().items():
                    tally[str(value)] = tally.get(str(value), 0) + int(count)
            self.models.update(frame["model"].astype(str).unique())
            yield frame

    def metrics(self) -> dict[str, Any]:
        """``by_<column>`` counts (in the order of the column's values) and the number of models."""
        out: dict[str, Any] = {}
        for col, tally in self.counts.items():
            numeric = col in ("num_gpus", "batch_size")
            keys = sorted(tally, key=(lambda k: int(k)) if numeric else None)
            out[f"by_{col}"] = {k: tally[k] for k in keys}
        out["models"] = len(self.models)
        return out


def run_sample(cfg: DictConfig) -> dict[str, Any]:
    """Instantiate ``cfg.sampler``, draw ``cfg.n`` configurations with ``cfg.seed`` and write
    them to ``cfg.out`` (CSV) block by block, as ``llmco2 sample`` does (memory bounded whatever
    ``n``; the file appears whole or not at all). Returns metrics: rows, time, dropped
    configurations, mix."""
    from llmco2.data.sampling import write_blocks

    check(cfg)
    out = Path(str(_out(cfg)))
    out.parent.mkdir(parents=True, exist_ok=True)
    check_output_path(out, "out", (".csv",))
    sampler = instantiate(cfg.sampler, "sampler")
    start = time.perf_counter()
    tally = SampleTally()
    rows = write_blocks(tally.passing(sampler.sample_blocks(int(cfg.n), seed=int(cfg.seed))), out)
    seconds = time.perf_counter() - start
    metrics: dict[str, Any] = {"task": "sample", "sampler": type(sampler).__name__, "rows": rows, "out": str(out),
                               **sampler.last_report.as_dict(), "seconds": round(seconds, 3), **tally.metrics()}
    log.info("sampled %d configurations in %.2f s -> %s", rows, seconds, out)
    return metrics


def run_focused_loop(cfg: DictConfig) -> dict[str, Any]:
    """Algorithm 1: an initial ``cfg.n``-point draw of ``cfg.sampler``, then
    :func:`~llmco2.data.sampling.focused_loop` with ``cfg.loop`` (regressor and measure are
    instantiated from it). Writes ``train.csv``, ``test.csv`` and ``metrics.json`` under
    ``cfg.out`` when it is set. Returns the loop's metrics."""
    from llmco2.data.sampling import focused_loop, sklearn_callables, to_csv

    loop = cfg.loop
    sampler = instantiate(cfg.sampler, "sampler")
    start = time.perf_counter()
    initial = sampler.sample(int(cfg.n), seed=int(cfg.seed))
    fit, predict = sklearn_callables(instantiate(loop.regressor, "loop.regressor"))
    measure = instantiate(loop.measure, "loop.measure")
    ranges = OmegaConf.to_container(loop.ranges, resolve=True) if loop.get("ranges") is not None else None
    result = focused_loop(initial, fit, predict, measure, test_fraction=float(loop.test_fraction), top_k=int(loop.top_k),
                          b=int(loop.b), ranges=ranges, error_threshold=float(loop.error_threshold),  # type: ignore[arg-type]
                          max_rounds=int(loop.max_rounds), seed=int(cfg.seed),
                          memory_fraction=float(loop.get("memory_fraction", 0.9)))
    metrics = {"task": "focused_loop", "initial_rows": len(initial), **result.metrics(),
               "seconds": round(time.perf_counter() - start, 3)}
    out = _out(cfg)
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        to_csv(result.train, folder / "train.csv")
        to_csv(result.test, folder / "test.csv")
        (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
        metrics["out"] = str(folder)
    log.info("focused loop: MAPE %s after %d rounds", metrics["mape_history"], metrics["rounds"])
    return metrics


def check(cfg: DictConfig) -> None:
    """``n``, ``seed``, ``task``, the sampler's settings and ``out`` of a composed config (before
    anything is written; an ``out`` whose folder is missing is created when the task runs)."""
    from llmco2.config_checks import check_sample_config

    check_sample_config(cfg)
    task = str(cfg.get("task", "sample"))
    if task not in TASKS:
        raise InvalidInputError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}", field="task")
    instantiate(cfg.sampler, "sampler")
    out = _out(cfg)
    if task == "sample":
        if out is None:
            raise InvalidInputError("set out=<file.csv> (where the sampled configurations go)", field="out")
        path = Path(out)
        if path.suffix.lower() != ".csv":
            raise InvalidInputError(f"cannot write {path}: sample files are .csv", field="out")
        check_output_folder(path.parent, "out")
        if path.parent.is_dir():
            check_output_path(path, "out", (".csv",))
    elif out is not None:
        check_output_folder(out, "out")


def run(cfg: DictConfig) -> dict[str, Any]:
    """Dispatch on ``cfg.task``."""
    check(cfg)
    return run_sample(cfg) if str(cfg.get("task", "sample")) == "sample" else run_focused_loop(cfg)


@hydra_main(CONF_DIR, "sample", check)
def main(cfg: DictConfig) -> None:
    print(json.dumps(run(cfg), indent=2))


if __name__ == "__main__":
    main()
