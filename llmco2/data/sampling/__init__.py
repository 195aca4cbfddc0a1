"""Configuration samplers for building an energy dataset (paper Section 4.2, Algorithm 1).

Every sampler returns one row per configuration to measure, with the columns of
:data:`SAMPLE_COLUMNS`: the catalog id of the base architecture (``model``), the GPU and GPU
count, the request (batch, prompt and generated tokens, weight ``dtype``), the workload it was
drawn from (``trace``: code, conv or uniform) and the **effective** architecture (perturbed or
not). :func:`rows_to_items` turns rows back into ``(ModelArch, Request, GPU)`` triples for the
analytic engine or a measurement harness.

* :class:`RandomSampler` is the paper's baseline: uniform over ranges.
* :class:`FocusedSampler` draws from the paper's priors: catalog architectures and perturbed
  variants of them (A), (prompt, generated) pairs resampled from the Azure traces (I), batch
  sizes of one or two with a small tail, and GPUs with the number of devices from the minimum
  that holds weights + KV cache up to four (H).
* :func:`fine_grained_sample` is Algorithm 1's ``FineGraindSampling`` (B points within ±C of a
  point), and :func:`focused_loop` the whole loop around any regressor and any measurement.

A configuration is *placeable* on ``c`` GPUs of a kind when the GPU runs the request's compute
dtype, ``c`` (the tensor-parallel degree; no pipeline parallelism) divides the heads, KV heads and
MLP width, ``c`` GPUs fit in one node with an interconnect, and weights + KV cache (the analytic
engine's memory model, :func:`memory_need_bytes`) fit in ``memory_fraction`` of their memory.
Samplers drop what cannot be placed anywhere allowed, count it and log it.

Modules, by concern:

* :mod:`.common` — the sample frame's columns, weight dtypes, small drawing helpers;
* :mod:`.frames` — checking, writing (whole or block by block) and reading sample frames; rows to ``(ModelArch, Request, GPU)``;
* :mod:`.architectures` — architecture priors (A): catalog models and perturbed variants;
* :mod:`.inference` — inference priors (I): Azure-trace token pairs and batch sizes;
* :mod:`.hardware` — GPU priors (H) and placement (memory model, tensor-parallel split, node size);
* :mod:`.samplers` — the sampling driver and :class:`RandomSampler`;
* :mod:`.focused` — :class:`FocusedSampler`;
* :mod:`.algorithm1` — :func:`fine_grained_sample` and :func:`focused_loop`;
* :mod:`.measures` — synthetic and looked-up measurements, a demo regressor.

Every public name is importable from ``llmco2.data.sampling`` itself.
"""

from llmco2.data.sampling.algorithm1 import DEFAULT_RANGES, LoopResult, fine_grained_sample, focused_loop
from llmco2.data.sampling.architectures import EDGE_MODELS, PAPER_MODELS, perturb_architectures
from llmco2.data.sampling.common import (
    ARCH_COLUMNS,
    DTYPE_WEIGHTS,
    DTYPES,
    INT_COLUMNS,
    SAMPLE_COLUMNS,
    SAMPLE_TRACES,
    TARGET,
    IntArray,
)
from llmco2.data.sampling.focused import FocusedSampler
from llmco2.data.sampling.frames import check_samples, read_samples, rows_to_items, to_csv, write_blocks
from llmco2.data.sampling.hardware import GPU_COUNTS, PAPER_GPUS, memory_need_bytes
from llmco2.data.sampling.inference import draw_batch_sizes, trace_pairs
from llmco2.data.sampling.inference import trace_length_pairs as trace_length_pairs  # the cache, cleared by tests
from llmco2.data.sampling.measures import FEATURE_NAMES, analytic_features, analytic_measure, lookup_measure, sklearn_callables
from llmco2.data.sampling.samplers import RandomSampler, SampleReport

__all__ = ["ARCH_COLUMNS", "DEFAULT_RANGES", "DTYPES", "DTYPE_WEIGHTS", "EDGE_MODELS", "FEATURE_NAMES", "GPU_COUNTS",
           "INT_COLUMNS", "PAPER_GPUS", "PAPER_MODELS", "SAMPLE_COLUMNS", "SAMPLE_TRACES", "TARGET", "FocusedSampler",
           "IntArray", "LoopResult", "RandomSampler", "SampleReport", "analytic_features", "analytic_measure",
           "check_samples", "draw_batch_sizes", "fine_grained_sample", "focused_loop", "lookup_measure",
           "memory_need_bytes", "perturb_architectures", "read_samples", "rows_to_items", "sklearn_callables",
           "to_csv", "trace_pairs", "write_blocks"]
