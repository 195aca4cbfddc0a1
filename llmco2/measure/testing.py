"""Stand-ins for running the harness without a GPU: fake NVML bindings, a fake meter and a tiny
CPU model factory. Used by the test suite; handy to try a sweep end to end on a laptop.

* :class:`FakeNVML` — an object shaped like the ``pynvml`` module (same function names, argument
  lists and error codes) whose energy counters, power readings and failures are scripted;
  install it with ``unittest.mock.patch("llmco2.measure.nvml.pynvml", FakeNVML(...))``.
* :class:`FakeMeter` — the meter interface with energy = a constant power x elapsed time.
* :func:`tiny_llama_factory` — a two-layer, 64-wide Llama with random weights, whatever the
  architecture asked for.
* :class:`SimulatedGPU` / :class:`SimulatedModel` — a GPU on a simulated clock whose energy counter
  updates only every 100 ms (as NVML's does), and a model whose passes spend known simulated
  time and energy there: the ground truth against which amortised windows are checked.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from llmco2.measure.errors import WindowError
from llmco2.measure.measurement import Measurement


class _FakeNVMLError(Exception):
    """Shaped like ``pynvml.NVMLError``: the return code in ``value``."""

    _names = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
              9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found", 15: "GPU is lost",
              999: "Unknown Error"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._names.get(self.value, f"NVML Error with code {self.value}")


class FakeNVML:
    """A scripted stand-in for the ``pynvml`` module.

    Args:
        energy_mj: per NVML index, an iterator of counter readings (mJ), or ``None`` for a GPU
            without the counter (``NVML_ERROR_NOT_SUPPORTED``, like pre-Volta GPUs).
        power_mw: per NVML index, an iterator of power readings (mW).
        names: GPU names (default ``"NVIDIA H100 80GB HBM3"``).
        fail: function name -> NVML return code that the call raises (every time).
        init_error: return code raised by ``nvmlInit`` (e.g. 12, library not found).
    """

    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_RESET_REQUIRED = 16
    NVML_ERROR_UNKNOWN = 999
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVMLError = _FakeNVMLError

    def __init__(self, energy_mj: Sequence[Iterator[int] | None] | None = None, power_mw: Sequence[Iterator[int]] | None = None,
                 names: Sequence[str] | None = None, fail: Mapping[str, int] | None = None, init_error: int | None = None) -> None:
        n = len(energy_mj) if energy_mj is not None else len(power_mw) if power_mw is not None else 1
        self.energy = list(energy_mj) if energy_mj is not None else [itertools.count(0, 1000) for _ in range(n)]
        self.power = list(power_mw) if power_mw is not None else [itertools.repeat(100_000) for _ in range(n)]
        self.names = list(names) if names is not None else ["NVIDIA H100 80GB HBM3"] * n
        self.fail = dict(fail or {})
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.initialised = 0

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.fail:
            raise _FakeNVMLError(self.fail[name])
        if name not in ("nvmlInit", "nvmlShutdown") and self.initialised <= 0:
            raise _FakeNVMLError(self.NVML_ERROR_UNINITIALIZED)

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise _FakeNVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.names):
            raise _FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return ("gpu", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[str, int]:
        self._call("nvmlDeviceGetHandleByUUID")
        for i in range(len(self.names)):
            if uuid == f"GPU-fake-{i}":
                return ("gpu", i)
        raise _FakeNVMLError(self.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetName(self, handle: tuple[str, int]) -> str:
        self._call("nvmlDeviceGetName")
        return self.names[handle[1]]

    def nvmlDeviceGetUUID(self, handle: tuple[str, int]) -> str:
        self._call("nvmlDeviceGetUUID")
        return f"GPU-fake-{handle[1]}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: tuple[str, int]) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        counter = self.energy[handle[1]]
        if counter is None:
            raise _FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return next(counter)

    def nvmlDeviceGetPowerUsage(self, handle: tuple[str, int]) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return next(self.power[handle[1]])

    def nvmlDeviceGetClockInfo(self, handle: tuple[str, int], type: int) -> int:  # noqa: A002 (pynvml's name)
        self._call("nvmlDeviceGetClockInfo")
        return 1980 if type == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, handle: tuple[str, int], sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return 40 + handle[1]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: tuple[str, int]) -> int:
        self._call("nvmlDeviceGetEnforcedPowerLimit")
        return 700_000

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._call("nvmlSystemGetCudaDriverVersion")
        return 12040


class FakeMeter:
    """The meter interface without hardware: each GPU draws ``power_w`` watts (plus ``idle_w``
    reported as idle power), so a window's energy is power x its elapsed time on ``clock``."""

    method = "nvml_energy"

    def __init__(self, gpus: Sequence[int] = (0,), power_w: float = 100.0, idle_w: float | None = 20.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.gpus = tuple(gpus)
        self.power_w = power_w
        self._idle = {g: idle_w for g in self.gpus} if idle_w is not None else {}
        self.clock = clock
        self.open: dict[str, float] = {}
        self.windows: list[Measurement] = []
        self.cancelled: list[str] = []

    @property
    def idle_power_w(self) -> dict[int, float]:
        return dict(self._idle)

    def begin_window(self, name: str) -> None:
        if name in self.open:
            raise WindowError(f"window {name!r} is already open")
        self.open[name] = self.clock()

    def end_window(self, name: str) -> Measurement:
        if name not in self.open:
            raise WindowError(f"window {name!r} was not begun")
        elapsed = max(self.clock() - self.open.pop(name), 1e-9)
        m = Measurement(name=name, elapsed_s=elapsed, energy_j={g: self.power_w * elapsed for g in self.gpus}, method=self.method,
                        idle_power_w=dict(self._idle), sm_clock_mhz={g: 1980 for g in self.gpus},
                        mem_clock_mhz={g: 2619 for g in self.gpus}, temperature_c={g: 40 for g in self.gpus})
        self.windows.append(m)
        return m

    def cancel_window(self, name: str) -> None:
        if self.open.pop(name, None) is not None:
            self.cancelled.append(name)

    def measure_idle_power(self, duration_s: float = 5.0, sleep: Any = None) -> dict[int, float]:
        return dict(self._idle)

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "driver_version": "fake", "gpus": {str(g): {"name": "fake GPU"} for g in self.gpus}}


