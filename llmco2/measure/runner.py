"""Run one inference request and measure its prefill and decode phases separately.

* **prefill**: one forward pass over the whole prompt (``use_cache=True``, a fresh KV cache) that
  yields the first generated token and fills the cache;
* **decode**: the remaining ``generated_tokens - 1`` tokens, one forward pass per token over the
  KV cache, greedy, end-of-sequence ignored (so the count is exact). ``decode_mode="eager"``
  (engine ``hf``) runs the model eagerly over a dynamic cache; ``"static"`` (engine
  ``hf-static``) uses transformers' ``StaticCache`` and a ``torch.compile(mode="reduce-overhead")``
  decode step (CUDA graphs), so the same request can be measured launch-bound and closer to
  bandwidth-bound.

Windows (:mod:`llmco2.measure.windows`): a phase shorter than the policy's minimum window is
measured as ``k`` passes back to back in one window — prefill ``amortised`` (``k`` prefill
passes, each with a fresh cache, divided by ``k``), decode ``lengthened`` (``k`` x prefill+decode,
divided by ``k``, minus the prefill of the same repeat). ``k`` comes from one timed pass and, when
the meter has probed its energy counter, one calibration window, so that one counter increment is
at most the policy's target fraction of the window.

Every request is run ``warmup`` times unmeasured and then ``repeats`` times measured; each phase
reports the mean and standard deviation of its per-pass energy (J, summed over the GPUs serving
the request) and latency (s), the energy above idle, clocks, temperature, the window method,
``k``, the window length and the quantisation bound (:mod:`llmco2.measure.results`). The model
factory and the device are injectable: tests run a tiny CPU model (or a simulated one) with a
fake meter.
"""

from __future__ import annotations

import gc
import logging
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, Protocol

import torch

from llmco2.measure.errors import MeasurementError, UnsupportedConfigError
from llmco2.measure.hf_models import BuiltModel, build_model
from llmco2.measure.measurement import Measurement
from llmco2.measure.meter import Meter
from llmco2.measure.passes import DECODE_MODES, ENGINE_OF_MODE, Passes
from llmco2.measure.results import PhaseStats, RunResult
from llmco2.measure.windows import AMORTISED, LENGTHENED, SINGLE, WindowPlan, WindowPolicy, per_pass, quantisation_bound
from llmco2.specs import ModelArch, Request

log = logging.getLogger(__name__)


class ModelFactory(Protocol):
    """Builds a runnable model; :func:`~llmco2.measure.hf_models.build_model` is the default."""

    def __call__(self, arch: ModelArch, dtype: str, devices: Sequence[torch.device], *, flash_attention: bool = True,
                 model_path: str | None = None, seed: int = 0) -> BuiltModel: ...


def software_versions() -> dict[str, str | None]:
    """Python, torch, transformers, CUDA (torch's build) and cuDNN versions."""
    def version_of(module: str) -> str | None:
        mod = sys.modules.get(module)
        if mod is None:
            try:
                mod = __import__(module)
            except ImportError:
                return None
        return str(getattr(mod, "__version__", None))

    from llmco2.version import __version__

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"python": platform.python_version(), "llmco2": __version__, "torch": torch.__version__,
            "transformers": version_of("transformers"), "cuda": torch.version.cuda, "cudnn": None if cudnn is None else str(cudnn)}


