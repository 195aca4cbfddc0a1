"""The Python API (DESIGN.md convention 10): :func:`predict` one request, :func:`predict_frame` a
table of requests, :func:`serve` a request stream inside a continuously batched server.

``llmco2.predict(...).to_dict()`` is the object ``llmco2 predict ... --json`` prints: the command
builds it with :func:`single_prediction`, as :func:`predict` does. :func:`predict_frame` reads the
columns of ``llmco2 predict --requests`` and adds the columns that command writes, with the same
torch-free model and the same chunks. Bad input raises
:class:`~llmco2.errors.InvalidInputError` with the message the command prints (after
``llmco2: error:``) before exiting with code 2.

Units: energy in J, latency in s, carbon in g CO2eq, grid intensity in g CO2eq/kWh.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from llmco2.errors import InvalidInputError

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
        assumptions: grid intensity, PUE, GPU lifetime and engine, with their sources.
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

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``llmco2 predict ... --json`` (a fresh copy)."""
        return copy.deepcopy(self.record)


def _request(model: str | ModelArch, gpu: str | GPU, batch_size: int, prompt_tokens: int, gen_tokens: int, gpus: int,
             tp: int | None, engine: str, dtype: str, act_dtype: str | None, kv_dtype: str | None, flash_attention: bool,
             causal: bool, ignore_context: bool, approximate: bool) -> tuple[ModelArch, Request, GPU]:
    """The validated (arch, request, GPU) of one request."""
    from llmco2.specs import Request, get_gpu, get_model, validate_request

    arch = get_model(model, approximate=approximate)
    dev = get_gpu(gpu)
    req = Request(batch_size=batch_size, prompt_tokens=prompt_tokens, generated_tokens=gen_tokens, num_gpus=gpus,
                  tensor_parallel=tp, weight_dtype=dtype, activation_dtype=act_dtype, kv_dtype=kv_dtype,
                  flash_attention=flash_attention, causal=causal)
    validate_request(req, arch, dev, check_context=not ignore_context)
    return arch, req.replace(engine=engine), dev


def memory_notes(arch: ModelArch, req: Request, gpu: GPU) -> list[str]:
    """A note when the request's weights and caches do not fit the GPUs' memory."""
    from llmco2.analytic.layer import analyze_layer
    from llmco2.analytic.model import model_totals

    t = model_totals(analyze_layer(arch, req, gpu, check_context=False))  # the context is checked by _request
    if bool(t.fits_in_memory[0]):
        return []
    need = float(t.weight_bytes_per_gpu[0] + t.kv_cache_bytes_per_gpu[0])
    return [f"does not fit: needs {need / 1e9:.1f} GB per GPU ({float(t.weight_bytes_per_gpu[0]) / 1e9:.1f} GB weights + "
            f"{float(t.kv_cache_bytes_per_gpu[0]) / 1e9:.2f} GB cache), {gpu.memory_bytes / 1e9:.0f} GB available on each of "
            f"{req.num_gpus} x {gpu.id}; the prediction assumes it ran"]


def _hourly(intensity: str | Path | Any | None, timestamp: Any, carbon_intensity: float | None,
            basis: str = "direct") -> HourlyIntensity | None:
    """The hourly intensities of ``intensity`` (a CSV path, a frame or a loaded file), after the
    checks of the options that go with it."""
    if intensity is None:
        if timestamp is not None:
            raise InvalidInputError("only applies with --intensity-file CSV (hourly grid intensity)", field="--timestamp")
        return None
    if carbon_intensity is not None:
        raise InvalidInputError("give either --intensity-file or --carbon-intensity, not both", field="--intensity-file")
    from llmco2.carbon.hourly import HourlyIntensity, load_intensity

    return intensity if isinstance(intensity, HourlyIntensity) else load_intensity(intensity, basis)


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


