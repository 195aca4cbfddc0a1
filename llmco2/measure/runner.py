"""Run one inference request and measure its prefill and decode phases separately.

* **prefill**: one forward pass over the whole prompt (``use_cache=True``) that yields the first
  generated token and fills the KV cache;
* **decode**: the remaining ``generated_tokens - 1`` tokens, one forward pass per token over the
  KV cache, greedy, end-of-sequence ignored (so the count is exact).

Every request is run ``warmup`` times unmeasured and then ``repeats`` times measured; each phase
reports the mean and standard deviation of its energy (J, summed over the GPUs serving the
request) and latency (s), the energy above idle, clocks and temperature. The model factory and the
device are injectable: tests run a tiny CPU model with a fake meter.
"""

from __future__ import annotations

import gc
import inspect
import logging
import platform
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch

from llmco2.measure.errors import MeasurementError, UnsupportedConfigError
from llmco2.measure.hf_models import BuiltModel, build_model
from llmco2.measure.meter import Measurement, Meter
from llmco2.specs import ModelArch, Request

log = logging.getLogger(__name__)


class ModelFactory(Protocol):
    """Builds a runnable model; :func:`~llmco2.measure.hf_models.build_model` is the default."""

    def __call__(self, arch: ModelArch, dtype: str, devices: Sequence[torch.device], *, flash_attention: bool = True,
                 model_path: str | None = None, seed: int = 0) -> BuiltModel: ...


@dataclass(frozen=True)
class PhaseStats:
    """One phase over the measured repeats. Energies in J (all GPUs of the request), times in s."""

    phase: str
    repeats: int
    energy_j: float
    energy_std_j: float
    latency_s: float
    latency_std_s: float
    energy_above_idle_j: float | None
    method: str
    energy_per_repeat_j: tuple[float, ...] = ()
    latency_per_repeat_s: tuple[float, ...] = ()
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_max_c: float | None = None

    @classmethod
    def from_measurements(cls, phase: str, ms: Sequence[Measurement]) -> PhaseStats:
        """Mean and sample standard deviation of ``ms`` (at least one)."""
        if not ms:
            raise ValueError(f"no measurement of {phase}")
        energy = [m.total_energy_j for m in ms]
        latency = [m.elapsed_s for m in ms]
        above = [m.energy_above_idle_j for m in ms]

        def std(xs: list[float]) -> float:
            return statistics.stdev(xs) if len(xs) > 1 else 0.0

        def mean_of(values: list[Any]) -> float | None:
            present = [float(v) for v in values if v is not None]
            return statistics.fmean(present) if present else None

        temps = [t for m in ms for t in m.temperature_c.values() if t is not None]
        return cls(
            phase=phase, repeats=len(ms), energy_j=statistics.fmean(energy), energy_std_j=std(energy),
            latency_s=statistics.fmean(latency), latency_std_s=std(latency),
            energy_above_idle_j=None if any(a is None for a in above) else statistics.fmean(a for a in above if a is not None),
            method=ms[0].method, energy_per_repeat_j=tuple(energy), latency_per_repeat_s=tuple(latency),
            sm_clock_mhz=mean_of([c for m in ms for c in m.sm_clock_mhz.values()]),
            mem_clock_mhz=mean_of([c for m in ms for c in m.mem_clock_mhz.values()]),
            temperature_max_c=float(max(temps)) if temps else None,
        )


