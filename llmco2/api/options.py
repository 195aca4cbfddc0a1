"""Typed option records of the use cases: what a request is predicted with (:class:`RequestOptions`),
how its energy becomes carbon (:class:`Assumptions`), how a log is split over a Dask cluster
(:class:`ClusterOptions`), and a whole request-file job (:class:`FileJob`).

The records replace long keyword lists: every use case (one request, a frame, a file, a cluster,
a request inside a loaded server) takes the same records, and each option is declared once, here.
Errors name these fields (``field="region"``); the command line maps them to its flags.

Example:
    >>> from llmco2.api.options import Assumptions, RequestOptions
    >>> Assumptions(region="FR", pue=1.2).pue_value()
    1.2
    >>> RequestOptions(engine="hf").row_defaults().engine
    'hf'
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from llmco2.analytic.request_parsing import RowDefaults
from llmco2.errors import InvalidInputError
from llmco2.specs import DEFAULT_ENGINE
from llmco2.specs.limits import whole_number
from llmco2.specs.quantisation import canonical_quantisation


def parse_pue(value: float | str | None) -> float | str | None:
    """A PUE given as a number (dimensionless, e.g. ``1.1``) or as text: a number in text becomes
    the number, any other text is the name of a default (``google``, ``industry_average``, ...);
    ``None`` when not given."""
    if value is None or isinstance(value, (int, float)):
        return value
    if not isinstance(value, str):
        raise InvalidInputError(f"must be a number (at least 1) or the name of a default, got {type(value).__name__}",
                                field="pue")
    try:
        return float(value)
    except ValueError:
        return value


def check_flags(**flags: Any) -> None:
    """Booleans are booleans: ``"no"``, ``0`` or ``None`` for a flag is refused, not read as true or
    false (a NumPy bool is accepted)."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidInputError(f"must be True or False, got {value!r}", field=name)


def check_texts(**texts: Any) -> None:
    """An option given as text must say something: ``region=""`` or ``checkpoint=" "`` is refused
    (leave it out, or ``None``, for its default)."""
    for name, value in texts.items():
        if value is not None and isinstance(value, str) and not value.strip():
            raise InvalidInputError("is empty; give a value or leave it out (None) for its default", field=name)


@dataclass(frozen=True)
class RequestOptions:
    """How a request runs: engine, precisions, weight quantisation, attention kernel, and the checkpoint that predicts it.

    Attributes:
        engine: serving engine id (``vllm``, ``hf``, ``tensorrt-llm``, ...); in a request file, the
            engine of rows without an ``engine`` column.
        dtype: weight precision (``fp16``, ``bf16``, ``fp8``, ``int8``, ``int4``, ...); ``None``:
            ``fp16``, or the quantisation method's own dtype when ``quantisation`` is given.
        quantisation: weight quantisation method (``awq``, ``gptq``, ``bnb-int8``, ``bnb-nf4``,
            ``bnb-fp4``, ``fp8``, ``fp8-marlin``, ``mxfp4``, ``nvfp4``, ``none``, GGUF types; :mod:`llmco2.specs.quantisation`);
            ``None``: the kernels the dtype implies. In a request file, the method of rows without
            a ``quantisation`` column (or with an empty cell).
        act_dtype, kv_dtype: activation and KV-cache precisions (default: ``dtype``).
        flash_attention: fused attention kernels (default true).
        causal: count only the causal half of prefill attention.
        ignore_context: predict requests longer than the model's context window.
        approximate: accept an architecture llmco2 approximates (noted in the result).
        checkpoint: predictor checkpoint path (default: the shipped one).
    """

    engine: str = DEFAULT_ENGINE
    dtype: str | None = None
    act_dtype: str | None = None
    kv_dtype: str | None = None
    flash_attention: bool = True
    causal: bool = False
    ignore_context: bool = False
    approximate: bool = False
    checkpoint: str | None = None
    quantisation: str | None = None

    def __post_init__(self) -> None:
        check_flags(flash_attention=self.flash_attention, causal=self.causal, ignore_context=self.ignore_context,
                    approximate=self.approximate)
        check_texts(engine=self.engine, dtype=self.dtype, checkpoint=self.checkpoint, quantisation=self.quantisation)
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise InvalidInputError(f"must be the path of a checkpoint file, got {type(self.checkpoint).__name__}",
                                    field="checkpoint")
        if self.quantisation is not None:
            canonical_quantisation(self.quantisation)  # an unknown method is refused here, naming the field

    def row_defaults(self) -> RowDefaults:
        """The values a request file's rows take where they have no column of their own."""
        return RowDefaults(dtype=self.dtype, act_dtype=self.act_dtype, kv_dtype=self.kv_dtype,
                           flash_attention=self.flash_attention, causal=self.causal, engine=self.engine,
                           ignore_context=self.ignore_context, quantisation=self.quantisation)