def single_prediction(model: str | ModelArch, gpu: str | GPU, *, batch_size: int = 1, prompt_tokens: int, gen_tokens: int,
                      gpus: int = 1, tp: int | None = None, engine: str = "vllm", region: str | None = None,
                      carbon_intensity: float | None = None, pue: float | str | None = None,
                      lifetime_years: float | None = None, intensity: str | Path | Any | None = None, timestamp: Any = None,
                      dtype: str = "fp16", act_dtype: str | None = None, kv_dtype: str | None = None,
                      flash_attention: bool = True, causal: bool = False, ignore_context: bool = False,
                      approximate: bool = False, checkpoint: str | None = None,
                      ) -> tuple[dict[str, Any], tuple[ModelArch, Request, GPU]]:
    """The JSON object of ``llmco2 predict ... --json`` and the request's (arch, request, GPU).
    The request is checked before the checkpoint is loaded."""
    check_flags(flash_attention=flash_attention, causal=causal, ignore_context=ignore_context, approximate=approximate)
    check_texts(region=region, checkpoint=checkpoint, engine=engine, dtype=dtype)
    from llmco2.carbon.assumptions import resolve_assumptions
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.models.predict import load_predictor

    if isinstance(pue, str):
        from llmco2.cli.common import parse_pue

        pue = parse_pue(pue)
    arch, req, dev = _request(model, gpu, batch_size, prompt_tokens, gen_tokens, gpus, tp, engine, dtype, act_dtype, kv_dtype,
                              flash_attention, causal, ignore_context, approximate)
    hourly = _hourly(intensity, timestamp, carbon_intensity)
    if hourly is not None and timestamp is None:
        raise InvalidInputError("--intensity-file needs the request's time: --timestamp ISO-8601 (UTC, e.g. "
                                "2024-03-01T14:00:00Z)", field="--timestamp")
    assume = resolve_assumptions([dev], None if hourly is not None else region, carbon_intensity, pue, lifetime_years,
                                 engine=req.engine)
    fp = predict_footprint([(arch, req, dev)], load_predictor(checkpoint), assumptions=assume)
    if hourly is not None:
        fp = _single_hour(fp, hourly, timestamp, region)
    record = {"model": arch.id, "gpu": dev.id, "num_gpus": req.num_gpus, "engine": req.engine, "batch_size": req.batch_size,
              "prompt_tokens": req.prompt_tokens, "generated_tokens": req.generated_tokens, **fp.record(0)}
    record["notes"] = [*arch.approximations, *memory_notes(arch, req, dev), *record["notes"]]
    energy, carbon = record["energy_j"], record["carbon_g"]
    record.update(prefill=energy["prefill"], decode=energy["decode"], total=energy["total"],
                  operational=carbon["operational"], embodied=carbon["embodied"])
    return record, (arch, req, dev)


def _single_hour(fp: Any, hourly: HourlyIntensity, timestamp: Any, region: str | None) -> Any:
    """``fp`` with the intensity of the hour (and region) of ``timestamp``."""
    from llmco2.carbon.hourly import lookup, with_hourly_carbon
    from llmco2.carbon.timestamps import hour_text, hours_of, parse_seconds

    seconds = parse_seconds([timestamp], where="--timestamp")
    values, outside = lookup(hourly, [timestamp], [region], region, where="--timestamp")
    hour = int(hours_of(seconds)[0])
    if outside[0]:
        of = f" of region {region}" if len(hourly.regions) > 1 else ""
        raise InvalidInputError(f"{str(timestamp)!r} (hour {hour_text(hour)}) is outside the hours{of} of {hourly.source} "
                                f"({hourly.span()})", field="--timestamp")
    fp = with_hourly_carbon(fp, values)
    name = region if len(hourly.regions) > 1 else (hourly.regions[0] or None)
    fp.assumptions["grid"] = hourly.grid(values, region=name, hour=hour)
    return fp


