"""Analytic cost engine (pure NumPy, no torch): kernels of a transformer layer, the layer DAG,
roofline, parallel attention, whole-model totals and the reference tables of the seed notes."""

from llmco2.analytic.kernels import PAPER_DEVIATIONS, KernelCost
from llmco2.analytic.layer import KERNEL_NAMES, KERNELS, LayerAnalysis, LayerBatch, analyze_layer, analyze_layers
from llmco2.analytic.layer_dag import layer_graph
from llmco2.analytic.model import model_totals
from llmco2.analytic.parallel import AttentionCost, attention_cost

__all__ = [
    "KERNELS",
    "KERNEL_NAMES",
    "PAPER_DEVIATIONS",
    "AttentionCost",
    "KernelCost",
    "LayerAnalysis",
    "LayerBatch",
    "analyze_layer",
    "analyze_layers",
    "attention_cost",
    "layer_graph",
    "model_totals",
]
