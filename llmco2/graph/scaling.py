"""Feature standardisation fitted on training graphs only and saved with a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.graph.features import FEATURE_SCHEMA_VERSION, GLOBAL_FEATURES, NODE_FEATURES, GraphArrays


@dataclass
class FeatureScaler:
    """Per-feature mean and standard deviation of node and global features (one-hot and constant
    columns keep a unit scale)."""

    node_mean: NDArray[np.float32]
    node_std: NDArray[np.float32]
    global_mean: NDArray[np.float32]
    global_std: NDArray[np.float32]
    schema_version: int = FEATURE_SCHEMA_VERSION

    @classmethod
    def fit(cls, g: GraphArrays) -> FeatureScaler:
        def stats(a: NDArray[np.float32]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
            mean = a.mean(axis=0)
            std = a.std(axis=0)
            binary = np.all((a == 0) | (a == 1), axis=0)
            mean = np.where(binary, 0.0, mean)
            std = np.where(binary | (std < 1e-6), 1.0, std)
            return mean.astype(np.float32), std.astype(np.float32)

        nm, ns = stats(g.x)
        gm, gs = stats(g.u)
        return cls(nm, ns, gm, gs)

    def transform(self, g: GraphArrays) -> GraphArrays:
        return GraphArrays(x=((g.x - self.node_mean) / self.node_std).astype(np.float32), edge_index=g.edge_index,
                           batch=g.batch, u=((g.u - self.global_mean) / self.global_std).astype(np.float32),
                           num_graphs=g.num_graphs)

    def state_dict(self) -> dict[str, Any]:
        return {"node_mean": self.node_mean.tolist(), "node_std": self.node_std.tolist(),
                "global_mean": self.global_mean.tolist(), "global_std": self.global_std.tolist(),
                "schema_version": self.schema_version, "node_features": list(NODE_FEATURES),
                "global_features": list(GLOBAL_FEATURES)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> FeatureScaler:
        version = state.get("schema_version")
        if version != FEATURE_SCHEMA_VERSION or state.get("node_features") != list(NODE_FEATURES) \
                or state.get("global_features") != list(GLOBAL_FEATURES):  # views are derived from the full schema
            raise InvalidInputError(
                f"checkpoint features have schema version {version}, this llmco2 computes version {FEATURE_SCHEMA_VERSION}; "
                "retrain the checkpoint with this version", field="checkpoint")
        return cls(*(np.asarray(state[k], dtype=np.float32) for k in ("node_mean", "node_std", "global_mean", "global_std")),
                   schema_version=version)