def tiny_llama_factory(arch: Any, dtype: str, devices: Sequence[Any], *, flash_attention: bool = True,
                       model_path: str | None = None, seed: int = 0) -> Any:
    """A 2-layer Llama (hidden 64, 4 heads, 2 KV heads, vocabulary 128) in fp32 on ``devices[0]``,
    standing in for any architecture (the ``model_factory`` of :class:`InferenceRunner`)."""
    import torch

    from llmco2.measure.hf_models import BuiltModel, transformers_module

    tf = transformers_module()
    torch.manual_seed(seed)
    config = tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            vocab_size=128, max_position_embeddings=4096, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    device = torch.device(devices[0])
    with device:
        model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa" if flash_attention else "eager")
    model.eval()
    return BuiltModel(model=model, input_device=device, vocab_size=128, weights="random", model_type="llama",
                      notes=("tiny stand-in model",), param_count=sum(p.numel() for p in model.parameters()))


class SimulatedGPU:
    """A GPU on a simulated clock whose NVML energy counter is updated only every ``period_s``.

    Time advances only through :meth:`work` (at ``busy_w`` watts), :meth:`idle` (``idle_w``),
    counter reads (``read_latency_s`` each) and :meth:`sync`. :meth:`queue` adds work without
    waiting, as a CUDA launch does: reads then run at ``busy_w`` while queued work is left, and
    :meth:`sync` (the meter's ``sync``) runs it to the end. The counter holds the exact energy (mJ) up to
    its last update, as NVML's does, so under ``busy_w`` load it grows by ``busy_w x period_s`` J
    per update (25 J with the defaults) and a window shorter than a period reads 0 J or a whole
    increment. ``busy_j`` is the ground truth: energy spent in :meth:`work`.
    """

    def __init__(self, period_s: float = 0.1, busy_w: float = 250.0, idle_w: float = 60.0, read_latency_s: float = 5e-4) -> None:
        self.period_s = period_s
        self.busy_w = busy_w
        self.idle_w = idle_w
        self.read_latency_s = read_latency_s
        self.t = 0.0
        self.energy_j = 0.0
        self.busy_j = 0.0
        self._counter_mj = 0
        self._next_update = period_s
        self._queued_s = 0.0

    def clock(self) -> float:
        return self.t

    def _advance(self, seconds: float, power_w: float) -> None:
        end = self.t + seconds
        while self._next_update <= end:
            self.energy_j += power_w * (self._next_update - self.t)
            self.t = self._next_update
            self._counter_mj = int(self.energy_j * 1000)
            self._next_update += self.period_s
        self.energy_j += power_w * (end - self.t)
        self.t = end

    def work(self, seconds: float) -> None:
        """Run the queued work, then ``seconds`` more, at ``busy_w`` (waiting for it)."""
        self.sync()
        self._advance(seconds, self.busy_w)
        self.busy_j += self.busy_w * seconds

    def queue(self, seconds: float) -> None:
        """Queue ``seconds`` of work without waiting for it."""
        self._queued_s += seconds

    def sync(self) -> None:
        """Wait for the queued work."""
        queued, self._queued_s = self._queued_s, 0.0
        self._advance(queued, self.busy_w)

    def idle(self, seconds: float) -> None:
        """``seconds`` pass: busy while queued work is left, idle after."""
        busy = min(seconds, self._queued_s)
        self._queued_s -= busy
        self._advance(busy, self.busy_w)
        self._advance(seconds - busy, self.idle_w)

    def read_counter_mj(self) -> int:
        self.idle(self.read_latency_s)
        return self._counter_mj

    def counter(self) -> Iterator[int]:
        """An endless iterator of counter readings (for :class:`FakeNVML`'s ``energy_mj``)."""
        return iter(self.read_counter_mj, None)

    def load(self, seconds: float = 1e-3) -> Callable[[], None]:
        """A probe load: each call queues ``seconds`` of work (a kernel launch)."""
        return lambda: self.queue(seconds)


