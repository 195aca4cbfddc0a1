"""Golden tests of the DRAM energy table (``llmco2/specs/data/memory_energy.toml``): every figure
sourced, the derived GPU-side interface figures follow the formulas their sources state, and a
board-level link costs more per bit than an interposer one."""

from __future__ import annotations

import pytest

from llmco2.errors import InvalidInputError
from llmco2.specs import get_gpu
from llmco2.specs.memory import BITS_PER_BYTE, dram_pj_per_byte, memory_energy, memory_energy_table

#: Rambus's GDDR5 controller interface (CICC 2011): 11.6 mW/Gbps at a 1.5 V I/O supply.
GDDR5_CONTROLLER_PJ_PER_BIT = 11.6
GDDR5_IO_V = 1.5


def test_every_entry_has_both_figures_and_their_sources() -> None:
    for entry in memory_energy_table().values():
        assert entry.pj_per_bit > 0 and entry.source
        assert entry.controller_pj_per_bit >= 0 and entry.controller_source
        assert entry.total_pj_per_bit == entry.pj_per_bit + entry.controller_pj_per_bit


@pytest.mark.parametrize(("memory_type", "io_v"), [("GDDR6", 1.35), ("GDDR7", 1.2)])
def test_graphics_dram_interface_scales_with_the_square_of_its_io_voltage(memory_type: str, io_v: float) -> None:
    expected = GDDR5_CONTROLLER_PJ_PER_BIT * (io_v / GDDR5_IO_V) ** 2
    assert memory_energy(memory_type).controller_pj_per_bit == pytest.approx(expected, abs=0.05)


def test_gddr6x_interface_follows_the_device_ratio_to_gddr6() -> None:
    g6, g6x = memory_energy("GDDR6"), memory_energy("GDDR6X")
    assert g6x.controller_pj_per_bit == pytest.approx(g6.controller_pj_per_bit * g6x.pj_per_bit / g6.pj_per_bit, abs=0.05)


def test_a_board_level_link_costs_more_per_bit_than_an_interposer_link() -> None:
    hbm = [memory_energy(t) for t in ("HBM2", "HBM2e", "HBM3", "HBM3e")]
    gddr = [memory_energy(t) for t in ("GDDR6", "GDDR6X", "GDDR7")]
    assert max(e.controller_pj_per_bit for e in hbm) < min(e.controller_pj_per_bit for e in gddr)
    assert max(e.total_pj_per_bit for e in hbm) < min(e.total_pj_per_bit for e in gddr)


def test_per_byte_figure_of_a_catalog_gpu() -> None:
    a40, a100 = get_gpu("a40"), get_gpu("a100-80gb")
    assert dram_pj_per_byte(a40.memory_type) == pytest.approx((7.5 + 9.4) * BITS_PER_BYTE)
    assert dram_pj_per_byte(a100.memory_type) == pytest.approx((6.0 + 0.23) * BITS_PER_BYTE)


def test_every_catalog_memory_type_has_a_figure() -> None:
    from llmco2.specs import gpu_catalog

    for gpu in gpu_catalog():
        assert dram_pj_per_byte(gpu.memory_type) > 0


def test_unknown_memory_type_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="no DRAM energy figure"):
        memory_energy("HBM9")
