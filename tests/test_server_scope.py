"""Server scope: host energy, power-supply losses and non-GPU embodied carbon of a request, hand-checked on
8 x H100 in an HGX server; scope ``gpu`` returns the GPU energy exactly; more GPUs used means a larger host share;
losses are positive; unknown scopes and platforms are refused in one line."""

from __future__ import annotations

import math

import pytest

from llmco2.carbon.accounting import SECONDS_PER_YEAR, default_lifetime_years
from llmco2.carbon.server_scope import (
    SCOPES,
    check_scope,
    embodied_non_gpu_g,
    host_energy_j,
    server_share,
    utilisation_proxy,
    wall_energy_j,
)
from llmco2.errors import InvalidInputError
from llmco2.specs.gpu_power import static_power_w
from llmco2.specs.platforms import get_platform, platform_catalog


def test_golden_hgx_h100_eight_gpus() -> None:
    # Catalog figures the hand computation uses: H100 SXM power limit 700 W, idle 120 W; hgx-h100-8 host idle
    # 1000 W, loaded 2296 W, load share 1, PSU 0.94, non-GPU embodied 3000 kg over 5 years.
    assert static_power_w("h100")[0] == 120.0
    plat = get_platform("hgx-h100-8")
    assert (plat.host_idle_power_w, plat.host_loaded_power_w, plat.host_load_share, plat.psu_efficiency,
            plat.embodied_kgco2e_non_gpu, plat.lifetime_years) == (1000.0, 2296.0, 1.0, 0.94, 3000.0, 5.0)
    # 8 GPUs at 600 W each for 10 s: 48,000 J.
    out = server_share(48_000.0, 10.0, "h100", 8)
    util = (600.0 - 120.0) / (700.0 - 120.0)  # 0.827586...
    host = (1000.0 + (2296.0 - 1000.0) * 1.0 * util) * (8 / 8) * 10.0  # 20,725.5 J
    wall = (48_000.0 + host) / 0.94  # 73,112.3 J
    embodied = 3000.0 * 1000.0 * (8 / 8) * 10.0 / (5.0 * 365.0 * 24.0 * 3600.0)  # 0.1903 g
    assert out.platform == "hgx-h100-8" and out.scope == "server"
    assert out.utilisation == pytest.approx(util)
    assert out.host_energy_j == pytest.approx(host)
    assert host == pytest.approx(20_725.517, abs=1e-2)
    assert out.server_energy_j == pytest.approx(wall)
    assert wall == pytest.approx(73_112.252, abs=1e-2)
    assert out.psu_loss_j == pytest.approx(wall - 48_000.0 - host)
    assert out.embodied_non_gpu_g == pytest.approx(embodied)
    assert out.gpu_energy_j + out.host_energy_j + out.psu_loss_j == pytest.approx(out.server_energy_j)
    assert "host_loaded_power_w" in out.sources and "10.2 kW" in out.sources["host_loaded_power_w"]


def test_scope_gpu_is_the_gpu_energy_exactly() -> None:
    for energy, seconds, gpu, n in [(48_000.0, 10.0, "h100", 8), (123.456789, 0.37, "l4", 1), (0.0, 5.0, "a100", 2),
                                    (9.87654321e7, 3600.0, "b200", 16)]:
        out = server_share(energy, seconds, gpu, n, scope="gpu")
        assert out.server_energy_j == energy  # exact, not approximate
        assert out.gpu_energy_j == energy
        assert (out.host_energy_j, out.psu_loss_j, out.embodied_non_gpu_g) == (0.0, 0.0, 0.0)
        assert out.host_and_psu_fraction == 0.0


def test_more_gpus_used_more_host_share() -> None:
    plat = get_platform("hgx-h100-8")
    shares = [host_energy_j(plat, k, 10.0, 0.5) for k in range(1, 9)]
    assert all(b > a for a, b in zip(shares[:-1], shares[1:], strict=True))
    embodied = [embodied_non_gpu_g(plat, k, 10.0) for k in range(1, 9)]
    assert all(b > a for a, b in zip(embodied[:-1], embodied[1:], strict=True))
    # the same per-GPU load on more GPUs: server energy grows with the GPU count
    totals = [server_share(600.0 * k * 10.0, 10.0, "h100", k).server_energy_j for k in (1, 2, 4, 8)]
    assert all(b > a for a, b in zip(totals[:-1], totals[1:], strict=True))


def test_host_grows_with_load_and_losses_positive() -> None:
    lows = server_share(8 * 200.0 * 10.0, 10.0, "h100", 8)
    highs = server_share(8 * 690.0 * 10.0, 10.0, "h100", 8)
    assert highs.utilisation > lows.utilisation
    assert highs.host_energy_j > lows.host_energy_j
    for plat in platform_catalog():
        if plat.psu_efficiency < 1:
            assert wall_energy_j(1000.0, plat.psu_efficiency) > 1000.0
    assert lows.psu_loss_j > 0 and highs.psu_loss_j > 0


def test_utilisation_proxy_is_clamped() -> None:
    assert utilisation_proxy(0.0, 10.0, "h100", 8) == 0.0
    assert utilisation_proxy(8 * 5000.0 * 10.0, 10.0, "h100", 8) == 1.0
    assert utilisation_proxy(100.0, 0.0, "h100", 1) == 0.0


def test_platform_override_and_edge_board() -> None:
    pcie = server_share(4 * 300.0 * 10.0, 10.0, "h100", 4, platform="pcie-2s-4gpu")
    assert pcie.platform == "pcie-2s-4gpu"
    edge = server_share(30.0 * 10.0, 10.0, "jetson-orin", 1)
    assert edge.platform == "jetson-agx-orin-devkit"
    assert edge.server_energy_j == pytest.approx(300.0) and edge.host_energy_j == 0.0
    assert math.isnan(edge.embodied_non_gpu_g)  # no sourced non-GPU embodied figure for the board


def test_embodied_uses_accounting_lifetime_when_platform_has_none() -> None:
    plat = get_platform("workstation")
    assert plat.lifetime_years is None
    expected = 750.0 * 1000.0 * 10.0 / (default_lifetime_years() * SECONDS_PER_YEAR)
    assert embodied_non_gpu_g(plat, 1, 10.0) == pytest.approx(expected)


def test_unknown_scope_and_platform_refused() -> None:
    assert set(SCOPES) == {"gpu", "server"} and check_scope("Server") == "server"
    with pytest.raises(InvalidInputError, match="valid scopes: gpu, server"):
        server_share(1.0, 1.0, "h100", 1, scope="rack")
    with pytest.raises(InvalidInputError, match="valid platforms"):
        server_share(1.0, 1.0, "h100", 1, platform="no-such-server")
    with pytest.raises(InvalidInputError):
        server_share(1.0, 1.0, "h100", 0)
