"""The power-relevant hardware of each request row, as arrays for the step physics: a GPU's static
(idle) power, process node, dense fp16 tensor peak and DRAM access energy, and its GPU-to-GPU link.
Looked up once per distinct GPU of a batch of rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from llmco2.physics.link_rows import LinkRows
from llmco2.specs import GPU
from llmco2.specs.gpu_power import static_power_w
from llmco2.specs.memory import dram_pj_per_byte

Array = NDArray[np.float64]


@dataclass(frozen=True)
class HardwareRows:
    """What one GPU's power depends on besides its work, per row (arrays ``[n]``): its static (idle)
    power (W), process node (nm), dense fp16 tensor peak (ops/s) and DRAM access energy (pJ/byte);
    and its GPU-to-GPU link (``links``, for the all-reduces' network term)."""

    idle_w: Array
    node_nm: Array
    peak16_ops_per_s: Array
    dram_pj_per_byte: Array
    links: LinkRows | None = None

    def take(self, idx: NDArray[np.int64]) -> HardwareRows:
        return HardwareRows(self.idle_w[idx], self.node_nm[idx], self.peak16_ops_per_s[idx], self.dram_pj_per_byte[idx],
                            None if self.links is None else self.links.take(idx))

    @classmethod
    def of(cls, gpus: Sequence[GPU]) -> HardwareRows:
        """The rows of ``gpus`` (one per GPU; looked up once per distinct GPU)."""
        seen: dict[int, tuple[float, float, float, float]] = {}
        vals = np.array([seen.setdefault(id(g), gpu_power_fields(g)) for g in gpus], dtype=np.float64).reshape(-1, 4)
        return cls(*(np.ascontiguousarray(vals[:, k]) for k in range(4)), LinkRows.of(gpus))


def idle_power_w(gpu: GPU) -> float:
    """Static (idle) power of one GPU (W): :func:`llmco2.specs.gpu_power.static_power_w`."""
    return float(static_power_w(gpu)[0])


def peak16_ops_per_s(gpu: GPU) -> float:
    """Dense fp16 tensor peak of ``gpu`` (ops/s; bf16 where fp16 is not published, else its
    fastest floating-point peak)."""
    for dtype in ("fp16", "bf16"):
        if gpu.supports(dtype):
            return gpu.peak_ops_per_s(dtype)
    floats = [d for d in gpu.peak_dense_tops if d.startswith(("fp", "bf", "tf"))]
    return max(gpu.peak_ops_per_s(d) for d in floats) if floats else max(gpu.peak_ops_per_s(d) for d in gpu.peak_dense_tops)


def gpu_power_fields(gpu: GPU) -> tuple[float, float, float, float]:
    """``(idle W, node nm, fp16 peak ops/s, DRAM pJ/byte)`` of one GPU."""
    return (idle_power_w(gpu), float(gpu.process_node_nm), peak16_ops_per_s(gpu), dram_pj_per_byte(gpu.memory_type))