def release_memory() -> None:
    """Collect garbage and return cached CUDA memory (after a model is dropped or a run failed)."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class InferenceRunner:
    """Measure requests with a meter.

    Args:
        meter: a :class:`~llmco2.measure.meter.Meter` (windows ``"prefill"`` and ``"decode"``;
            calibration windows ``"calibrate_prefill"`` / ``"calibrate_decode"``). If it has a
            ``counter_probe`` (:meth:`EnergyMeter.probe_counter`), windows are sized in energy too.
        gpus: CUDA indices available; a request on ``n`` GPUs uses the first ``n``.
        repeats: measured runs per request (mean and standard deviation are reported).
        warmup: unmeasured runs before them.
        model_factory: builds the model (default: random weights with transformers).
        device: run on this device instead of ``cuda:<gpu>`` (tests: ``"cpu"``).
        model_paths: catalog model id -> local checkpoint folder, for real weights.
        seed: seeds weights and prompts.
        policy: how long windows must be (:class:`~llmco2.measure.windows.WindowPolicy`).
        decode_mode: ``eager`` (engine ``hf``) or ``static`` (``hf-static``) for every request.
        compile_decode: compile the static decode step (``False`` only in CPU tests).
        clock: monotonic seconds used to time single passes (default ``time.perf_counter``).
    """

    def __init__(self, meter: Meter, *, gpus: Sequence[int] = (0,), repeats: int = 5, warmup: int = 1,
                 model_factory: ModelFactory | Callable[..., BuiltModel] = build_model, device: str | torch.device | None = None,
                 model_paths: Mapping[str, str] | None = None, seed: int = 0, policy: WindowPolicy | None = None,
                 decode_mode: str = "eager", compile_decode: bool = True, clock: Callable[[], float] | None = None) -> None:
        if repeats < 1:
            raise UnsupportedConfigError(f"repeats must be >= 1, got {repeats}")
        if warmup < 0:
            raise UnsupportedConfigError(f"warmup must be >= 0, got {warmup}")
        if decode_mode not in DECODE_MODES:
            raise UnsupportedConfigError(f"decode mode must be one of {', '.join(DECODE_MODES)}, got {decode_mode!r}")
        self.meter = meter
        self.gpus = tuple(int(g) for g in gpus)
        self.repeats = repeats
        self.warmup = warmup
        self.model_factory = model_factory
        self.device = None if device is None else torch.device(device)
        self.model_paths = dict(model_paths or {})
        self.seed = seed
        self.policy = policy if policy is not None else WindowPolicy()
        self.decode_mode = decode_mode
        self.compile_decode = compile_decode
        self.clock = clock if clock is not None else time.perf_counter
        self._cached: tuple[tuple, BuiltModel] | None = None
        self._warned_pipeline = False

    # -- model ---------------------------------------------------------------------------------
    def devices_for(self, num_gpus: int) -> list[torch.device]:
        """The devices a request on ``num_gpus`` GPUs runs on."""
        if num_gpus > len(self.gpus):
            raise UnsupportedConfigError(f"the request needs {num_gpus} GPUs but only {len(self.gpus)} are given ({list(self.gpus)})")
        if self.device is not None:
            return [self.device] * num_gpus
        return [torch.device("cuda", g) for g in self.gpus[:num_gpus]]

    def model_for(self, arch: ModelArch, request: Request) -> BuiltModel:
        """The model of ``request`` (the previous one is reused when identical, else freed first)."""
        devices = self.devices_for(request.num_gpus)
        path = self.model_paths.get(arch.id)
        key = (arch, request.weight_dtype, tuple(str(d) for d in devices), request.flash_attention, path)
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        self.release()
        if request.num_gpus > 1 and not self._warned_pipeline:
            log.warning("requests on several GPUs run as a layer-wise (pipeline) split; true tensor parallelism needs another "
                        "engine such as vLLM")
            self._warned_pipeline = True
        built = self.model_factory(arch, request.weight_dtype, devices, flash_attention=request.flash_attention,
                                   model_path=path, seed=self.seed)
        self._cached = (key, built)
        return built

    def release(self) -> None:
        """Drop the cached model and free its memory."""
        if self._cached is not None:
            self._cached = None
            dynamo = sys.modules.get("torch._dynamo")
            if dynamo is not None:  # compiled decode steps and their CUDA graphs belong to the dropped model
                dynamo.reset()
            release_memory()

    def counter_load(self, size: int = 4096) -> Callable[[], None]:
        """A load for :meth:`EnergyMeter.probe_counter`: each call queues one ``size`` x ``size``
        half-precision matrix product on every GPU, without waiting for it."""
        devices = self.devices_for(len(self.gpus))
        dtype = torch.float16 if all(d.type == "cuda" for d in devices) else torch.float32
        mats = [torch.randn(size, size, device=d, dtype=dtype) for d in devices]

        def load() -> None:
            for m in mats:
                torch.mm(m, m)

        return load

    # -- running -------------------------------------------------------------------------------
    def run(self, arch: ModelArch, request: Request) -> RunResult:
        """Warm up, plan the windows, then measure prefill and decode ``repeats`` times."""
        try:
            return self._run(arch, request)
        except BaseException:
            self.release()  # an OOM or CUDA error leaves nothing cached behind
            raise

    def _synchronize(self, gpus: Sequence[int]) -> None:
        if self.device is None and torch.cuda.is_available() and torch.cuda.is_initialized():
            for g in gpus:
                torch.cuda.synchronize(g)

    def _timed(self, fn: Callable[[], Any], gpus: Sequence[int]) -> float:
        self._synchronize(gpus)
        t0 = self.clock()
        fn()
        self._synchronize(gpus)
        return self.clock() - t0

    def _window(self, name: str, fn: Callable[[], Any], k: int) -> Measurement:
        """``fn`` run ``k`` times inside window ``name`` (cancelled if it fails)."""
        self.meter.begin_window(name)
        try:
            for _ in range(k):
                fn()
        except BaseException:
            cancel = getattr(self.meter, "cancel_window", None)
            if cancel is not None:
                cancel(name)
            raise
        return self.meter.end_window(name)

    def _plan(self, passes: Passes, ids: torch.Tensor, gpus: Sequence[int], increment: float | None, minimum: float,
              ) -> tuple[WindowPlan, WindowPlan | None, float | None]:
        """Window plans of prefill and decode, and the calibrated prefill energy per pass (J)."""
        policy = self.policy
        if minimum <= 0 and increment is None:
            return WindowPlan(SINGLE, 1), (WindowPlan(SINGLE, 1) if passes.steps else None), None
        t_pre = min(self._timed(lambda: passes.prefill(ids), gpus) for _ in range(2))  # the first may carry one-time costs
        k_pre = policy.passes(t_pre, minimum)
        e_pre = None
        if increment is not None:
            m = self._window("calibrate_prefill", lambda: passes.prefill(ids), k_pre).subset(gpus)
            e_pre = m.total_energy_j / k_pre
            k_pre = policy.passes(m.elapsed_s / k_pre, minimum, increment, e_pre)
        pre_plan = WindowPlan(AMORTISED if k_pre > 1 else SINGLE, k_pre)
        if not passes.steps:
            return pre_plan, None, e_pre
        state = passes.prefill(ids)
        t_dec = self._timed(lambda: passes.decode(*state), gpus)
        if t_dec < minimum:  # a short decode is timed twice (the first may carry one-time costs)
            state = passes.prefill(ids)
            t_dec = min(t_dec, self._timed(lambda: passes.decode(*state), gpus))
        k_dec = 1 if t_dec >= minimum else policy.passes(t_pre + t_dec, minimum)
        if increment is not None:
            if k_dec == 1:
                state = passes.prefill(ids)
                m = self._window("calibrate_decode", lambda: passes.decode(*state), 1).subset(gpus)
                e_dec = m.total_energy_j
            else:
                m = self._window("calibrate_decode", lambda: passes.full(ids), k_dec).subset(gpus)
                e_dec = m.total_energy_j / k_dec - (e_pre or 0.0)
            k_dec = policy.passes((t_pre if k_dec > 1 else 0.0) + t_dec, minimum, increment, max(e_dec, 0.0))
            if k_dec > 1:  # lengthened: its error and that of the prefill subtracted add up; half the target each
                k_dec = policy.passes(t_pre + t_dec, minimum, increment, max(e_dec, 0.0), share=0.5)
                k_pre = max(k_pre, policy.passes(t_pre, minimum, increment, max(e_dec, 0.0), share=0.5))
                pre_plan = WindowPlan(AMORTISED if k_pre > 1 else SINGLE, k_pre)
        return pre_plan, WindowPlan(LENGTHENED if k_dec > 1 else SINGLE, k_dec), e_pre

    def _run(self, arch: ModelArch, request: Request) -> RunResult:
        built = self.model_for(arch, request)
        gpus = self.gpus[:request.num_gpus]
        steps = request.decode_steps
        probe = getattr(self.meter, "counter_probe", None)
        increment = probe.increment_for(gpus) if probe is not None else None
        minimum = self.policy.minimum_s(probe)
        passes = Passes(built.model, built.input_device, request.batch_size, request.prompt_tokens, steps, self.decode_mode,
                        self.compile_decode)
        generator = torch.Generator().manual_seed(self.seed)

        def draw() -> torch.Tensor:
            ids = torch.randint(0, built.vocab_size, (request.batch_size, request.prompt_tokens), generator=generator)
            return ids.to(built.input_device)

        prefill: list[Measurement] = []
        decode: list[Measurement] = []
        windows: dict[str, list[float]] = {"prefill": [], "decode": []}
        # no_grad, not inference_mode, for compiled static decoding: CUDA-graph capture may update
        # the cache in place outside inference mode, which inference tensors forbid
        with torch.no_grad() if self.decode_mode == "static" else torch.inference_mode():
            for _ in range(self.warmup):
                generated = passes.full(draw())
                if generated != request.generated_tokens:
                    raise MeasurementError(f"generated {generated} tokens instead of {request.generated_tokens}")
            pre_plan, dec_plan, _ = self._plan(passes, draw(), gpus, increment, minimum)
            for _ in range(self.repeats):
                ids = draw()
                last: list[Any] = [None]  # the last prefill pass's token and cache: the decode window goes on from them

                def prefill_pass() -> None:
                    last[0] = None  # noqa: B023 (run at once; frees the previous cache: one alive at a time)
                    last[0] = passes.prefill(ids)  # noqa: B023 (run at once)

                w = self._window("prefill", prefill_pass, pre_plan.k)
                windows["prefill"].append(w.elapsed_s)
                pre = per_pass(w.subset(gpus), pre_plan.k)
                prefill.append(pre)
                if dec_plan is None:
                    continue
                if dec_plan.method == SINGLE:
                    state, last[0] = last[0], None
                    w = self._window("decode", lambda: passes.decode(*state), 1)  # noqa: B023
                    decode.append(per_pass(w.subset(gpus), 1))
                else:
                    w = self._window("decode", lambda: passes.full(ids), dec_plan.k)  # noqa: B023
                    decode.append(per_pass(w.subset(gpus), dec_plan.k, minus=[pre], name="decode"))
                windows["decode"].append(w.elapsed_s)
        stats = [self._stats("prefill", prefill, pre_plan, windows["prefill"], increment)]
        if decode and dec_plan is not None:
            extra = increment / pre_plan.k if (increment is not None and dec_plan.method == LENGTHENED) else 0.0
            stats.append(self._stats("decode", decode, dec_plan, windows["decode"], increment, extra))
        for s in stats:
            if not s.energy_j > 0:
                raise MeasurementError(f"{s.phase} measured {s.energy_j:.4g} J with {s.window_passes} pass(es) per {s.window_method} "
                                       f"window; the window is too short for the energy counter (raise min_window_s)")
        idle = getattr(self.meter, "idle_power_w", {}) or {}
        limits_of = getattr(self.meter, "power_limits_w", None)
        limits = limits_of() if callable(limits_of) else {}
        return RunResult(prefill=stats[0], decode=stats[1] if len(stats) > 1 else None, tokens_generated=request.generated_tokens,
                         decode_steps=steps, gpus=gpus, model_type=built.model_type, weights=built.weights, notes=built.notes,
                         device_map=dict(built.device_map), engine=ENGINE_OF_MODE[self.decode_mode],
                         attention=attention_of(built.model, request.flash_attention),
                         idle_power_w=_mean([idle.get(g) for g in gpus]), power_limit_w=_mean([limits.get(g) for g in gpus]))

    @staticmethod
    def _stats(phase: str, ms: list[Measurement], plan: WindowPlan, windows: list[float], increment: float | None,
               extra_j: float = 0.0) -> PhaseStats:
        stats = PhaseStats.from_measurements(phase, ms)
        return replace(stats, window_method=plan.method, window_passes=plan.k, window_s=statistics.fmean(windows),
                       quantisation_bound=quantisation_bound(increment, plan.k, stats.energy_j, extra_j))

    def environment(self) -> dict[str, Any]:
        """Software versions and, from the meter, driver, GPU names, idle power and the counter probe."""
        env: dict[str, Any] = {"software": software_versions(), "window_policy": asdict(self.policy),
                               "decode_mode": self.decode_mode}
        describe = getattr(self.meter, "describe", None)
        if describe is not None:
            env["meter"] = describe()
        return env


def attention_of(model: Any, flash_attention: bool) -> str:
    """The attention implementation the model runs (its config's, after any fallback), else the requested one."""
    config = getattr(model, "config", None)
    found = getattr(config, "_attn_implementation", None) if config is not None else None
    return str(found) if found else ("sdpa" if flash_attention else "eager")


def _mean(values: Sequence[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.fmean(present) if present else None
