"""Serving engines (HF transformers eager or static-cache, vLLM, TensorRT-LLM, DeepSpeed, SGLang,
...) as a typed catalog: the engine is a model input, since at the same request energy differs
2-5x between engines, mostly through launch overhead and latency.

Names resolve case-insensitively through ids and aliases, and may carry the software's version
(``vllm 0.6.3``, ``vllm==0.10.1``, ``sglang v0.4.6``; :func:`versioned_engine`): a vLLM before 0.8
is ``vllm-v0``, the engine those releases ran by default. :func:`get_engine` raises on an unknown
name (for user input); :func:`engine_id` maps an unknown name to ``"unknown"`` (for importers and
data rows, where a new engine must degrade gracefully rather than fail).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources

from llmco2.errors import InvalidInputError
from llmco2.specs.lookup import Catalog
from llmco2.specs.toml_cache import loads_toml

UNKNOWN_ENGINE = "unknown"
DEFAULT_ENGINE = "vllm"
#: Share of a GPU's memory a serving engine takes for weights and KV cache (vLLM's default
#: ``gpu_memory_utilization``, 0.9); the rest holds the CUDA context, activations and graphs.
GPU_MEMORY_UTILIZATION = 0.9
#: The first vLLM release whose default engine is V1 (catalog ``vllm``); earlier ones ran V0 (``vllm-v0``):
#: vLLM 0.8.0 release notes, "We have now enabled V1 engine by default"
#: (https://github.com/vllm-project/vllm/pull/13726, https://github.com/vllm-project/vllm/releases/tag/v0.8.0).
VLLM_V1_DEFAULT_FROM = (0, 8)
#: An engine name followed by a version: ``vllm 0.6.3``, ``vllm==0.10.1.post1``, ``sglang-v0.4.6``, ``tgi@2.4``.
_VERSIONED = re.compile(r"^(?P<base>.*?[a-z.])\s*(?:==|@|-|_|/|\s)?\s*v?(?P<version>\d+(?:\.\d+){0,3})"
                        r"(?:[.+-]?(?:post|rc|dev|a|b)\w*)?\s*$", re.IGNORECASE)
_FIELDS = {"id", "name", "aliases", "cuda_graphs", "continuous_batching", "launch_overhead_us", "step_overhead_ms",
           "sequence_overhead_us", "serving_sequence_overhead_us", "feature_level", "fp16_accumulate", "sources"}


@dataclass(frozen=True)
class Engine:
    """One serving engine.

    Attributes:
        id: catalog id (``hf``, ``hf-static``, ``vllm``, ``vllm-eager``, ``tensorrt-llm``, ...).
        cuda_graphs: decode steps run as captured graphs (low host overhead per kernel).
        continuous_batching: iteration-level batching (a serving engine).
        launch_overhead_us: prior host cost per kernel launch of a decode step (microseconds);
            refitted on training rows, see :mod:`llmco2.physics.prior_fit`.
        step_overhead_ms: prior framework cost per step outside the kernels (milliseconds).
        sequence_overhead_us: prior host cost per sequence of a step (scheduling, sampling and
            output processing of each sequence; microseconds).
        serving_sequence_overhead_us: prior cost per sequence and step of an online server's front
            end where the engine runs it in its step loop (output processing, incremental
            detokenisation, streaming; microseconds); 0 where it runs in another process or in an
            offline batch run. Optional; sourced where given.
        feature_level: another engine whose level of the network's categorical input this one
            takes (empty: its own).
        fp16_accumulate: its fp16 GEMMs accumulate in fp16 (llama.cpp's cuBLAS path), which GeForce
            cards run at twice their fp32-accumulate rate (:func:`llmco2.specs.gpus.tensor_peak_ops_per_s`).
            Sourced where true.
    """

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    cuda_graphs: bool = False
    continuous_batching: bool = False
    launch_overhead_us: float = 8.0
    step_overhead_ms: float = 1.5
    sequence_overhead_us: float = 10.0
    serving_sequence_overhead_us: float = 0.0
    feature_level: str = ""
    fp16_accumulate: bool = False
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def level(self) -> str:
        """The level of the learned network's categorical engine input this engine takes: its own
        id, or ``feature_level`` for a version of another engine's software."""
        return self.feature_level or self.id


def _load(text: str) -> list[Engine]:
    out = []
    for raw in loads_toml(text, "engines")["engine"]:
        unknown = set(raw) - _FIELDS
        if unknown:
            raise ValueError(f"engine {raw.get('id')!r}: unknown keys {sorted(unknown)}")
        required = ("launch_overhead_us", "step_overhead_ms", "sequence_overhead_us")
        if not isinstance(raw.get("fp16_accumulate", False), bool):
            raise ValueError(f"engine {raw['id']!r}: fp16_accumulate must be true or false")
        optional = [k for k in ("serving_sequence_overhead_us",) if k in raw] + (["fp16_accumulate"] if raw.get("fp16_accumulate") else [])
        for key in (*required, *optional):  # optional keys: sourced where given
            if key not in raw.get("sources", {}):
                raise ValueError(f"engine {raw['id']!r}: {key} has no source")
        if raw.get("feature_level") and raw["feature_level"] not in {r["id"] for r in loads_toml(text, "engines")["engine"]}:
            raise ValueError(f"engine {raw['id']!r}: feature_level {raw['feature_level']!r} is not a catalog id")
        out.append(Engine(**{**raw, "aliases": tuple(raw.get("aliases", ()))}))
    return out


@functools.cache
def engine_catalog() -> Catalog[Engine]:
    """Every engine of ``llmco2/specs/data/engines.toml``."""
    text = (resources.files("llmco2.specs") / "data" / "engines.toml").read_text()
    return Catalog("engine", _load(text))


def engine_ids() -> list[str]:
    """Catalog ids in file order (``unknown`` last); the categorical levels of the model input."""
    return engine_catalog().ids


def engine_levels() -> list[str]:
    """Levels of the learned network's categorical engine input: catalog ids that are their own
    level, in file order (``unknown`` last)."""
    return [e.id for e in engine_catalog() if not e.feature_level]


def engine_level_index(name: object) -> int:
    """Index into :func:`engine_levels` of the engine ``name`` (``unknown`` for a name the catalog lacks)."""
    return _level_index()[engine_id(name)]


@functools.cache
def _level_index() -> dict[str, int]:
    levels = engine_levels()
    return {e.id: levels.index(e.level) for e in engine_catalog()}


def versioned_engine(name: str) -> str | None:
    """The catalog id of an engine name that carries its software's version (``"vllm 0.6.3"`` ->
    ``vllm-v0``, ``"vllm==0.10.1"`` -> ``vllm``, ``"sglang v0.4.6"`` -> ``sglang``), or ``None`` where
    ``name`` is not a catalog name plus a version. vLLM releases before :data:`VLLM_V1_DEFAULT_FROM`
    ran the V0 engine."""
    match = _VERSIONED.match(name.strip())
    cat = engine_catalog()
    if match is None or match["base"] not in cat:
        return None
    base = cat.get(match["base"]).id
    if base == "vllm":
        version = tuple(int(x) for x in match["version"].split("."))
        return "vllm-v0" if version < VLLM_V1_DEFAULT_FROM else "vllm"
    return base


def get_engine(name: str | None) -> Engine:
    """The engine named ``name`` (``None``: the default, vLLM), with or without a version
    (:func:`versioned_engine`); unknown names are an error that lists close matches."""
    if name is None:
        name = DEFAULT_ENGINE
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"must name an engine ({', '.join(engine_ids())}), got {name!r}", field="engine")
    cat = engine_catalog()
    if name not in cat:
        versioned = versioned_engine(name)
        if versioned is not None:
            return cat.get(versioned)
    return cat.get(name, field="engine")


def engine_id(name: object) -> str:
    """The catalog id of ``name``, or ``"unknown"`` for a missing or unrecognised name (data rows)."""
    if name is None or not isinstance(name, str) or not name.strip():
        return UNKNOWN_ENGINE
    cat = engine_catalog()
    return cat.get(name).id if name in cat else (versioned_engine(name) or UNKNOWN_ENGINE)
