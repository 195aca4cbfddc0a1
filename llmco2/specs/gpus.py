"""GPU / accelerator catalog: typed records loaded from ``specs/data/gpus.toml``.

Every number in the data file carries a source (``[gpu.sources]``). Peaks are **dense**
(no 2:4 structured sparsity). The LLMCO2 paper's Table 2 mixes sparse and dense figures
(its A100 "FP16 624" and H100 "FP16 1979" are FP16 *with sparsity*); those values are kept
verbatim in :attr:`GPU.paper_table2` for reference and are never used in computation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from llmco2.errors import InvalidInputError, UnknownIdError
from llmco2.specs.dtypes import DTYPE_BYTES, canonical_dtype
from llmco2.specs.lookup import Catalog, close_matches
from llmco2.specs.toml_cache import load_toml

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class GPU:
    """One accelerator. Field names carry units; ``peak_dense_tops`` is tera-ops/s per dtype."""

    id: str
    name: str
    vendor: str
    architecture: str
    form_factor: str
    memory_type: str
    memory_size_gb: float
    memory_bandwidth_gb_s: float
    interconnect: str
    interconnect_bandwidth_gb_s: float
    tdp_w: float
    process_node_nm: int
    gpus_per_node: int
    release_year: int
    peak_dense_tops: dict[str, float]
    sources: dict[str, str]
    aliases: tuple[str, ...] = ()
    die_area_mm2: float | None = None
    idle_power_w: float | None = None
    pcie_bandwidth_gb_s: float | None = None
    transistors_billion: float | None = None
    paper_table2: dict[str, Any] | None = None

    # -- derived quantities in SI units -------------------------------------------------------
    def peak_ops_per_s(self, dtype: str) -> float:
        """Dense peak throughput for ``dtype`` in operations per second.

        Raises `InvalidInputError` naming the dtypes this device does support.
        """
        key = canonical_dtype(dtype)
        if key not in self.peak_dense_tops:
            raise InvalidInputError(
                f"{self.id} has no published {key} throughput; supported: "
                f"{', '.join(sorted(self.peak_dense_tops))}",
                field="dtype",
            )
        return self.peak_dense_tops[key] * TERA

    def supports(self, dtype: str) -> bool:
        return canonical_dtype(dtype) in self.peak_dense_tops

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_s * GIGA

    @property
    def interconnect_bytes_per_s(self) -> float:
        return self.interconnect_bandwidth_gb_s * GIGA

    @property
    def memory_bytes(self) -> float:
        return self.memory_size_gb * GIGA

    def ridge_point(self, dtype: str) -> float:
        """Memory ridge point (ops per byte): peak / memory bandwidth (paper's MRP)."""
        return self.peak_ops_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    def network_ridge_point(self, dtype: str) -> float:
        """Network ridge point (ops per byte): peak / interconnect bandwidth (paper's NRP)."""
        if self.interconnect_bandwidth_gb_s <= 0:
            return float("inf")
        return self.peak_ops_per_s(dtype) / self.interconnect_bytes_per_s


_GPU_FIELDS = {f.name for f in fields(GPU)}
_NUMERIC_SOURCED = (
    "memory_size_gb",
    "memory_bandwidth_gb_s",
    "interconnect_bandwidth_gb_s",
    "tdp_w",
    "process_node_nm",
    "gpus_per_node",
    "release_year",
    "die_area_mm2",
    "idle_power_w",
    "pcie_bandwidth_gb_s",
    "transistors_billion",
)


def gpu_from_dict(raw: dict[str, Any], origin: str = "gpus.toml") -> GPU:
    """Build a `GPU` from one ``[[gpu]]`` table, checking keys, dtypes and sources."""
    unknown = set(raw) - _GPU_FIELDS
    if unknown:
        raise ValueError(f"{origin}: gpu {raw.get('id')!r} has unknown keys {sorted(unknown)}")
    data = dict(raw)
    data["aliases"] = tuple(str(a).lower() for a in data.get("aliases", ()))
    peaks = {canonical_dtype(k): float(v) for k, v in data.get("peak_dense_tops", {}).items()}
    data["peak_dense_tops"] = peaks
    gpu = GPU(**data)
    missing = [k for k in _NUMERIC_SOURCED if getattr(gpu, k) is not None and k not in gpu.sources]
    missing += [f"peak_dense_tops.{k}" for k in peaks if f"peak_dense_tops.{k}" not in gpu.sources]
    if missing:
        raise ValueError(f"{origin}: gpu {gpu.id!r} has numbers without a source: {missing}")
    bad = [k for k in peaks if k not in DTYPE_BYTES]
    if bad:
        raise ValueError(f"{origin}: gpu {gpu.id!r} has unknown dtypes {bad}")
    return gpu


def load_gpu_file(path: str | Path) -> list[GPU]:
    """Load every ``[[gpu]]`` table of a TOML file."""
    doc = load_toml(path)
    return [gpu_from_dict(entry, origin=str(path)) for entry in doc.get("gpu", [])]


@functools.cache
def gpu_catalog() -> Catalog[GPU]:
    """The shipped GPU catalog (cached)."""
    path = resources.files("llmco2.specs") / "data" / "gpus.toml"
    with resources.as_file(path) as real:
        return Catalog("gpu", load_gpu_file(real))


def get_gpu(name: str | GPU) -> GPU:
    """Look a GPU up by id or alias (``h100`` = ``h100-sxm``); close matches on failure."""
    if isinstance(name, GPU):
        return name
    return gpu_catalog().get(name, field="gpu")


__all__ = ["GPU", "get_gpu", "gpu_catalog", "load_gpu_file", "gpu_from_dict", "UnknownIdError", "close_matches"]
