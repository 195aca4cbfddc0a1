"""Typed errors of the measurement harness.

Two families:

* what the user can fix on the command line (no GPU here, a configuration this engine cannot
  run) subclasses :class:`~llmco2.errors.InvalidInputError`, so ``llmco2 measure`` exits with
  code 2 and one line;
* what goes wrong while measuring (an NVML call fails, the energy counter goes backwards)
  subclasses :class:`MeasurementError`; a sweep records it as the reason a configuration failed.
"""

from __future__ import annotations

from llmco2.errors import InvalidInputError, LLMCO2Error


class NoGPUError(InvalidInputError):
    """No NVIDIA GPU can be measured here (no driver, no NVML, no device, or the bindings are missing)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field=None)


class UnsupportedConfigError(InvalidInputError):
    """A configuration that this engine cannot run (e.g. an int4 dtype, more GPUs than given)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field=None)


class MeasurementError(LLMCO2Error, RuntimeError):
    """A measurement could not be taken or is not trustworthy."""


class WindowError(MeasurementError, ValueError):
    """Measurement windows used wrongly: a name begun twice, or ended without being begun."""


class CounterWrapError(MeasurementError):
    """A GPU's cumulative energy counter went backwards by more than a wrap-around explains.

    Attributes:
        gpu: GPU index (as the caller numbers it).
        begin_mj / end_mj: the two counter readings, in millijoules.
    """

    def __init__(self, message: str, gpu: int, begin_mj: int, end_mj: int) -> None:
        super().__init__(message)
        self.gpu = gpu
        self.begin_mj = begin_mj
        self.end_mj = end_mj


class NVMLCallError(MeasurementError):
    """An NVML call failed. ``code`` is the NVML return code, ``function`` the call, ``gpu`` the
    GPU index (``None`` for system-wide calls)."""

    def __init__(self, message: str, code: int | None = None, function: str = "", gpu: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.function = function
        self.gpu = gpu


class NVMLNotSupportedError(NVMLCallError):
    """NVML_ERROR_NOT_SUPPORTED: this GPU or driver does not provide the queried value."""


class NVMLNoPermissionError(NVMLCallError):
    """NVML_ERROR_NO_PERMISSION: the process lacks the rights for the call."""


class NVMLUninitializedError(NVMLCallError):
    """NVML_ERROR_UNINITIALIZED: NVML was not initialised (or was shut down)."""


class NVMLGPULostError(NVMLCallError):
    """NVML_ERROR_GPU_IS_LOST / NVML_ERROR_RESET_REQUIRED: the GPU fell off the bus or needs a reset."""


class NVMLTimeoutError(NVMLCallError):
    """NVML_ERROR_TIMEOUT: the driver did not answer in time."""


class NVMLUnknownError(NVMLCallError):
    """Any other NVML return code."""