@dataclass(frozen=True)
class Assumptions:
    """How energy becomes carbon.

    Attributes:
        region: grid region id (ISO country code, cloud region, ``world``); default: the world.
        carbon_intensity: grid intensity (g CO2eq/kWh) instead of a region's.
        pue: power usage effectiveness, a number >= 1 or the name of a default (``google``, ...).
        lifetime_years: GPU lifetime for embodied carbon (years; default 5).
        intensity: hourly grid intensity: a CSV path, a DataFrame / Arrow table or a loaded
            :class:`~llmco2.carbon.hourly.HourlyIntensity`; ``region`` then picks the file's region.
        timestamp: the time of one request (ISO 8601 text or datetime, UTC), with ``intensity``.
        scope: what carbon is computed on: ``server`` (default: the GPUs + the host's share of the
            request's GPU slots + power-supply losses, and the platform's non-GPU embodied carbon) or
            ``gpu`` (the GPUs alone, llmco2's figures before platforms existed). GPU energy is reported
            on both scopes.
        platform: the server around the GPUs (a platform id of ``llmco2/specs/data/platforms.toml``,
            e.g. ``hgx-h100-8``); default: each GPU's usual platform.
    """

    region: str | None = None
    carbon_intensity: float | None = None
    pue: float | str | None = None
    lifetime_years: float | None = None
    intensity: Any = field(default=None, compare=False)
    timestamp: Any = None
    scope: str = "server"
    platform: str | None = None

    def __post_init__(self) -> None:
        from llmco2.carbon.scoped import scope_entry

        check_texts(region=self.region, scope=self.scope, platform=self.platform)
        scope_entry(self.scope, self.platform)  # an unknown scope or platform is refused here

    def pue_value(self) -> float | str | None:
        """The PUE as a number when it is one, else the name of a default (``None``: not given)."""
        return parse_pue(self.pue)

    def annual(self) -> dict[str, Any]:
        """The keyword arguments of :func:`llmco2.carbon.assumptions.resolve_assumptions` (region,
        intensity, PUE, lifetime, scope, platform); the region is left to the hourly file when there is one."""
        return dict(region_id=None if self.intensity is not None else self.region, carbon_intensity=self.carbon_intensity,
                    pue_value=self.pue_value(), lifetime_years=self.lifetime_years, scope=self.scope,
                    platform=self.platform)


@dataclass(frozen=True)
class ClusterOptions:
    """Predicting request files on Dask.

    Attributes:
        address: ``local`` (worker processes on this machine) or a scheduler address
            (``tcp://host:8786``); ``None``: a single process.
        workers: local worker processes (default: CPUs, at most 4).
        partition_rows: rows per partition and Parquet part (a multiple of the chunk size).
        verbose: show the cluster's own logs.
    """

    address: str | None = None
    workers: int | None = None
    partition_rows: int | None = None
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.address is not None and not (isinstance(self.address, str) and self.address.strip()):
            raise InvalidInputError(f"must be 'local', a scheduler address (tcp://host:8786) or None, got "
                                    f"{self.address!r}", field="address")
        if self.workers is not None:
            whole_number(self.workers, "workers", 1, 1024)
        if self.partition_rows is not None:
            whole_number(self.partition_rows, "partition_rows", 1, 1 << 30)
        check_flags(verbose=self.verbose)


#: What a request-file job does with a row that fails its checks.
ON_ERROR = ("raise", "skip")


