"""Energy per bit moved to or from a GPU's DRAM, by memory technology (``data/memory_energy.toml``):
the DRAM device's own energy plus the GPU-side interface that drives and receives the bit.

>>> round(dram_pj_per_byte("HBM3"), 2)
41.84
>>> round(dram_pj_per_byte("GDDR6"), 1)
135.2
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources

from llmco2.errors import InvalidInputError

BITS_PER_BYTE = 8


@dataclass(frozen=True)
class MemoryEnergy:
    """DRAM access energy of one memory technology: the device's pJ per bit, the GPU-side
    interface's pJ per bit (``controller_pj_per_bit``) and where each figure comes from."""

    type: str
    pj_per_bit: float
    source: str
    controller_pj_per_bit: float
    controller_source: str

    @property
    def total_pj_per_bit(self) -> float:
        """Energy of one bit moved between the DRAM and the GPU (pJ): device plus GPU-side interface."""
        return self.pj_per_bit + self.controller_pj_per_bit


@functools.lru_cache(maxsize=1)
def memory_energy_table() -> dict[str, MemoryEnergy]:
    """Every memory technology of the table, keyed by lower-case catalog ``memory_type``."""
    raw = tomllib.loads((resources.files("llmco2.specs") / "data" / "memory_energy.toml").read_text())
    out = {}
    for row in raw["memory"]:
        entry = MemoryEnergy(str(row["type"]), float(row["pj_per_bit"]), str(row["source"]),
                             float(row["controller_pj_per_bit"]), str(row["controller_source"]))
        if not entry.pj_per_bit > 0 or not entry.source:
            raise ValueError(f"memory_energy.toml: {entry.type} needs a positive pj_per_bit and a source")
        if not entry.controller_pj_per_bit >= 0 or not entry.controller_source:
            raise ValueError(f"memory_energy.toml: {entry.type} needs a controller_pj_per_bit of at least 0 and its source")
        out[entry.type.lower()] = entry
    return out


def memory_energy(memory_type: str) -> MemoryEnergy:
    """The table's entry for a catalog ``memory_type``; an unknown technology is an error."""
    table = memory_energy_table()
    entry = table.get(memory_type.strip().lower())
    if entry is None:
        raise InvalidInputError(f"no DRAM energy figure for memory type {memory_type!r}; known: "
                                f"{', '.join(e.type for e in table.values())}", field="memory_type")
    return entry


def dram_pj_per_byte(memory_type: str) -> float:
    """Energy (pJ) of moving one byte between DRAM of ``memory_type`` and the GPU (the device and
    the GPU-side interface)."""
    return memory_energy(memory_type).total_pj_per_bit * BITS_PER_BYTE