def predict(model: str | ModelArch, gpu: str | GPU, *, batch_size: int = 1, prompt_tokens: int, gen_tokens: int,
            gpus: int = 1, tp: int | None = None, engine: str = "vllm", region: str | None = None,
            carbon_intensity: float | None = None, pue: float | str | None = None, lifetime_years: float | None = None,
            intensity: str | Path | Any | None = None, timestamp: Any = None, **options: Any) -> Prediction:
    """Predict one request: GPU energy (J) and latency (s) per phase, carbon (g CO2eq).

    Args:
        model, gpu: catalog ids (``"llama3.1-8b"``, ``"h100"``), a HF ``config.json`` path for the
            model, or :class:`~llmco2.specs.ModelArch` / :class:`~llmco2.specs.GPU` objects.
        batch_size, prompt_tokens, gen_tokens: the request (sequences, tokens per sequence).
        gpus, tp: GPUs serving it and the tensor-parallel degree (default: ``gpus``).
        engine: serving engine id (``vllm``, ``hf``, ``tensorrt-llm``, ...).
        region, carbon_intensity: grid region id or intensity (g CO2eq/kWh); default: the world.
        pue: power usage effectiveness, a number >= 1 or a named default (``google``, ...).
        lifetime_years: GPU lifetime for embodied carbon.
        intensity, timestamp: an hourly intensity file (CSV path, or a DataFrame / Arrow table with
            ``timestamp``, ``g_co2eq_per_kwh``[, ``region``]) and the request's time (ISO 8601
            text or datetime, UTC); ``region`` then picks the file's region.
        options: ``dtype``, ``act_dtype``, ``kv_dtype``, ``flash_attention``, ``causal``,
            ``ignore_context``, ``approximate``, ``checkpoint`` (as the command-line options).

    Raises:
        InvalidInputError: bad input, with the message of ``llmco2 predict``.
    """
    record, _ = single_prediction(model, gpu, batch_size=batch_size, prompt_tokens=prompt_tokens, gen_tokens=gen_tokens,
                                  gpus=gpus, tp=tp, engine=engine, region=region, carbon_intensity=carbon_intensity, pue=pue,
                                  lifetime_years=lifetime_years, intensity=intensity, timestamp=timestamp, **options)
    return Prediction.from_record(record)


def predict_frame(frame: Any, *, engine: str = "vllm", region: str | None = None, carbon_intensity: float | None = None,
                  pue: float | str | None = None, lifetime_years: float | None = None,
                  intensity: str | Path | Any | None = None, dtype: str = "fp16", flash_attention: bool = True,
                  ignore_context: bool = False, checkpoint: str | None = None) -> Any:
    """Predict every row of a request table and return it with the prediction columns added.

    ``frame``: a pandas DataFrame or pyarrow Table with the columns of ``llmco2 predict
    --requests`` (``model, gpu, batch_size, prompt_tokens, generated_tokens`` [, ``num_gpus,
    tensor_parallel, dtype, flash_attention, engine, region``], and ``timestamp`` [, ``region``] with
    ``intensity``). A ``region`` column charges each row at its own region's annual intensity (an
    empty cell: ``region``). The result has the same type, the input columns (a column named like a
    prediction column is replaced) and ``prefill_j, decode_j, total_j`` (J), their interval ends,
    ``latency_s`` (s), ``operational_g, embodied_g, total_g`` (g CO2eq) and ``extrapolated``: the
    numbers ``predict --requests`` writes for the same rows. ``engine``, ``dtype`` and
    ``flash_attention`` apply to rows without those columns. Errors name rows by their line in a
    CSV of the table (the header is line 1).
    """
    import pyarrow as pa

    from llmco2.analytic.request_files import CHUNK_ROWS
    from llmco2.carbon.assumptions import resolve_assumptions
    from llmco2.carbon.footprint import predict_footprint
    from llmco2.cli.predict_file import PREDICTION_COLUMNS, prediction_arrays
    from llmco2.models.predict import load_predictor
    from llmco2.specs import get_engine

    check_flags(flash_attention=flash_attention, ignore_context=ignore_context)
    check_texts(region=region, checkpoint=checkpoint, engine=engine, dtype=dtype)
    table, to_pandas = _as_table(frame)
    hourly = _hourly(intensity, None, carbon_intensity)
    defaults = SimpleNamespace(engine=get_engine(engine).id, dtype=dtype, flash_attention=flash_attention, act_dtype=None,
                               kv_dtype=None, causal=False, ignore_context=ignore_context)
    requests = _parse(table, defaults, hourly is not None)
    assume = resolve_assumptions(_distinct_gpus(requests), None if hourly is not None else region, carbon_intensity, pue,
                                 lifetime_years, engine=defaults.engine)
    g = _frame_intensities(table, hourly, region) if hourly is not None else None
    if g is None and carbon_intensity is None and "region" in table.column_names:  # each row at its own region
        from llmco2.carbon.region_rows import row_intensities

        g = row_intensities(table.column("region").to_pylist(), region)
    predictor = load_predictor(checkpoint)
    parts: list[list[Any]] = []
    for lo in range(0, len(requests), CHUNK_ROWS):
        part = requests.take(slice(lo, lo + CHUNK_ROWS))
        fp = predict_footprint(part, predictor, assumptions=assume, chunk=max(len(part), 1))
        if g is not None:
            from llmco2.carbon.hourly import with_hourly_carbon

            fp = with_hourly_carbon(fp, g[lo:lo + CHUNK_ROWS])
        parts.append(prediction_arrays(fp))
    keep = [n for n in table.column_names if n not in PREDICTION_COLUMNS]
    columns = [table.column(n) for n in keep] + [pa.chunked_array([p[i] for p in parts]) for i in range(len(PREDICTION_COLUMNS))]
    out = pa.Table.from_arrays(columns, names=[*keep, *PREDICTION_COLUMNS])
    if not to_pandas:
        return out
    result = frame.drop(columns=[c for c in frame.columns if c in PREDICTION_COLUMNS]).copy()
    for name in PREDICTION_COLUMNS:
        result[name] = out.column(name).to_numpy(zero_copy_only=False)
    return result