@dataclass(frozen=True)
class FileJob:
    """A request-file job: the file (or, on a cluster, a folder or glob), where the predictions go,
    and the options of its requests, carbon and cluster."""

    requests: str
    out: str | None
    options: RequestOptions = field(default_factory=RequestOptions)
    assumptions: Assumptions = field(default_factory=Assumptions)
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    #: ``raise``: a row that fails its checks stops the job (nothing is written); ``skip``: it is
    #: left out, and listed with its line and reason in ``OUT.rejects.csv``.
    on_error: str = "raise"

    def __post_init__(self) -> None:
        if not isinstance(self.requests, (str, os.PathLike)) or not str(self.requests).strip():
            raise InvalidInputError(f"must be the path of a request file (text), got {self.requests!r}", field="requests")
        if self.out is not None and (not isinstance(self.out, (str, os.PathLike)) or not str(self.out).strip()):
            raise InvalidInputError(f"must be an output path (text) or None, got {self.out!r}", field="out")
        for name in ("requests", "out"):
            path = getattr(self, name)
            if path is not None and (len(str(path)) > 4096 or any(len(part) > 255 for part in str(path).split(os.sep))):
                raise InvalidInputError(f"is too long for a path (a name over 255 characters, or over 4,096 in all): "
                                        f"{str(path)[:60]!r}...", field=name)
        for name, kind in (("options", RequestOptions), ("assumptions", Assumptions), ("cluster", ClusterOptions)):
            if not isinstance(getattr(self, name), kind):
                raise InvalidInputError(f"must be a {kind.__name__} (llmco2.{kind.__name__}), got "
                                        f"{type(getattr(self, name)).__name__}", field=name)
        if not isinstance(self.on_error, str) or self.on_error not in ON_ERROR:
            raise InvalidInputError(f"must be one of {', '.join(ON_ERROR)}, got {self.on_error!r}", field="on_error")

    def fingerprint_options(self) -> dict[str, Any]:
        """Every option of the job that changes its output, as JSON-ready values (what a resumed
        run must share with the run it continues; the cluster and its workers may differ)."""
        options = asdict(self.options)
        if options["quantisation"] is None:  # as a run written before the option existed records it
            options.pop("quantisation")
            options["dtype"] = options["dtype"] or "fp16"
        values = {**options, **{k: v for k, v in asdict(self.assumptions).items() if k != "intensity"},
                  "intensity": None if self.assumptions.intensity is None else str(self.assumptions.intensity),
                  "partition_rows": self.cluster.partition_rows, "on_error": self.on_error}
        return {k: v for k, v in sorted(values.items()) if not (isinstance(v, float) and not math.isfinite(v))}


def generated_tokens_of(generated_tokens: int | None, extra: dict[str, Any]) -> int:
    """``generated_tokens``, or its short spelling ``gen_tokens`` (the command line's ``--gen-tokens``,
    kept by convention 10, docs/reference/conventions.md; taken out of ``extra``); one of the two
    must be given."""
    old = extra.pop("gen_tokens", None)
    if old is not None:
        if generated_tokens is not None and generated_tokens != old:
            raise InvalidInputError("give generated_tokens once (gen_tokens is the same parameter)", field="generated_tokens")
        generated_tokens = old
    if generated_tokens is None:
        raise InvalidInputError("is required: the tokens generated per sequence", field="generated_tokens")
    return generated_tokens


_REQUEST_FIELDS = frozenset(f.name for f in fields(RequestOptions))
_ASSUMPTION_FIELDS = frozenset(f.name for f in fields(Assumptions))


def with_fields(options: RequestOptions | None, assumptions: Assumptions | None,
                values: dict[str, Any]) -> tuple[RequestOptions, Assumptions]:
    """The two records with the fields named in ``values`` replaced (``engine="hf"`` goes to the
    request options, ``region="FR"`` to the assumptions); an unknown name is refused."""
    for name, value, kind in (("options", options, RequestOptions), ("assumptions", assumptions, Assumptions)):
        if value is not None and not isinstance(value, kind):
            raise InvalidInputError(f"must be a {kind.__name__} (llmco2.{kind.__name__}) or None, got "
                                    f"{type(value).__name__}", field=name)
    unknown = sorted(set(values) - _REQUEST_FIELDS - _ASSUMPTION_FIELDS)
    if unknown:
        raise InvalidInputError(f"unknown option {unknown[0]!r}; the options are "
                                f"{', '.join(sorted(_REQUEST_FIELDS | _ASSUMPTION_FIELDS))}", field=unknown[0])
    opts = replace(options or RequestOptions(), **{k: v for k, v in values.items() if k in _REQUEST_FIELDS})
    assume = replace(assumptions or Assumptions(), **{k: v for k, v in values.items() if k in _ASSUMPTION_FIELDS})
    return opts, assume
