"""The platform catalog: every entry loads with a source and a valid kind for each number, every GPU of the GPU
catalog has a usual platform, lookups accept aliases and an unknown platform fails with one line naming the valid
ids; the compiled whole-node power table loads with its columns and positive values."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import gpu_catalog
from llmco2.specs.platforms import (
    KINDS,
    SOURCED_FIELDS,
    get_platform,
    platform_catalog,
    platform_data,
    platform_for_gpu,
    platform_from_dict,
    resolve_platform,
)

NODE_POWER_CSV = Path(__file__).resolve().parents[1] / "experiments" / "data" / "node_power.csv"
NODE_POWER_COLUMNS = {"mlperf_round", "submitter", "system", "gpu_id", "num_gpus", "gpu_power_limit_w", "model",
                      "precision", "scenario", "throughput_tokens_per_s", "node_power_w", "joules_per_token", "source"}
REQUIRED = ["hgx-a100-8", "hgx-h100-8", "hgx-h200-8", "hgx-b200-8", "gh200-node", "pcie-2s-4gpu", "pcie-2s-8gpu",
            "workstation", "jetson-agx-orin-devkit"]


def test_required_platforms_present() -> None:
    ids = platform_catalog().ids
    assert all(p in ids for p in REQUIRED)


@pytest.mark.parametrize("plat", list(platform_catalog()), ids=lambda p: p.id)
def test_every_number_has_a_source_and_kind(plat) -> None:
    for field in SOURCED_FIELDS:
        if getattr(plat, field) is not None:
            assert plat.sources.get(field), f"{plat.id}.{field} has no source"
            assert plat.kind(field) in KINDS
    sourced = [f for f in SOURCED_FIELDS if getattr(plat, f) is not None and plat.kind(f) == "sourced"]
    for field in sourced:  # a figure taken as the source gives it names where it is
        assert "http" in plat.sources[field] or field == "gpu_slots", f"{plat.id}.{field}"


@pytest.mark.parametrize("plat", list(platform_catalog()), ids=lambda p: p.id)
def test_ranges(plat) -> None:
    assert plat.gpu_slots >= 1
    assert 0 <= plat.host_idle_power_w <= plat.host_loaded_power_w
    assert 0 <= plat.host_load_share <= 1
    assert 0 < plat.psu_efficiency <= 1


def test_every_catalog_gpu_maps_to_a_platform() -> None:
    mapping = platform_data().gpu_platform
    missing = [g.id for g in gpu_catalog() if g.id not in mapping]
    assert not missing, f"GPUs without a usual platform in platforms.toml: {missing}"
    for gpu in gpu_catalog():
        assert platform_for_gpu(gpu).id == mapping[gpu.id]


def test_usual_platforms() -> None:
    assert platform_for_gpu("h100").id == "hgx-h100-8"
    assert platform_for_gpu("a100").id == "hgx-a100-8"
    assert platform_for_gpu("h200").id == "hgx-h200-8"
    assert platform_for_gpu("b200").id == "hgx-b200-8"
    assert platform_for_gpu("l4").id == "pcie-2s-8gpu"
    assert platform_for_gpu("rtx-4090").id == "workstation"
    assert platform_for_gpu("jetson-orin").id == "jetson-agx-orin-devkit"


def test_aliases_and_override() -> None:
    assert get_platform("DGX-H100").id == "hgx-h100-8"
    assert get_platform("dgx_b200").id == "hgx-b200-8"
    assert resolve_platform("pcie-server", "h100").id == "pcie-2s-4gpu"
    assert resolve_platform(None, "h100").id == "hgx-h100-8"


def test_unknown_platform_one_line_with_valid_ids() -> None:
    with pytest.raises(InvalidInputError) as err:
        get_platform("dgx-z900")
    text = str(err.value)
    assert "\n" not in text and "dgx-z900" in text
    assert all(pid in text for pid in platform_catalog().ids)


def test_loader_refuses_unsourced_and_inconsistent_numbers() -> None:
    base = {"id": "x", "name": "x", "gpu_slots": 8, "host_idle_power_w": 100.0, "host_loaded_power_w": 200.0,
            "host_load_share": 1.0, "psu_efficiency": 0.9,
            "sources": {f: "s" for f in ("gpu_slots", "host_idle_power_w", "host_loaded_power_w", "host_load_share",
                                         "psu_efficiency")}}
    assert platform_from_dict(base).host_dynamic_power_w == 100.0
    with pytest.raises(ValueError, match="without a source"):
        platform_from_dict({**base, "sources": {}})
    with pytest.raises(ValueError, match="host_idle_power_w"):
        platform_from_dict({**base, "host_idle_power_w": 300.0})
    with pytest.raises(ValueError, match="psu_efficiency"):
        platform_from_dict({**base, "psu_efficiency": 1.2})
    with pytest.raises(ValueError, match="unknown kinds"):
        platform_from_dict({**base, "kinds": {"psu_efficiency": "guess"}})


def test_node_power_csv_loads() -> None:
    with NODE_POWER_CSV.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and NODE_POWER_COLUMNS <= set(rows[0])
    gpu_ids = set(gpu_catalog().ids)
    for row in rows:
        assert row["gpu_id"] in gpu_ids
        assert row["source"].startswith("https://")
        for col in ("num_gpus", "gpu_power_limit_w", "throughput_tokens_per_s", "node_power_w", "joules_per_token"):
            assert float(row[col]) > 0, (col, row)
        assert float(row["joules_per_token"]) == pytest.approx(
            float(row["node_power_w"]) / float(row["throughput_tokens_per_s"]), rel=1e-3)
