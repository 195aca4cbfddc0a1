"""The link a tensor-parallel all-reduce crosses, its bandwidth and its latency, from the GPU catalog.

A GPU's ``link_kind`` and ``pcie_p2p`` (:class:`llmco2.specs.gpus.GPU`) and the tensor-parallel degree
``tp`` decide the **path** of an all-reduce (:func:`allreduce_path`):

- ``fabric`` (NVLink with NVSwitch or a mesh, other vendors' GPU fabrics): ``nvlink`` at any ``tp``;
- ``bridge-pairs`` (an NVLink bridge joins pairs of cards): ``nvlink`` at ``tp <= 2``, PCIe beyond, where
  the ring leaves the pair;
- ``pcie``: PCIe;
- ``none`` (a single device): no path.

PCIe means ``pcie-p2p`` where the driver gives the cards peer access over PCIe and ``pcie-host`` where it
does not (GeForce since the RTX 30 series): NCCL then stages every transfer through host memory.

Units: a link's bandwidth here is the catalog's figure, total bidirectional bytes/s per GPU as vendors
quote it (NVLink 4: 900 GB/s on an H100 SXM, 450 GB/s each way; PCIe 4.0 x16: 64 GB/s, 32 each way).
The step physics charges a transfer on **one direction** of it (:data:`ONE_DIRECTION_SHARE`): a GPU
sends and receives at once, each on its own direction. The analytic network bytes of an all-reduce are
the paper's (Eqs 2-7: ``tokens / tp x hidden x (tp - 1) x bytes``,
:func:`llmco2.analytic.kernels.all_reduce_cost`), which count the reduce-scatter alone; a ring
all-reduce (NCCL's algorithm for the tensor-parallel sizes of inference) also runs the all-gather,
so each GPU sends :data:`RING_ALLREDUCE_PASSES` times those bytes (``2 (tp - 1) / tp x S`` for an
``S``-byte tensor: NCCL's "bus bandwidth" convention, nccl-tests doc/PERFORMANCE.md,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). The all-reduce's link time is
then ``2 x bytes / (eta_network x share x link / 2)``. NCCL's ring reaches about 370 GB/s of bus
bandwidth on 8 x H100 SXM, whose NVLink line rate is 450 GB/s each way (about 20% protocol overhead:
NCCL's maintainer in NVIDIA/nccl-tests issue #212, https://github.com/NVIDIA/nccl-tests/issues/212),
and 200-210 GB/s on 8 x A100 SXM (300 GB/s each way; nccl-tests issues #149 and #178): 0.7-0.82 of
one direction, where the step physics' fixed ``eta_network`` of 0.7 sits. An expert
all-to-all's bytes (:func:`llmco2.analytic.kernels.all_to_all_cost`, dispatch and combine) are already
what each GPU sends: they cross one direction once. Each path's share of its quoted figure and its
latency come from the catalog's ``[links]`` table (``specs/data/gpus.toml``), each with a source.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from llmco2.specs.gpus import GIGA, GPU
from llmco2.specs.toml_cache import load_toml

NVLINK = "nvlink"
PCIE_P2P = "pcie-p2p"
PCIE_HOST = "pcie-host"
NO_PATH = "none"
#: Times a ring all-reduce sends the bytes of the paper's network term (a reduce-scatter and an all-gather).
RING_ALLREDUCE_PASSES = 2.0
#: Share of a quoted (total bidirectional) link figure that one direction carries.
ONE_DIRECTION_SHARE = 0.5
#: The paths of :func:`allreduce_path` that the catalog's ``[links]`` table describes.
PATHS = (NVLINK, PCIE_P2P, PCIE_HOST)


@dataclass(frozen=True)
class LinkPath:
    """One path of the catalog's ``[links]`` table: per ring step latency (us) of a small all-reduce, the
    share of the path's quoted link figure it gives (0-1), and the sources of both."""

    id: str
    description: str
    step_latency_us: float
    bandwidth_share: float
    sources: dict[str, str]


@dataclass(frozen=True)
class LinkTable:
    """The catalog's ``[links]`` table: NCCL's base latency of a small ring all-reduce (us) and the paths."""

    allreduce_base_latency_us: float
    paths: dict[str, LinkPath]
    sources: dict[str, str]