@dataclass(frozen=True)
class RunResult:
    """Both phases of one request. ``decode`` is None when only one token is generated."""

    prefill: PhaseStats
    decode: PhaseStats | None
    tokens_generated: int
    decode_steps: int
    gpus: tuple[int, ...]
    model_type: str
    weights: str
    notes: tuple[str, ...] = ()
    device_map: dict[str, str] = field(default_factory=dict)

    @property
    def phases(self) -> tuple[PhaseStats, ...]:
        return (self.prefill,) if self.decode is None else (self.prefill, self.decode)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

    from llmco2 import __version__

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
        meter: a :class:`~llmco2.measure.meter.Meter` (windows ``"prefill"`` and ``"decode"``).
        gpus: CUDA indices available; a request on ``n`` GPUs uses the first ``n``.
        repeats: measured runs per request (mean and standard deviation are reported).
        warmup: unmeasured runs before them.
        model_factory: builds the model (default: random weights with transformers).
        device: run on this device instead of ``cuda:<gpu>`` (tests: ``"cpu"``).
        model_paths: catalog model id -> local checkpoint folder, for real weights.
        seed: seeds weights and prompts.
    """

    def __init__(self, meter: Meter, *, gpus: Sequence[int] = (0,), repeats: int = 5, warmup: int = 1,
                 model_factory: ModelFactory | Callable[..., BuiltModel] = build_model, device: str | torch.device | None = None,
                 model_paths: Mapping[str, str] | None = None, seed: int = 0) -> None:
        if repeats < 1:
            raise UnsupportedConfigError(f"repeats must be >= 1, got {repeats}")
        if warmup < 0:
            raise UnsupportedConfigError(f"warmup must be >= 0, got {warmup}")
        self.meter = meter
        self.gpus = tuple(int(g) for g in gpus)
        self.repeats = repeats
        self.warmup = warmup
        self.model_factory = model_factory
        self.device = None if device is None else torch.device(device)
        self.model_paths = dict(model_paths or {})
        self.seed = seed
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
            release_memory()

    # -- running -------------------------------------------------------------------------------
    def run(self, arch: ModelArch, request: Request) -> RunResult:
        """Warm up, then measure prefill and decode ``repeats`` times."""
        try:
            return self._run(arch, request)
        except BaseException:
            self.release()  # an OOM or CUDA error leaves nothing cached behind
            raise

    def _run(self, arch: ModelArch, request: Request) -> RunResult:
        built = self.model_for(arch, request)
        gpus = self.gpus[:request.num_gpus]
        steps = request.decode_steps
        prefill: list[Measurement] = []
        decode: list[Measurement] = []
        generator = torch.Generator().manual_seed(self.seed)
        with torch.inference_mode():
            for i in range(self.warmup + self.repeats):
                measured = i >= self.warmup
                ids = torch.randint(0, built.vocab_size, (request.batch_size, request.prompt_tokens), generator=generator)
                ids = ids.to(built.input_device)
                pre, dec, generated, cached = self._generate(built, ids, steps, measured)
                if generated != request.generated_tokens:
                    raise MeasurementError(f"generated {generated} tokens instead of {request.generated_tokens}")
                if cached is not None and cached != request.prompt_tokens + steps:
                    raise MeasurementError(f"the KV cache holds {cached} tokens instead of {request.prompt_tokens + steps}")
                if measured:
                    assert pre is not None
                    prefill.append(pre.subset(gpus))
                    if dec is not None:
                        decode.append(dec.subset(gpus))
        stats = [PhaseStats.from_measurements("prefill", prefill)]
        if decode:
            stats.append(PhaseStats.from_measurements("decode", decode))
        for s in stats:
            if not s.energy_j > 0:
                raise MeasurementError(f"{s.phase} measured {s.energy_j} J: the window is shorter than the energy counter's "
                                       f"update period (raise the token counts or the batch size)")
        return RunResult(prefill=stats[0], decode=stats[1] if len(stats) > 1 else None, tokens_generated=request.generated_tokens,
                         decode_steps=steps, gpus=gpus, model_type=built.model_type, weights=built.weights, notes=built.notes,
                         device_map=dict(built.device_map))

    def _generate(self, built: BuiltModel, ids: torch.Tensor, steps: int, measured: bool,
                  ) -> tuple[Measurement | None, Measurement | None, int, int | None]:
        """Prefill then ``steps`` greedy decode steps; returns the two measurements (None when not
        measured), the number of tokens generated and the final KV-cache length."""
        model = built.model
        extra = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}
        window = None
        pre = dec = None
        try:
            if measured:
                window = "prefill"
                self.meter.begin_window(window)
            out = model(input_ids=ids, use_cache=True, **extra)
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            cache = out.past_key_values
            generated = 1
            if measured:
                pre = self.meter.end_window("prefill")
                window = None
            if steps:
                if measured:
                    window = "decode"
                    self.meter.begin_window(window)
                for _ in range(steps):
                    out = model(input_ids=token.to(built.input_device), past_key_values=cache, use_cache=True, **extra)
                    cache = out.past_key_values
                    token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                    generated += 1
                if measured:
                    dec = self.meter.end_window("decode")
                    window = None
        except BaseException:
            cancel = getattr(self.meter, "cancel_window", None)
            if window is not None and cancel is not None:
                cancel(window)
            raise
        length = cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
        return pre, dec, generated, None if length is None else int(length)

    def environment(self) -> dict[str, Any]:
        """Software versions and, from the meter, driver, GPU names and idle power."""
        env: dict[str, Any] = {"software": software_versions()}
        describe = getattr(self.meter, "describe", None)
        if describe is not None:
            env["meter"] = describe()
        return env


def _accepts(model: torch.nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
