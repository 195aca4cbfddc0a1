"""Thin wrapper over the NVML bindings (``nvidia-ml-py``, imported as ``pynvml``).

The bindings are imported lazily (the ``[measure]`` extra); the module attribute :data:`pynvml`
is where they live once loaded, and where tests put a fake module. Every call goes through
:func:`call`, which turns an ``NVMLError`` into a typed :class:`~llmco2.measure.errors.NVMLCallError`
subclass naming the call and the GPU. Units: energy in millijoules (mJ) and power in milliwatts
(mW) as NVML reports them, clocks in MHz, temperatures in degrees Celsius.

GPU indices are the ones CUDA (and torch) use; :func:`nvml_target` maps them to NVML's numbering
through ``CUDA_VISIBLE_DEVICES`` (integers or ``GPU-`` UUIDs).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmco2.errors import InvalidInputError
from llmco2.measure.errors import (
    NoGPUError,
    NVMLCallError,
    NVMLGPULostError,
    NVMLNoPermissionError,
    NVMLNotSupportedError,
    NVMLTimeoutError,
    NVMLUninitializedError,
    NVMLUnknownError,
)

log = logging.getLogger(__name__)

#: The NVML bindings module once imported (``None`` before); tests replace it with a fake.
pynvml: Any = None

INSTALL_HINT = "pip install 'llmco2[measure]' (nvidia-ml-py)"
NO_GPU_HINT = "energy measurements need an NVIDIA GPU and driver; a dry run (`dry_run=True`) shows the plan without one"

# NVML return-code names -> typed errors (resolved against the loaded bindings).
_ERROR_CLASSES: dict[str, type[NVMLCallError]] = {
    "NVML_ERROR_NOT_SUPPORTED": NVMLNotSupportedError,
    "NVML_ERROR_NO_PERMISSION": NVMLNoPermissionError,
    "NVML_ERROR_UNINITIALIZED": NVMLUninitializedError,
    "NVML_ERROR_GPU_IS_LOST": NVMLGPULostError,
    "NVML_ERROR_RESET_REQUIRED": NVMLGPULostError,
    "NVML_ERROR_TIMEOUT": NVMLTimeoutError,
}


def bindings() -> Any:
    """The ``pynvml`` module, imported on first use; `NoGPUError` when it is not installed."""
    global pynvml
    if pynvml is None:
        try:
            import pynvml as module
        except ImportError:
            raise NoGPUError(f"the NVML bindings are not installed; {INSTALL_HINT}") from None
        pynvml = module
    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _code_name(nv: Any, code: int | None) -> str | None:
    for name in _ERROR_CLASSES:
        if code is not None and getattr(nv, name, object()) == code:
            return name
    return None


def translate(exc: BaseException, function: str, gpu: int | None = None) -> NVMLCallError:
    """The typed error for an ``NVMLError`` raised by ``function`` (on ``gpu``)."""
    nv = bindings()
    code = getattr(exc, "value", None)
    cls = _ERROR_CLASSES.get(_code_name(nv, code) or "", NVMLUnknownError)
    where = f" on GPU {gpu}" if gpu is not None else ""
    return cls(f"NVML {function}{where} failed: {exc} (NVML return code {code})", code=code, function=function, gpu=gpu)


def call(function: str, *args: Any, gpu: int | None = None) -> Any:
    """``pynvml.<function>(*args)`` with NVML errors turned into typed errors."""
    nv = bindings()
    try:
        return getattr(nv, function)(*args)
    except nv.NVMLError as exc:
        raise translate(exc, function, gpu) from exc


def nvml_target(cuda_index: int, env: Mapping[str, str] | None = None) -> int | str:
    """NVML index (int) or UUID (str) of the GPU that CUDA calls ``cuda_index``.

    Follows ``CUDA_VISIBLE_DEVICES`` (integers or ``GPU-`` UUIDs; CUDA stops at the first entry
    it cannot parse). Assumes ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` order, NVML's own, when several
    different GPU models share a machine.
    """
    env = os.environ if env is None else env
    if cuda_index < 0:
        raise InvalidInputError(f"GPU indices are >= 0, got {cuda_index}", field="gpus")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return cuda_index
    entries: list[str] = []
    for raw in visible.split(","):
        item = raw.strip()
        if not item or item.startswith("-"):
            break
        entries.append(item)
    if not entries:
        raise NoGPUError(f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU; {NO_GPU_HINT}")
    if cuda_index >= len(entries):
        raise InvalidInputError(f"GPU {cuda_index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} shows {len(entries)} GPU(s)",
                                field="gpus")
    item = entries[cuda_index]
    if item.isdigit():
        return int(item)
    if item.startswith("MIG-"):
        raise NoGPUError(f"GPU {cuda_index} is a MIG instance ({item}); NVML reports no energy or power per MIG instance")
    return item


@dataclass
class NVMLDevice:
    """One GPU as NVML sees it. ``index`` is the CUDA index the caller uses."""

    index: int
    handle: Any
    name: str
    uuid: str = ""

    def total_energy_mj(self) -> int:
        """Energy used since the driver was loaded, in millijoules (an unsigned 64-bit counter)."""
        return int(call("nvmlDeviceGetTotalEnergyConsumption", self.handle, gpu=self.index))

    def power_mw(self) -> int:
        """Power draw in milliwatts (NVML averages it over a short, GPU-dependent window)."""
        return int(call("nvmlDeviceGetPowerUsage", self.handle, gpu=self.index))

    def has_energy_counter(self) -> bool:
        """Whether the total-energy counter works here (Volta and newer); other NVML errors propagate."""
        try:
            self.total_energy_mj()
        except NVMLNotSupportedError:
            return False
        return True

    def _optional(self, function: str, *args: Any) -> int | None:
        try:
            return int(call(function, self.handle, *args, gpu=self.index))
        except (NVMLNotSupportedError, NVMLNoPermissionError):
            return None

    def sm_clock_mhz(self) -> int | None:
        """Current streaming-multiprocessor clock in MHz (``None`` when not reported)."""
        return self._optional("nvmlDeviceGetClockInfo", bindings().NVML_CLOCK_SM)

    def mem_clock_mhz(self) -> int | None:
        """Current memory clock in MHz (``None`` when not reported)."""
        return self._optional("nvmlDeviceGetClockInfo", bindings().NVML_CLOCK_MEM)

    def power_limit_w(self) -> float | None:
        """Enforced power limit in watts (``nvmlDeviceGetEnforcedPowerLimit``, mW; ``None`` when not reported)."""
        limit = self._optional("nvmlDeviceGetEnforcedPowerLimit")
        return None if limit is None else limit / 1000.0

    def temperature_c(self) -> int | None:
        """GPU die temperature in degrees Celsius (``None`` when not reported)."""
        return self._optional("nvmlDeviceGetTemperature", bindings().NVML_TEMPERATURE_GPU)


class NVMLSession:
    """NVML initialised for the life of this object (``close`` shuts it down).

    Raises `NoGPUError` (one line, exit code 2 on the command line) when there is no driver,
    no library or no GPU.
    """

    def __init__(self) -> None:
        nv = bindings()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:  # whatever the code, nothing can be measured: say so in one line
            raise NoGPUError(f"no NVIDIA GPU can be measured here: NVML did not start ({exc}); {NO_GPU_HINT}") from None
        self._open = True
        count = self.device_count()
        if count == 0:
            self.close()
            raise NoGPUError(f"NVML found no GPU; {NO_GPU_HINT}")

    def device_count(self) -> int:
        return int(call("nvmlDeviceGetCount"))

    def device(self, cuda_index: int, env: Mapping[str, str] | None = None) -> NVMLDevice:
        """The GPU that CUDA numbers ``cuda_index`` (see :func:`nvml_target`)."""
        target = nvml_target(cuda_index, env)
        if isinstance(target, int):
            count = self.device_count()
            if target >= count:
                raise InvalidInputError(f"GPU {target} does not exist; NVML sees {count} GPU(s) (0..{count - 1})", field="gpus")
            handle = call("nvmlDeviceGetHandleByIndex", target, gpu=cuda_index)
        else:
            handle = call("nvmlDeviceGetHandleByUUID", target, gpu=cuda_index)
        name = _text(call("nvmlDeviceGetName", handle, gpu=cuda_index))
        try:
            uuid = _text(call("nvmlDeviceGetUUID", handle, gpu=cuda_index))
        except NVMLCallError:
            uuid = ""
        return NVMLDevice(index=cuda_index, handle=handle, name=name, uuid=uuid)

    def driver_version(self) -> str:
        """The NVIDIA driver version, e.g. ``"550.54.15"``."""
        return _text(call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> str | None:
        """Highest CUDA version the driver supports, e.g. ``"12.4"`` (``None`` if not reported)."""
        try:
            raw = int(call("nvmlSystemGetCudaDriverVersion"))
        except NVMLCallError:
            return None
        return f"{raw // 1000}.{raw % 1000 // 10}"

    def close(self) -> None:
        if getattr(self, "_open", False):
            self._open = False
            try:
                call("nvmlShutdown")
            except NVMLCallError as exc:  # shutting down never masks the real outcome
                log.debug("nvmlShutdown: %s", exc)
