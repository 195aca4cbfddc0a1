"""Measurement sweeps: every configuration of a request/sampler CSV, measured and written as it finishes.

:func:`plan_sweep` reads the configurations (:func:`~llmco2.analytic.batch.read_request_csv`),
keeps this shard's share (configuration ``i`` goes to shard ``i % num_shards``), compares them
with what an earlier run left on disk and estimates the time from the analytic roofline;
it needs no GPU. :func:`run_sweep` measures what is left: one
:class:`~llmco2.measure.store.ResultStore` append per finished configuration, failures (OOM,
unsupported dtype, any exception of the runner) logged to the failure file while the sweep goes on.
An interrupted sweep is resumed by running it again.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from llmco2.errors import InvalidInputError, UnknownIdError
from llmco2.measure.meter import CounterMeter, IdleMeter
from llmco2.measure.modes import DECODE_MODES, ENGINE_OF_MODE, decode_mode_of
from llmco2.measure.store import ResultStore, canonical_rows, check_rows, config_fields, config_key, one_line
from llmco2.measure.sweep_args import parse_gpus, parse_model_paths, read_engines
from llmco2.measure.windows import WindowPolicy
from llmco2.specs import GPU, ModelArch, Request, get_gpu

log = logging.getLogger(__name__)

STATUSES = ("todo", "done", "failed", "other_gpu")


@dataclass
class SweepOptions:
    """A sweep, or one shard of it.

    Attributes:
        configs: request/sampler CSV (model, gpu, num_gpus, batch_size, prompt_tokens, generated_tokens, ...).
        out: output table (.csv); with ``num_shards > 1`` each shard writes ``NAME.shardIofK.csv``.
        repeats / warmup: measured and unmeasured runs per configuration.
        gpus: CUDA indices this process may use; a configuration on ``n`` GPUs uses the first ``n``.
        idle_s: seconds of idle-power measurement before the sweep (0: skip).
        device: catalog id of this machine's GPU (None: recognised from the NVML name); only
            configurations for it are measured.
        shard / num_shards: this process's share of the configurations.
        retry_failed: measure configurations listed in the failure file again.
        model_paths: catalog model id -> local checkpoint folder (real weights instead of random).
        method: energy method of the meter (``auto``, ``nvml_energy``, ``nvml_power``).
        power_interval_s: sampling period of the power fallback, seconds.
        seed: seeds weights and prompts.
        progress: show a progress bar on stderr.
        decode_mode: ``eager`` (engine ``hf``) or ``static`` (``hf-static``) for configurations
            whose file has no ``engine`` column (a column of ``hf`` / ``hf-static`` decides per row).
        min_window_s / min_periods / target_bound / flag_bound / max_passes: the window policy
            (:class:`~llmco2.measure.windows.WindowPolicy`).
        probe_s: seconds of energy-counter probing under load before the sweep (0: skip, windows
            are then sized in time only and rows carry no quantisation bound).
    """

    configs: Path
    out: Path
    repeats: int = 5
    warmup: int = 1
    gpus: tuple[int, ...] = (0,)
    idle_s: float = 5.0
    device: str | None = None
    shard: int = 0
    num_shards: int = 1
    retry_failed: bool = False
    model_paths: dict[str, str] = field(default_factory=dict)
    method: str = "auto"
    power_interval_s: float = 0.02
    seed: int = 0
    progress: bool = True
    decode_mode: str = "eager"
    min_window_s: float = WindowPolicy.min_window_s
    min_periods: float = WindowPolicy.min_periods
    target_bound: float = WindowPolicy.target_bound
    flag_bound: float = WindowPolicy.flag_bound
    max_passes: int = WindowPolicy.max_passes
    probe_s: float = 2.0

    def __post_init__(self) -> None:
        self.configs = Path(self.configs)
        self.out = Path(self.out)
        self.gpus = tuple(int(g) for g in self.gpus)
        if self.repeats < 1:
            raise InvalidInputError(f"must be >= 1, got {self.repeats}", field="repeats")
        if self.warmup < 0:
            raise InvalidInputError(f"must be >= 0, got {self.warmup}", field="warmup")
        if not self.gpus:
            raise InvalidInputError("give at least one GPU index", field="gpus")
        if self.idle_s < 0:
            raise InvalidInputError(f"must be >= 0 seconds, got {self.idle_s}", field="idle_s")
        if self.num_shards < 1:
            raise InvalidInputError(f"must be >= 1, got {self.num_shards}", field="num_shards")
        if not 0 <= self.shard < self.num_shards:
            raise InvalidInputError(f"must be between 0 and num_shards - 1 = {self.num_shards - 1}, got {self.shard}", field="shard")
        if self.device is not None:
            self.device = get_gpu(self.device).id
        if self.decode_mode not in DECODE_MODES:
            raise InvalidInputError(f"must be one of {', '.join(DECODE_MODES)}, got {self.decode_mode!r}", field="decode_mode")
        if self.probe_s < 0:
            raise InvalidInputError(f"must be >= 0 seconds, got {self.probe_s}", field="probe_s")
        _ = self.policy  # validates the window settings

    @property
    def policy(self) -> WindowPolicy:
        """The window policy these options describe."""
        return WindowPolicy(min_window_s=self.min_window_s, min_periods=self.min_periods, target_bound=self.target_bound,
                            flag_bound=self.flag_bound, max_passes=self.max_passes)

    @property
    def shard_out(self) -> Path:
        """The file this shard writes."""
        return shard_path(self.out, self.shard, self.num_shards)


def shard_path(out: Path, shard: int, num_shards: int) -> Path:
    """``NAME.csv`` for one shard, ``NAME.shard3of8.csv`` for shard 3 of 8."""
    if num_shards == 1:
        return out
    return out.with_name(f"{out.stem}.shard{shard}of{num_shards}{out.suffix}")


@dataclass
class PlannedConfig:
    """One configuration of the sweep. ``number`` is its 1-based position in the configuration file."""

    number: int
    key: str
    fields: dict[str, Any]
    arch: ModelArch
    request: Request
    gpu: GPU
    status: str = "todo"
    estimate_s: float | None = None


@dataclass
class SweepPlan:
    """The configurations of this shard with their status and time estimates."""

    options: SweepOptions
    items: list[PlannedConfig]
    store: ResultStore

    @property
    def todo(self) -> list[PlannedConfig]:
        return [c for c in self.items if c.status == "todo"]

    def counts(self) -> dict[str, int]:
        found = Counter(c.status for c in self.items)
        return {s: found.get(s, 0) for s in STATUSES}

    def estimate_s(self) -> float | None:
        """Roofline estimate of the remaining work (warm-up + repeats, plus idle measurement), seconds."""
        todo = self.todo
        if not todo:
            return 0.0
        if any(c.estimate_s is None for c in todo):
            return None
        return sum(c.estimate_s for c in todo if c.estimate_s is not None) + self.options.idle_s

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "configs": str(o.configs), "out": str(o.shard_out), "shard": o.shard, "num_shards": o.num_shards,
            "repeats": o.repeats, "warmup": o.warmup, "gpus": list(o.gpus), "device": o.device, "decode_mode": o.decode_mode,
            "window_policy": asdict(o.policy),
            "total": len(self.items), **self.counts(), "estimated_s": self.estimate_s(),
            "configurations": [{"number": c.number, "status": c.status, "estimated_s": c.estimate_s, **c.fields} for c in self.items],
        }


def _estimates(items: Sequence[tuple[ModelArch, Request, GPU]], runs: int, window_s: float = 0.0) -> list[float | None]:
    """Roofline time of prefill + decode per configuration, times ``runs``, each phase's run taking
    at least ``window_s`` (the minimum window); None where it cannot be computed."""
    from llmco2.analytic.batch import analyze_request_table

    try:
        table = analyze_request_table(items)
    except Exception as exc:  # an estimate is a convenience; it never stops a sweep
        log.warning("no time estimate: %s", one_line(str(exc), 200))
        return [None] * len(items)
    return [(max(float(p), window_s) + max(float(d), window_s if g > 1 else 0.0)) * runs
            for p, d, g in zip(table["prefill_time_s"], table["decode_time_s"], table["generated_tokens"], strict=True)]


def read_configs(path: Path) -> list[tuple[ModelArch, Request, GPU]]:
    """The configurations of the request file ``path``; a refusal of the file names ``configs``, the
    parameter that gave it (the request-file reader names ``requests``)."""
    from llmco2.analytic.batch import read_request_csv

    try:
        return read_request_csv(path)
    except InvalidInputError as exc:
        if exc.field != "requests":
            raise
        raise type(exc)(str(exc.args[0]) if exc.args else "", field="configs") from None


def plan_sweep(options: SweepOptions, readonly: bool = True) -> SweepPlan:
    """Read the configurations and compare them with the output on disk (no GPU needed).

    ``readonly=False`` also repairs the output files after a crash (see :class:`ResultStore`).
    """
    items = read_configs(options.configs)
    engines = read_engines(options.configs, len(items), ENGINE_OF_MODE[options.decode_mode])
    store = ResultStore.open(options.shard_out, readonly=readonly)
    mine = [(i, t) for i, t in enumerate(items) if i % options.num_shards == options.shard]
    runs = options.warmup + options.repeats + (2 if options.min_window_s > 0 or options.probe_s > 0 else 0)
    estimates = _estimates([t for _, t in mine], runs, options.policy.minimum_s(None)) if mine else []
    planned: list[PlannedConfig] = []
    seen: set[str] = set()
    repeated: list[int] = []
    for (i, (arch, request, gpu)), est in zip(mine, estimates, strict=True):
        fields = config_fields(arch, request, gpu, engines[i])
        key = config_key(fields)
        if key in seen:
            repeated.append(i + 1)
            continue
        seen.add(key)
        if key in store.done:
            status = "done"
        elif key in store.failed and not options.retry_failed:
            status = "failed"
        elif options.device is not None and gpu.id != options.device:
            status = "other_gpu"
        else:
            status = "todo"
        planned.append(PlannedConfig(i + 1, key, fields, arch, request, gpu, status, est))
    if repeated:  # one line (with -v), not one per repeat: the sampler draws duplicates by design
        log.info("%d configurations repeat earlier ones and are measured once (first: line %d of the list)",
                 len(repeated), repeated[0])
    return SweepPlan(options, planned, store)


def detect_device(names: Sequence[str]) -> str:
    """Catalog id of the GPU called ``names[0]`` by NVML (all must agree)."""
    ids = set()
    for name in names:
        try:
            ids.add(get_gpu(name).id)
        except UnknownIdError:
            raise InvalidInputError(f"cannot tell which catalog GPU {name!r} is; pass its catalog id as `device`", field="device") from None
    if len(ids) != 1:
        raise InvalidInputError(f"the GPUs given are of different kinds ({', '.join(sorted(ids))}); give GPUs of one kind", field="gpus")
    return ids.pop()


def _progress(enabled: bool) -> Any:
    """A rich progress bar on stderr, or a silent stand-in when disabled or rich is missing (a bare GPU machine)."""
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    except ImportError:
        if enabled:
            log.warning("rich is not installed: no progress bar")
        return _NoProgress()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), console=Console(stderr=True), disable=not enabled)


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None

    def advance(self, *args: Any, **kwargs: Any) -> None:
        return None


@runtime_checkable
class ModeRunner(Protocol):
    """A runner that decodes in a mode (``eager`` or ``static``, :data:`llmco2.measure.modes.DECODE_MODES`) set per
    configuration from its engine."""

    decode_mode: str


def run_sweep(options: SweepOptions, *, meter: Any = None, runner: Any = None, probe_load: Any = None) -> dict[str, Any]:
    """Measure every remaining configuration of this shard; returns a summary.

    ``meter`` and ``runner`` are injectable (tests use a fake meter and a tiny CPU model); by
    default an :class:`~llmco2.measure.meter.EnergyMeter` over ``options.gpus`` (which raises
    `NoGPUError` without a GPU) and an :class:`~llmco2.measure.runner.InferenceRunner`.
    Before the first configuration: idle power (``idle_s``), then the energy counter's update
    period and increment under ``probe_load`` (default: matrix products on the GPUs) for
    ``probe_s`` seconds; both go into the run log's environment.
    """
    plan = plan_sweep(options, readonly=True)  # bad input fails here, before any GPU or file is touched
    own_meter = meter is None
    if own_meter:
        from llmco2.measure.meter import EnergyMeter

        meter = EnergyMeter(options.gpus, method=options.method, power_interval_s=options.power_interval_s)
    try:
        store = plan.store = ResultStore.open(options.shard_out)  # now repair what a crash left behind
        device = options.device
        if device is None:
            devices = getattr(meter, "devices", None)
            if not devices:
                raise InvalidInputError("cannot tell which GPU this is; pass its catalog id as `device`", field="device")
            device = detect_device([d.name for d in devices.values()])
            for c in plan.items:
                if c.status == "todo" and c.gpu.id != device:
                    c.status = "other_gpu"
        todo = plan.todo
        counts = plan.counts()
        log.info("%d configurations for %s to measure (%d done before, %d failed before, %d for other GPUs)",
                 len(todo), device, counts["done"], counts["failed"], counts["other_gpu"])
        if todo and options.idle_s > 0 and isinstance(meter, IdleMeter):
            meter.measure_idle_power(options.idle_s)
        if runner is None:
            from llmco2.measure.runner import InferenceRunner

            runner = InferenceRunner(meter, gpus=options.gpus, repeats=options.repeats, warmup=options.warmup,
                                     model_paths=options.model_paths, seed=options.seed, policy=options.policy,
                                     decode_mode=options.decode_mode)
        if todo and options.probe_s > 0 and isinstance(meter, CounterMeter) and meter.method == "nvml_energy":
            load = probe_load if probe_load is not None else runner.counter_load()
            probe = meter.probe_counter(load, options.probe_s)
            log.info("energy counter: update period %.1f ms, increment %s J", probe.period_s * 1000, probe.increment_j)
        measured = failed = 0
        environment = runner.environment() if todo else {}
        try:
            with _progress(options.progress) as bar:
                task = bar.add_task(f"measuring {options.shard_out.name}", total=len(todo))
                for c in todo:
                    bar.update(task, description=f"{c.arch.id} b{c.request.batch_size} p{c.request.prompt_tokens} "
                                                 f"g{c.request.generated_tokens} {c.request.weight_dtype}")
                    try:
                        if isinstance(runner, ModeRunner):
                            runner.decode_mode = decode_mode_of(c.fields["engine"])
                        result = runner.run(c.arch, c.request)
                        table = check_rows(canonical_rows(result, c.arch, c.request, device, source_file=options.shard_out.name,
                                                          first_line=store.next_line, flag_bound=options.flag_bound),
                                           origin=str(options.shard_out))
                    except Exception as exc:
                        reason = f"{type(exc).__name__}: {exc}"
                        log.warning("configuration %d failed: %s", c.number, one_line(reason, 300))
                        store.record_failure(c.key, reason)
                        failed += 1
                    else:
                        store.append(c.key, table, {"number": c.number, "config": c.fields, "device": device,
                                                    "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                                                    "result": result.to_dict(), "environment": environment})
                        measured += 1
                    bar.advance(task)
        finally:
            release = getattr(runner, "release", None)
            if release is not None:
                release()
    finally:
        if own_meter:
            meter.close()
    return {
        "out": str(options.shard_out), "runs_log": str(store.runs_path), "failed_file": str(store.failed_path),
        "device": device, "shard": options.shard, "num_shards": options.num_shards, "configurations": len(plan.items),
        "done_before": counts["done"], "failed_before": counts["failed"], "other_gpu": counts["other_gpu"],
        "measured": measured, "failed": failed, "rows_total": store.rows_written,
    }


def merge_shards(out: str | Path, num_shards: int) -> Any:
    """The shards ``NAME.shardIofK.csv`` of a finished multirun read and concatenated as one canonical table."""
    from llmco2.data.schema import concat_tables, read_table

    paths = [shard_path(Path(out), i, num_shards) for i in range(num_shards)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise InvalidInputError(f"missing shard files: {', '.join(missing)}", field="out")
    return concat_tables(read_table(p)[0] for p in paths)


__all__ = ["SweepOptions", "SweepPlan", "PlannedConfig", "plan_sweep", "run_sweep", "merge_shards", "shard_path",
           "parse_gpus", "parse_model_paths", "detect_device"]
