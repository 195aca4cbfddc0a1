"""Feature views of a graph batch: the full LLMCO2 embedding and the reduced embeddings used by
the NNLQP baseline and the paper's ablations (Table 5)."""

from __future__ import annotations

import numpy as np

from llmco2.analytic.layer import KERNEL_NAMES
from llmco2.graph.features import GLOBAL_FEATURES, NODE_FEATURES, PHASE_FEATURES, GraphArrays

VIEWS = ("full", "no_phase_split", "no_roofline", "nnlqp", "no_hardware")
ROOFLINE_FEATURES = ("log_perf", "log_intensity", "log_time_us", "bound_compute", "bound_memory", "bound_network")
#: The GPU's raw catalog numbers among the global features (the ``no_hardware`` view drops them: the
#: hardware then reaches the network only through the roofline quantities of each kernel, which keeps
#: an unseen GPU inside the ranges the network was trained on).
RAW_HARDWARE_GLOBALS = ("log_peak_ops_per_s", "log_mem_bw", "log_net_bw", "log_tdp_w", "log_mem_capacity")
HARDWARE_GLOBALS = ("log_peak_ops_per_s", "log_mem_bw", "log_net_bw", "log_tdp_w", "log_mem_capacity", "prefill_log_time_us",
                    "decode_log_time_us")


def _merge_phases(x: np.ndarray, keep: tuple[str, ...]) -> np.ndarray:
    """One feature set per node: log of the summed prefill and decode quantity for each feature."""
    k = len(KERNEL_NAMES)
    p = len(PHASE_FEATURES)
    cols = [x[:, :k]]
    for name in keep:
        j = PHASE_FEATURES.index(name)
        pre, dec = x[:, k + j], x[:, k + p + j]
        if name.startswith("bound_"):
            cols.append(np.maximum(pre, dec)[:, None])
        else:  # features are log1p(q): log1p(q_pre + q_dec)
            cols.append(np.log1p(np.expm1(pre) + np.expm1(dec))[:, None])
    return np.concatenate(cols, axis=1).astype(np.float32)


def view(g: GraphArrays, name: str) -> GraphArrays:
    """The graph batch as seen by one model variant."""
    if name not in VIEWS:
        raise ValueError(f"unknown feature view {name!r}; expected one of {VIEWS}")
    if name == "full":
        return g
    x, u = g.x, g.u
    if name == "no_roofline":
        drop = [NODE_FEATURES.index(f"{ph}_{f}") for ph in ("prefill", "decode") for f in ROOFLINE_FEATURES]
        x = np.delete(x, drop, axis=1)
        u = np.delete(u, [GLOBAL_FEATURES.index(f"{ph}_log_time_us") for ph in ("prefill", "decode")], axis=1)
    elif name == "no_phase_split":
        x = _merge_phases(x, PHASE_FEATURES)
    elif name == "no_hardware":
        u = np.delete(u, [GLOBAL_FEATURES.index(f) for f in RAW_HARDWARE_GLOBALS], axis=1)
    elif name == "nnlqp":
        x = _merge_phases(x, tuple(f for f in PHASE_FEATURES if f not in ROOFLINE_FEATURES))
        u = np.delete(u, [GLOBAL_FEATURES.index(f) for f in HARDWARE_GLOBALS], axis=1)
    return GraphArrays(x=x, edge_index=g.edge_index, batch=g.batch, u=u, num_graphs=g.num_graphs)