class _SimCache:
    def __init__(self) -> None:
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length


class SimulatedModel:
    """A causal LM stand-in that spends simulated GPU time: a prefill of ``b x n`` tokens takes
    ``prefill_s_per_token x b x n`` seconds, a decode step ``decode_step_s`` (both at the GPU's busy
    power). It returns logits over ``vocab`` tokens and a cache that counts its tokens; each
    prefill gets a fresh cache. ``truth_j(phase, ...)`` is the energy a phase really used."""

    def __init__(self, gpu: SimulatedGPU, prefill_s_per_token: float = 0.040 / 512, decode_step_s: float = 0.010, vocab: int = 32) -> None:
        self.gpu = gpu
        self.prefill_s_per_token = prefill_s_per_token
        self.decode_step_s = decode_step_s
        self.vocab = vocab
        self.calls: list[tuple[str, int]] = []

    def __call__(self, input_ids: Any, past_key_values: Any = None, use_cache: bool = True, **kwargs: Any) -> Any:
        import torch

        b, n = input_ids.shape
        cache = past_key_values if past_key_values is not None else _SimCache()
        if cache.length == 0:
            self.gpu.work(self.prefill_s_per_token * b * n)
            self.calls.append(("prefill", n))
        else:
            self.gpu.work(self.decode_step_s)
            self.calls.append(("decode", n))
        cache.length += n
        logits = torch.zeros(b, 1, self.vocab)
        logits[..., cache.length % self.vocab] = 1.0
        return SimpleNamespace(logits=logits, past_key_values=cache)

    def prefill_truth_j(self, batch_size: int, prompt_tokens: int) -> float:
        return self.gpu.busy_w * self.prefill_s_per_token * batch_size * prompt_tokens

    def decode_truth_j(self, steps: int) -> float:
        return self.gpu.busy_w * self.decode_step_s * steps


def simulated_factory(model: SimulatedModel) -> Callable[..., Any]:
    """A ``model_factory`` for :class:`~llmco2.measure.runner.InferenceRunner` that returns ``model``."""
    def factory(arch: Any, dtype: str, devices: Sequence[Any], **kwargs: Any) -> Any:
        import torch

        from llmco2.measure.hf_models import BuiltModel

        return BuiltModel(model=model, input_device=torch.device("cpu"), vocab_size=model.vocab, weights="random",  # type: ignore[arg-type]
                          model_type="simulated", notes=("simulated model",))

    return factory
