"""Typed catalogs: GPUs, LLM architectures, inference requests (the first stage)."""

from llmco2.specs.dtypes import DTYPE_BITS, DTYPE_BYTES, canonical_dtype, dtype_bytes
from llmco2.specs.engines import (
    DEFAULT_ENGINE,
    UNKNOWN_ENGINE,
    Engine,
    engine_catalog,
    engine_id,
    engine_ids,
    engine_level_index,
    engine_levels,
    get_engine,
)
from llmco2.specs.gpu_power import device_class, static_power_w
from llmco2.specs.gpus import GPU, get_gpu, gpu_catalog
from llmco2.specs.hf_config import arch_from_hf_config, get_model, load_hf_config
from llmco2.specs.models import ModelArch, model_catalog
from llmco2.specs.requests import Request, validate_request

__all__ = [
    "DTYPE_BITS",
    "DTYPE_BYTES",
    "DEFAULT_ENGINE",
    "Engine",
    "GPU",
    "UNKNOWN_ENGINE",
    "ModelArch",
    "Request",
    "arch_from_hf_config",
    "canonical_dtype",
    "device_class",
    "dtype_bytes",
    "engine_catalog",
    "engine_level_index",
    "engine_levels",
    "engine_id",
    "engine_ids",
    "get_engine",
    "get_gpu",
    "get_model",
    "gpu_catalog",
    "load_hf_config",
    "model_catalog",
    "static_power_w",
    "validate_request",
]