def _as_table(frame: Any) -> tuple[Any, bool]:
    """``(pyarrow Table of frame, whether frame is a pandas DataFrame)``."""
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame, False
    import pandas as pd

    if isinstance(frame, pd.DataFrame):
        if len(set(map(str, frame.columns))) != len(frame.columns):
            raise InvalidInputError("a column appears more than once; keep one", field="frame")
        return pa.Table.from_pandas(frame, preserve_index=False), True
    raise InvalidInputError(f"must be a pandas DataFrame or a pyarrow Table, got {type(frame).__name__}", field="frame")


def _parse(table: Any, defaults: Any, hourly: bool) -> Any:
    """The validated :class:`~llmco2.analytic.table.RequestTable` of an Arrow table (cells as
    text, as ``predict --requests`` reads them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from llmco2.analytic.request_files import _Resolver, check_header, parse_chunk

    header = [str(n).strip() for n in table.column_names]
    check_header(Path("frame"), header)
    if hourly and "timestamp" not in header:
        raise InvalidInputError("frame has no timestamp column; an hourly intensity needs each request's time "
                                "(ISO 8601, UTC) in a timestamp column", field="--intensity-file")
    if not table.num_rows:
        raise InvalidInputError("frame has a header but no requests", field="--requests")
    cols = []
    for c in table.columns:
        text = c if pa.types.is_string(c.type) else pc.cast(c, pa.string())
        cols.append(pc.fill_null(text.combine_chunks(), pa.scalar("", pa.string())))
    batch = pa.RecordBatch.from_arrays(cols, names=header)
    lines = 2 + np.arange(table.num_rows, dtype=np.int64)
    try:
        return parse_chunk(header, batch, lines, _Resolver(defaults), not defaults.ignore_context)
    except InvalidInputError as exc:
        raise InvalidInputError(f"frame, {exc}", field=None) from None


def _distinct_gpus(requests: Any) -> list[Any]:
    return list({g.id: g for g in requests.gpus}.values())


def _frame_intensities(table: Any, hourly: HourlyIntensity, region: str | None) -> Any:
    from llmco2.carbon.hourly import intensity_for

    regions = table.column("region").to_pylist() if "region" in table.column_names else None
    lines = 2 + np.arange(table.num_rows, dtype=np.int64)
    return intensity_for(hourly, table.column("timestamp"), regions, region, lines, "frame")

