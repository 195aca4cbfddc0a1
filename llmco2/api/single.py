"""One request: :func:`predict` and the :class:`Prediction` it returns.

``llmco2.predict(...).to_dict()`` is the object ``llmco2 predict ... --json`` prints: the command
builds it with :func:`single_prediction`, as :func:`predict` does. Bad input raises
:class:`~llmco2.errors.InvalidInputError` naming the parameter; the command prints the same
message with the parameter's flag (after ``llmco2: error:``) before exiting with code 2.

Units: energy in J, latency in s, carbon in g CO2eq, grid intensity in g CO2eq/kWh.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmco2.api.options import Assumptions, RequestOptions, generated_tokens_of, with_fields
from llmco2.api.output_columns import memory_note
from llmco2.errors import InvalidInputError
from llmco2.specs import get_engine

if TYPE_CHECKING:
    from llmco2.carbon.hourly import HourlyIntensity
    from llmco2.specs import GPU, ModelArch, Request

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prediction:
    """One request's prediction.

    Attributes:
        energy_j: GPU energy (J) of ``prefill``, ``decode`` and ``total``.
        latency_s: latency (s) of the same phases.
        carbon_g: ``operational``, ``embodied`` (None when unknown) and ``total`` (g CO2eq).
        interval: ``[low, high]`` energy (J) per phase, at the levels in ``record["interval_levels"]``.
        notes: extrapolations, approximations and memory warnings, in words.
        assumptions: grid intensity, PUE, GPU lifetime, engine and scope (``assumptions["scope"]``:
            the scope carbon is on, the platform, its host share and their sources).

    The record also holds ``server_energy_j`` (J, wall: GPUs + host share + power-supply losses,
    per phase): :attr:`server_energy_j`.
    """

    energy_j: dict[str, float]
    latency_s: dict[str, float]
    carbon_g: dict[str, float | None]
    interval: dict[str, list[float]]
    notes: tuple[str, ...]
    assumptions: dict[str, Any] = field(repr=False)
    record: dict[str, Any] = field(repr=False)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Prediction:
        r = copy.deepcopy(record)
        return cls(r["energy_j"], r["latency_s"], r["carbon_g"], r["energy_j_interval"], tuple(r["notes"]), r["assumptions"], r)

    @property
    def server_energy_j(self) -> dict[str, float] | None:
        """Server wall energy (J) of ``prefill``, ``decode`` and ``total``: the GPUs, the host's share of
        the request's GPU slots and time, and the power-supply losses."""
        return copy.deepcopy(self.record.get("server_energy_j"))

    @property
    def scope(self) -> str | None:
        """The scope the carbon is computed on: ``server`` or ``gpu``."""
        return self.assumptions.get("scope", {}).get("scope")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``llmco2 predict ... --json`` (a fresh copy)."""
        return copy.deepcopy(self.record)

    def to_frame(self) -> Any:
        """One-row pandas DataFrame: the request and the columns ``predict --requests`` writes
        (``prefill_j, decode_j, total_j`` and their interval ends in J, ``server_j``, ``latency_s``,
        ``operational_g, embodied_g, total_g``, ``extrapolated``) and what the row assumed, as
        ``predict_frame`` gives it: ``grid_region``, ``intensity_g_per_kwh`` (g CO2eq/kWh), ``pue``
        and ``notes`` (joined with ``"; "``)."""
        import pandas as pd

        from llmco2.api.chunks import PREDICTION_COLUMNS

        r = self.record
        iv = r["energy_j_interval"]
        values = {f"{p}_j": r["energy_j"][p] for p in ("prefill", "decode", "total")}
        values.update({f"{p}_j_{end}": iv[p][i] for p in ("prefill", "decode", "total") for i, end in enumerate(("low", "high"))})
        server = r.get("server_energy_j")
        values.update(server_j=None if server is None else server["total"], latency_s=r["latency_s"]["total"], operational_g=r["carbon_g"]["operational"],
                      embodied_g=r["carbon_g"]["embodied"], total_g=r["carbon_g"]["total"], extrapolated=bool(r["extrapolated"]))
        row = {k: r[k] for k in ("model", "gpu", "num_gpus", "engine", "batch_size", "prompt_tokens", "generated_tokens")}
        row.update({c: values[c] for c in PREDICTION_COLUMNS})
        grid, pue = r["assumptions"]["grid"], r["assumptions"]["pue"]
        row.update(grid_region=grid.get("region"), intensity_g_per_kwh=grid.get("g_co2eq_per_kwh"),
                   pue=pue.get("value") if isinstance(pue, dict) else pue, notes="; ".join(self.notes))
        return pd.DataFrame([row])

    def _repr_html_(self) -> str:
        """The notebook display: the one-row table of :meth:`to_frame` and the notes."""
        from html import escape

        notes = "".join(f"<li>{escape(n)}</li>" for n in self.notes)
        return self.to_frame().to_html(index=False) + (f"<ul>{notes}</ul>" if notes else "")


def _request(model: str | ModelArch, gpu: str | GPU, batch_size: int, prompt_tokens: int, generated_tokens: int, gpus: int,
             tp: int | None, opts: RequestOptions, ep: int | None = None) -> tuple[ModelArch, Request, GPU]:
    """The validated (arch, request, GPU) of one request."""
    from llmco2.specs import Request, get_gpu, get_model, validate_request

    arch = get_model(model, approximate=opts.approximate)
    dev = get_gpu(gpu)
    req = Request(batch_size=batch_size, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens, num_gpus=gpus,
                  tensor_parallel=tp, expert_parallel=ep, weight_dtype=opts.dtype, activation_dtype=opts.act_dtype, kv_dtype=opts.kv_dtype,
                  flash_attention=opts.flash_attention, causal=opts.causal, quantisation=opts.quantisation)
    validate_request(req, arch, dev, check_context=not opts.ignore_context)
    return arch, req.replace(engine=opts.engine), dev


def memory_notes(arch: ModelArch, req: Request, gpu: GPU) -> list[str]:
    """A note when the request's weights and caches do not fit the GPUs' memory, or its batch runs
    in waves of the sequences its paged KV cache holds (:func:`memory_note`)."""
    from llmco2.analytic.layer import analyze_layer
    from llmco2.analytic.model import model_totals

    t = model_totals(analyze_layer(arch, req, gpu, check_context=False))  # the context is checked by _request
    note = memory_note(float(t.weight_bytes_per_gpu[0]), float(t.kv_cache_bytes_per_gpu[0]), gpu, req.num_gpus,
                       req.batch_size, get_engine(req.engine).continuous_batching)
    return [note] if note else []


def hourly_of(intensity: str | Path | Any | None, timestamp: Any, carbon_intensity: float | None,
            basis: str = "direct") -> HourlyIntensity | None:
    """The hourly intensities of ``intensity`` (a CSV path, a frame or a loaded file), after the
    checks of the options that go with it."""
    if intensity is None:
        if timestamp is not None:
            raise InvalidInputError("only applies with `intensity` (an hourly grid intensity file)", field="timestamp")
        return None
    if carbon_intensity is not None:
        raise InvalidInputError("give either `intensity` or `carbon_intensity`, not both", field="intensity")
    from llmco2.carbon.hourly import HourlyIntensity, load_intensity

    return intensity if isinstance(intensity, HourlyIntensity) else load_intensity(intensity, basis)


def single_prediction(model: str | ModelArch, gpu: str | GPU, *, batch_size: int = 1, prompt_tokens: int,
                      generated_tokens: int, gpus: int = 1, tp: int | None = None, options: RequestOptions | None = None,
                      assumptions: Assumptions | None = None,
                      ep: int | None = None) -> tuple[dict[str, Any], tuple[ModelArch, Request, GPU]]:
    """The JSON object of ``llmco2 predict ... --json`` and the request's (arch, request, GPU).
    The request is checked before the checkpoint is loaded. With expert parallelism (``ep`` > 1)
    the record says so (``expert_parallel``, and the tensor-parallel degree)."""
    from llmco2.carbon.assumptions import resolve_assumptions
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.prediction.loading import load_predictor

    opts, assume_in = options or RequestOptions(), assumptions or Assumptions()
    arch, req, dev = _request(model, gpu, batch_size, prompt_tokens, generated_tokens, gpus, tp, opts, ep)
    timestamp, region = assume_in.timestamp, assume_in.region
    hourly = hourly_of(assume_in.intensity, timestamp, assume_in.carbon_intensity)
    if hourly is not None and timestamp is None:
        raise InvalidInputError("`intensity` needs the request's time: `timestamp`, ISO 8601 (UTC, e.g. "
                                "2024-03-01T14:00:00Z)", field="timestamp")
    assume = resolve_assumptions([dev], **assume_in.annual(), engine=req.engine)
    fp = predict_footprint([(arch, req, dev)], load_predictor(opts.checkpoint), assumptions=assume)
    if hourly is not None:
        fp = _single_hour(fp, hourly, timestamp, region)
    record = {"model": arch.id, "gpu": dev.id, "num_gpus": req.num_gpus, "engine": req.engine, "batch_size": req.batch_size,
              "prompt_tokens": req.prompt_tokens, "generated_tokens": req.generated_tokens, **fp.record(0)}
    if req.expert_parallel > 1:  # type: ignore[operator]
        record.update(tensor_parallel=req.tensor_parallel, expert_parallel=req.expert_parallel)
    record["notes"] = [*arch.approximations, *memory_notes(arch, req, dev), *record["notes"]]
    energy, carbon = record["energy_j"], record["carbon_g"]
    record.update(prefill=energy["prefill"], decode=energy["decode"], total=energy["total"],
                  operational=carbon["operational"], embodied=carbon["embodied"])
    return record, (arch, req, dev)


def _single_hour(fp: Any, hourly: HourlyIntensity, timestamp: Any, region: str | None) -> Any:
    """``fp`` with the intensity of the hour (and region) of ``timestamp``."""
    from llmco2.carbon.footprint import with_hourly_carbon
    from llmco2.carbon.hourly import lookup
    from llmco2.carbon.timestamps import hour_text, hours_of, parse_seconds

    try:
        seconds = parse_seconds([timestamp])
    except InvalidInputError:
        raise InvalidInputError(f"{str(timestamp)!r} is not an ISO 8601 time (e.g. 2024-03-01T14:00:00Z; without a zone "
                                "offset it is read as UTC)", field="timestamp") from None
    values, outside = lookup(hourly, [timestamp], [region], region)
    hour = int(hours_of(seconds)[0])
    if outside[0] and hourly.within_span(hour):
        of = f" for region {region}" if len(hourly.regions) > 1 else ""
        raise InvalidInputError(f"{str(timestamp)!r}: {hourly.source} has no row for hour {hour_text(hour)}{of} (it spans "
                                f"{hourly.span()} with gaps)", field="timestamp")
    if outside[0]:
        of = f" of region {region}" if len(hourly.regions) > 1 else ""
        raise InvalidInputError(f"{str(timestamp)!r} (hour {hour_text(hour)}) is outside the hours{of} of {hourly.source} "
                                f"({hourly.span()})", field="timestamp")
    fp = with_hourly_carbon(fp, values)
    name = region if len(hourly.regions) > 1 else (hourly.regions[0] or None)
    fp.assumptions["grid"] = hourly.grid(values, region=name, hour=hour)
    return fp


def predict(model: str | ModelArch, gpu: str | GPU, *, batch_size: int = 1, prompt_tokens: int,
            generated_tokens: int | None = None, gpus: int = 1, tp: int | None = None, ep: int | None = None,
            options: RequestOptions | None = None, assumptions: Assumptions | None = None,
            **fields: Any) -> Prediction | list[Prediction]:
    """Predict one request: GPU energy (J) and latency (s) per phase, carbon (g CO2eq).

    Lists predict many requests: give a list (or tuple) for any of ``model``, ``gpu``,
    ``batch_size``, ``prompt_tokens``, ``generated_tokens``, ``gpus``, ``tp`` and ``ep``, every list of the
    same length, the other arguments shared; the result is then a list of predictions in that order.
    For tables of thousands of requests, :func:`llmco2.predict_frame` is faster.

    Args:
        model, gpu: catalog ids (``"llama3.1-8b"``, ``"h100"``), a HF ``config.json`` path for the
            model, or :class:`~llmco2.specs.ModelArch` / :class:`~llmco2.specs.GPU` objects.
        batch_size, prompt_tokens, generated_tokens: the request (sequences, tokens per sequence).
        gpus, tp: GPUs serving it and the tensor-parallel degree (default: ``gpus``).
        ep: expert-parallel degree of a mixture-of-experts model (default 1: experts split by ``tp``);
            a multiple of ``tp`` dividing ``gpus`` and the model's experts, as vLLM's
            ``--enable-expert-parallel`` with ``--data-parallel-size ep / tp``: attention
            tensor-parallel over ``tp`` GPUs and data-parallel over ``ep / tp`` groups, each GPU
            holding ``1 / ep`` of the experts whole (:mod:`llmco2.analytic.experts`).
        options: a :class:`~llmco2.api.options.RequestOptions` (engine, precisions, attention,
            checkpoint).
        assumptions: an :class:`~llmco2.api.options.Assumptions` (region or intensity, PUE,
            lifetime, hourly intensity and the request's timestamp).
        fields: any field of either record by name (``engine="hf"``, ``region="FR"``, ...),
            which takes precedence over the record's value.

    Raises:
        InvalidInputError: bad input, with the message of ``llmco2 predict``.

    Example:
        >>> import llmco2
        >>> p = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=1000, generated_tokens=200, region="FR")
        >>> grid = p.assumptions["grid"]
        >>> p.energy_j["total"] > 0, grid["region"]
        (True, 'fra')
        >>> tuple(round(q.latency_s["total"], 2) for q in llmco2.predict("llama3.1-8b", "h100", prompt_tokens=1000,
        ...                                                               generated_tokens=(50, 100)))
        (0.38, 0.73)
    """
    generated_tokens = generated_tokens_of(generated_tokens, fields)
    opts, assume = with_fields(options, assumptions, fields)
    values = {"model": model, "gpu": gpu, "batch_size": batch_size, "prompt_tokens": prompt_tokens,
              "generated_tokens": generated_tokens, "gpus": gpus, "tp": tp, "ep": ep}
    rows = request_rows(values)
    records = [single_prediction(r.pop("model"), r.pop("gpu"), **r, options=opts, assumptions=assume)[0]
               for r in (rows if rows is not None else [values])]
    predictions = [Prediction.from_record(r) for r in records]
    return predictions if rows is not None else predictions[0]


def request_rows(values: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The requests of ``values`` when some of them are lists (or tuples) of one length, the rest
    shared; ``None`` when none is."""
    lists = {k: list(v) for k, v in values.items() if isinstance(v, (list, tuple))}
    if not lists:
        return None
    lengths = {len(v) for v in lists.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise InvalidInputError("lists of requests must be non-empty and of one length, got lengths "
                                + ", ".join(f"{k} {len(v)}" for k, v in lists.items()), field=next(iter(lists)))
    n = lengths.pop()
    return [{k: lists[k][i] if k in lists else v for k, v in values.items()} for i in range(n)]