@functools.cache
def link_table() -> LinkTable:
    """The ``[links]`` table of the shipped GPU catalog (cached); every number has a source."""
    path = resources.files("llmco2.specs") / "data" / "gpus.toml"
    with resources.as_file(path) as real:
        raw = load_toml(real)["links"]
    paths = {p["id"]: LinkPath(str(p["id"]), str(p["description"]), float(p["step_latency_us"]),
                               float(p["bandwidth_share"]), dict(p["sources"])) for p in raw["path"]}
    missing = [f"{p.id}.{k}" for p in paths.values() for k in ("step_latency_us", "bandwidth_share") if k not in p.sources]
    missing += [k for k in ("allreduce_base_latency_us",) if k not in raw.get("sources", {})]
    if missing or set(paths) != set(PATHS):
        raise ValueError(f"gpus.toml [links]: paths {sorted(paths)} (need {PATHS}), numbers without a source: {missing}")
    return LinkTable(float(raw["allreduce_base_latency_us"]), paths, dict(raw["sources"]))


def allreduce_path(gpu: GPU, tp: int) -> str:
    """The path (:data:`PATHS`, or ``"none"``) of an all-reduce over ``tp`` GPUs of ``gpu`` (see the module)."""
    if gpu.link_kind == "none":
        return NO_PATH
    if gpu.link_kind == "fabric" or (gpu.link_kind == "bridge-pairs" and tp <= 2):
        return NVLINK
    return PCIE_P2P if gpu.pcie_p2p else PCIE_HOST


def path_link_gb_s(gpu: GPU, path: str) -> float:
    """The quoted link figure a path runs on (GB/s, total bidirectional per GPU): ``interconnect_bandwidth_gb_s``
    on NVLink (and for a device without a path), ``pcie_bandwidth_gb_s`` on PCIe (``interconnect_bandwidth_gb_s``
    where no PCIe figure is given; PCIe-only cards carry the same figure in both)."""
    if path in (NVLINK, NO_PATH) or gpu.pcie_bandwidth_gb_s is None:
        return float(gpu.interconnect_bandwidth_gb_s)
    return float(gpu.pcie_bandwidth_gb_s)


def allreduce_bandwidth_bytes_per_s(gpu: GPU, tp: int) -> float:
    """Link bandwidth (bytes/s) of an all-reduce over ``tp`` GPUs of ``gpu``, in the network term's unit:
    ``bandwidth_share(path) x path_link_gb_s(gpu, path) x 1e9``. A fabric GPU's is exactly
    ``gpu.interconnect_bytes_per_s`` at any ``tp`` (the figure the network term has always used)."""
    path = allreduce_path(gpu, tp)
    share = link_table().paths[path].bandwidth_share if path in PATHS else 1.0
    return share * (path_link_gb_s(gpu, path) * GIGA)


def ring_steps(tp: int) -> int:
    """Steps of a ring all-reduce over ``tp`` GPUs: ``2 (tp - 1)`` (a reduce-scatter and an all-gather), 0 for one GPU."""
    return 2 * max(int(tp) - 1, 0)


def allreduce_latency_s(gpu: GPU, tp: int) -> float:
    """Small-message latency (s) of an all-reduce over ``tp`` GPUs of ``gpu`` (NCCL's latency model, ring with the
    LL protocol): ``(allreduce_base_latency_us + ring_steps(tp) x step_latency_us(path)) x 1e-6``; 0 for one GPU."""
    path = allreduce_path(gpu, tp)
    if tp <= 1 or path not in PATHS:
        return 0.0
    table = link_table()
    return (table.allreduce_base_latency_us + ring_steps(tp) * table.paths[path].step_latency_us) * 1e-6


def allreduce_extra_latency_s(gpu: GPU, tp: int) -> float:
    """Latency (s) an all-reduce over ``tp`` GPUs of ``gpu`` takes beyond the same all-reduce over NVLink:
    ``ring_steps(tp) x (step_latency_us(path) - step_latency_us(nvlink)) x 1e-6`` (0 on NVLink). The step
    physics' fitted per all-reduce constant holds NVLink's own latency, so this is what a slower path adds."""
    path = allreduce_path(gpu, tp)
    if tp <= 1 or path not in PATHS:
        return 0.0
    paths = link_table().paths
    return ring_steps(tp) * (paths[path].step_latency_us - paths[NVLINK].step_latency_us) * 1e-6


__all__ = ["LinkPath", "LinkTable", "NVLINK", "ONE_DIRECTION_SHARE", "PCIE_HOST", "PCIE_P2P", "PATHS", "RING_ALLREDUCE_PASSES", "allreduce_bandwidth_bytes_per_s",
           "allreduce_extra_latency_s", "allreduce_latency_s", "allreduce_path", "link_table", "path_link_gb_s", "ring_steps"]
