"""Hydra entry point of a measurement sweep, one job per shard.

Locally::

    python -m llmco2.measure.sweep_app configs=/abs/configs.csv out=/abs/data/measurements/h100.csv

On a Slurm cluster (``pip install hydra-submitit-launcher``), one job per shard::

    python -m llmco2.measure.sweep_app -m hydra/launcher=submitit_slurm \\
        shard='range(0,8)' num_shards=8 configs=/abs/configs.csv out=/abs/data/measurements/h100.csv

Each shard writes ``NAME.shardIofK.csv`` (and its run log and failure file); rerunning a job
resumes it. The defaults live in ``conf/measure.yaml`` (and in :class:`MeasureConfig` when the
package is installed without the repository's ``conf/`` folder).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from llmco2.errors import Stopped
from llmco2.hydra_app import hydra_main
from llmco2.interrupts import exit_code
from llmco2.measure.sweep import SweepOptions, parse_gpus, parse_model_paths, plan_sweep
from llmco2.measure.sweep import run_sweep as _run

log = logging.getLogger(__name__)


@dataclass
class MeasureConfig:
    """Typed defaults of a sweep (see :class:`~llmco2.measure.sweep.SweepOptions`)."""

    configs: str = MISSING
    out: str = MISSING
    repeats: int = 5
    warmup: int = 1
    gpus: list[int] = field(default_factory=lambda: [0])
    idle_s: float = 5.0
    device: str | None = None
    shard: int = 0
    num_shards: int = 1
    retry_failed: bool = False
    model_paths: dict[str, str] = field(default_factory=dict)
    method: str = "auto"
    power_interval_s: float = 0.02
    seed: int = 0
    dry_run: bool = False
    progress: bool = False
    decode_mode: str = "eager"
    min_window_s: float = SweepOptions.min_window_s
    min_periods: float = SweepOptions.min_periods
    target_bound: float = SweepOptions.target_bound
    flag_bound: float = SweepOptions.flag_bound
    max_passes: int = SweepOptions.max_passes
    probe_s: float = SweepOptions.probe_s


ConfigStore.instance().store(name="measure_schema", node=MeasureConfig)

_CONF = Path(__file__).resolve().parents[2] / "conf"
_HAS_CONF = (_CONF / "measure.yaml").is_file()


def options_from_cfg(cfg: Any) -> SweepOptions:
    """:class:`SweepOptions` from a Hydra/OmegaConf config (or any mapping with the same keys)."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    assert isinstance(data, dict)
    return SweepOptions(
        configs=Path(str(data["configs"])), out=Path(str(data["out"])), repeats=int(data.get("repeats", 5)),
        warmup=int(data.get("warmup", 1)), gpus=parse_gpus(data.get("gpus", [0])), idle_s=float(data.get("idle_s", 5.0)),
        device=data.get("device"), shard=int(data.get("shard", 0)), num_shards=int(data.get("num_shards", 1)),
        retry_failed=bool(data.get("retry_failed", False)), model_paths=parse_model_paths(data.get("model_paths") or {}),
        method=str(data.get("method", "auto")), power_interval_s=float(data.get("power_interval_s", 0.02)),
        seed=int(data.get("seed", 0)), progress=bool(data.get("progress", False)),
        decode_mode=str(data.get("decode_mode", "eager")),
        min_window_s=float(data.get("min_window_s", SweepOptions.min_window_s)),
        min_periods=float(data.get("min_periods", SweepOptions.min_periods)),
        target_bound=float(data.get("target_bound", SweepOptions.target_bound)),
        flag_bound=float(data.get("flag_bound", SweepOptions.flag_bound)),
        max_passes=int(data.get("max_passes", SweepOptions.max_passes)), probe_s=float(data.get("probe_s", SweepOptions.probe_s)),
    )


def run_sweep(cfg: Any) -> dict[str, Any]:
    """Run (or, with ``dry_run``, plan) the shard ``cfg`` describes; returns the summary or the plan.
    Ctrl-C or SIGTERM raise :class:`~llmco2.errors.Stopped` (exit 130 or 143, one line): every
    finished configuration is in the shard's output, and the same command resumes."""
    options = options_from_cfg(cfg)
    dry = bool(cfg.get("dry_run", False)) if hasattr(cfg, "get") else False
    if dry:
        plan = plan_sweep(options, readonly=True).to_dict()
        plan.pop("configurations")
        return plan
    try:
        return _run(options)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (hydra_main raises it as one)
        raise Stopped(f"interrupted; finished configurations are in {options.shard_out}; run the same command "
                      "again to resume", exit_code(exc)) from None


@hydra_main(_CONF if _HAS_CONF else None, "measure" if _HAS_CONF else "measure_schema")
def main(cfg: DictConfig) -> dict[str, Any]:
    result = run_sweep(cfg)
    print(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
