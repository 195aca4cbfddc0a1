"""Carbon arithmetic pinned to hand-computed values; table lookups and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.carbon.accounting import (
    SECONDS_PER_YEAR,
    device_embodied,
    embodied_g,
    grid_regions,
    logic_kg_per_cm2,
    memory_kg_per_gb,
    operational_g,
    pue,
    pue_defaults,
    region,
)
from llmco2.errors import InvalidInputError, UnknownIdError
from llmco2.specs import get_gpu


def test_operational_is_kwh_times_pue_times_intensity() -> None:
    assert operational_g(3.6e6, 1.2, 400.0) == pytest.approx(480.0)  # 1 kWh x 1.2 x 400 g/kWh
    assert np.allclose(operational_g([0.0, 1800.0], 1.0, 500.0), [0.0, 0.25])  # 0.5 Wh x 500 g/kWh
    with pytest.raises(InvalidInputError, match="below 1"):
        operational_g(1.0, 0.9, 400.0)


def test_embodied_a100_by_hand() -> None:
    a100 = get_gpu("a100-80gb")  # 826 mm2 at 7 nm, 80 GB HBM2e
    dev = device_embodied(a100)
    assert dev is not None
    assert dev.logic_kg == pytest.approx(8.26 * 1.6)
    assert dev.memory_kg == pytest.approx(80 * 0.4)
    # 2 GPUs for 10 s of a 5-year life
    expected = (8.26 * 1.6 + 80 * 0.4) * 1000 * 2 * 10 / (5 * 365 * 24 * 3600)
    assert embodied_g(a100, 2, 10.0) == pytest.approx(expected)
    assert embodied_g(a100, 1, 10.0, lifetime_years=2.5) == pytest.approx(expected)
    assert SECONDS_PER_YEAR == 31_536_000


def test_nodes_without_a_row_take_the_nearest_larger_node() -> None:
    assert logic_kg_per_cm2(7) == 1.6 and logic_kg_per_cm2(4) == 1.8
    assert logic_kg_per_cm2(8) == logic_kg_per_cm2(12) == 1.2
    assert logic_kg_per_cm2(3) == 1.8 and logic_kg_per_cm2(28) == 1.0
    assert memory_kg_per_gb("HBM3") == memory_kg_per_gb("GDDR6") == 0.4


def test_soc_without_die_area_has_no_embodied_figure() -> None:
    orin = get_gpu("jetson-orin")
    assert device_embodied(orin) is None and np.isnan(embodied_g(orin, 1, 1.0))


def test_added_gpus_embodied_by_hand() -> None:
    # RTX 4090: AD102 6.085 cm2 at 4 nm (1.8 kg/cm2) + 24 GB GDDR6X (0.4 kg/GB)
    rtx = device_embodied(get_gpu("rtx-4090"))
    assert rtx is not None and rtx.logic_kg == pytest.approx(6.085 * 1.8) and rtx.memory_kg == pytest.approx(24 * 0.4)
    # A30: GA100 8.26 cm2 at 7 nm (1.6) + 24 GB HBM2; A40: GA102 6.284 cm2 at 8 nm -> 12 nm row (1.2) + 48 GB GDDR6
    assert device_embodied(get_gpu("a30")).total_kg == pytest.approx(8.26 * 1.6 + 24 * 0.4)
    assert device_embodied(get_gpu("a40")).total_kg == pytest.approx(6.284 * 1.2 + 48 * 0.4)
    for gpu_id in ("mi250x", "mi300x", "gaudi3"):  # no published die area
        assert device_embodied(get_gpu(gpu_id)) is None


def test_every_catalog_memory_type_has_a_figure() -> None:
    from llmco2.specs import gpu_catalog

    for gpu in gpu_catalog():
        assert memory_kg_per_gb(gpu.memory_type) > 0


def test_region_and_pue_lookups() -> None:
    assert region("FR").id == region("france").id == "fra"
    assert region(None).id == grid_regions()[1] == "world"
    assert region("gcp:europe-west9").kind == "cloud"
    assert pue("google").value == pytest.approx(1.10) and pue(None).id == pue_defaults()[1]
    with pytest.raises(UnknownIdError, match="did you mean"):
        region("frnace")
    for row in grid_regions()[0]:
        assert row.source and row.year >= 2020 and row.g_co2eq_per_kwh >= 0
