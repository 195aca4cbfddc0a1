"""Graph stage: analytic results -> per-request kernel graphs with prefill/decode node features."""

from llmco2.graph.features import (
    FEATURE_SCHEMA_VERSION,
    GLOBAL_FEATURES,
    NODE_FEATURES,
    GraphArrays,
    build_graph_arrays,
    subset,
)
from llmco2.graph.scaling import FeatureScaler

__all__ = ["FEATURE_SCHEMA_VERSION", "GLOBAL_FEATURES", "NODE_FEATURES", "FeatureScaler", "GraphArrays", "build_graph_arrays",
           "subset"]
