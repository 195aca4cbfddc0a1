"""Property-based checks of the Python API: random and hostile arguments to ``llmco2.predict``,
``predict_frame``, ``serve`` and ``compare``, a ``config.json`` of random fields and types given as
the model, and a checkpoint whose metadata was perturbed and re-hashed (so its digests match).
Every call either returns finite results of the documented types or raises
:class:`llmco2.InvalidInputError` with one line that names no command-line flag; never another
exception, never NaN or infinity. A flag given as anything but a boolean (``flash_attention="no"``)
is refused."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import llmco2
from llmco2.prediction.checkpoint_file import read_checkpoint, write_checkpoint
from llmco2.prediction.loading import default_checkpoint_path

ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FLAG = re.compile(r"(?<![\w-])--[a-z]")
_FILES = itertools.count()

# -- values -----------------------------------------------------------------------------------------
weird_numbers = st.one_of(
    st.integers(min_value=-5, max_value=5000), st.integers(min_value=-(10**25), max_value=10**25),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "inf", "-inf", "1e20", "3.5", "4", "0x10", ""]),
)
hostile = st.one_of(st.none(), st.booleans(), st.binary(max_size=3), st.lists(st.integers(0, 3), max_size=2),
                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1), st.just(object()),
                    st.just(np.float64("nan")), st.just(np.int64(4)), st.just(1 + 1j))
counts = st.integers(min_value=1, max_value=64)
numbers = st.one_of(counts, counts, counts, weird_numbers, hostile)
texts = st.one_of(st.text(max_size=10), st.sampled_from(["", " ", "llama3.1-8b", "qwen2-0.5b", "mixtral-8x7b", "h100",
                                                          "a100-80gb", "jetson-orin", "l4", "FR", "us-east-1", "google",
                                                          "vllm", "hf", "fp16", "bf16", "int4", "awq", "server", "gpu",
                                                          "hgx-h100-8"]), hostile)
flags = st.one_of(st.booleans(), st.booleans(), st.sampled_from(["no", "yes", "true", "false", "", 0, 1, None, 0.0]),
                  st.just(np.bool_(False)))


def _is_flag(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _outcome(call: Callable[[], Any], naming_flags: tuple[str, ...] = ()) -> tuple[Any, llmco2.InvalidInputError | None]:
    """``(result, None)`` or ``(None, the InvalidInputError)``; any other exception fails the test.
    ``naming_flags``: messages known to name a flag still (in modules edited elsewhere)."""
    try:
        return call(), None
    except llmco2.InvalidInputError as exc:
        text = str(exc)
        assert text.strip() and "\n" not in text, repr(text)
        assert not FLAG.search(text) or any(known in text for known in naming_flags), text
        if currently_in_test_context():  # events are recorded in property-based tests only
            event(f"refused: {exc.field}")
        return None, exc


def _finite(value: Any, where: str = "") -> None:
    """Every number in ``value`` (nested dicts, lists, frames) is finite."""
    if isinstance(value, bool | np.bool_ | str) or value is None:
        return
    if isinstance(value, int | float | np.number):
        assert math.isfinite(float(value)), (where, value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]")
    elif isinstance(value, pd.DataFrame):
        numeric = value.select_dtypes(include="number")
        assert np.isfinite(numeric.to_numpy(dtype=float)).all(), (where, numeric.columns[~np.isfinite(numeric).all()].tolist())


# -- llmco2.predict ---------------------------------------------------------------------------------
PREDICT_ARGS = {"model": texts, "gpu": texts, "batch_size": numbers, "prompt_tokens": numbers,
                "generated_tokens": numbers, "gpus": numbers, "tp": numbers, "ep": numbers, "region": texts,
                "carbon_intensity": numbers, "pue": st.one_of(numbers, texts), "lifetime_years": numbers, "engine": texts,
                "dtype": texts, "quantisation": texts, "scope": texts, "platform": texts, "flash_attention": flags,
                "causal": flags, "ignore_context": flags, "approximate": flags, "gen_tokens": numbers,
                "timestamp": st.one_of(texts, st.just("2023-06-01T12:00:00Z")), "checkpoint": texts, "not_a_parameter": numbers}
PREDICT_BASE = {"model": "qwen2-0.5b", "gpu": "a100-80gb", "batch_size": 1, "prompt_tokens": 64, "generated_tokens": 8}
FLAG_NAMES = ("flash_attention", "causal", "ignore_context", "approximate")


UNKNOWN_EMBODIED = "embodied carbon unknown"  # the note of a GPU whose die area is not published


def _check_prediction(p: Any) -> None:
    assert isinstance(p, llmco2.Prediction), type(p)
    record = p.to_dict()
    _finite(record, "record")
    for key in ("prefill", "decode", "total", "operational"):
        assert isinstance(record[key], float) and record[key] >= 0, (key, record[key])
    if record["embodied"] is None:  # not a number but unknown, and the notes say so
        assert any(UNKNOWN_EMBODIED in n for n in record["notes"]), record["notes"]
    else:
        assert isinstance(record["embodied"], float) and record["embodied"] >= 0, record["embodied"]


def _check_frame(out: pd.DataFrame) -> None:
    """Finite numbers; an embodied carbon is missing (NaN) only where the row's notes say it is unknown."""
    unknown = out["embodied_g"].isna().to_numpy()
    assert all(UNKNOWN_EMBODIED in n for n in out["notes"][unknown]), out["notes"][unknown].tolist()
    _finite(out.drop(columns="embodied_g"), "frame")
    assert (out["embodied_g"][~unknown].to_numpy(dtype=float) >= 0).all()


def _some_of(strategies: dict[str, st.SearchStrategy[Any]], most: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    """Up to ``most`` of the arguments, each drawn from its strategy (the others keep their defaults)."""
    return st.lists(st.sampled_from(sorted(strategies)), max_size=most, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: strategies[k] for k in keys}))


@SETTINGS
@given(_some_of(PREDICT_ARGS))
def test_predict(args: dict[str, Any]) -> None:
    kwargs = {**PREDICT_BASE, **args}
    result, error = _outcome(lambda: llmco2.predict(**kwargs))
    if any(name in kwargs and not _is_flag(kwargs[name]) for name in FLAG_NAMES):
        assert error is not None, kwargs  # "no", 0 or None for a flag is refused, never read as true or false
    if error is None:
        for p in result if isinstance(result, list) else [result]:
            _check_prediction(p)


@SETTINGS
@given(st.sampled_from(FLAG_NAMES), st.sampled_from(["no", "false", "yes", "", 0, 1, None, "True"]))
def test_flags_given_as_text_or_numbers_are_refused(name: str, value: Any) -> None:
    _, error = _outcome(lambda: llmco2.predict(**PREDICT_BASE, **{name: value}))
    assert error is not None and error.field == name


# -- llmco2.predict_frame ---------------------------------------------------------------------------
COLUMNS = {"model": ["qwen2-0.5b", "llama3.1-8b", "mixtral-8x7b"], "gpu": ["a100-80gb", "h100", "jetson-orin", "l4"],
           "batch_size": [1, 4, 16], "prompt_tokens": [64, 512], "generated_tokens": [1, 8, 128]}
OPTIONAL_COLUMNS = {"num_gpus": [1, 2], "tensor_parallel": [1, 2], "dtype": ["fp16", "bf16", "int8"],
                    "flash_attention": [True, False], "engine": ["vllm", "hf"], "region": ["FR", "us-east-1", ""],
                    "quantisation": ["awq", "none"], "expert_parallel": [1, 2], "total_j": [1.5, 2.0], "note": ["a", "b"]}
cells = st.one_of(weird_numbers, st.text(max_size=6), st.none(), st.booleans(), st.just(np.float64("nan")), st.just(np.int64(4)))


@st.composite
def request_frames(draw: st.DrawFn) -> pd.DataFrame:
    """Mostly valid request tables: the required columns (one sometimes dropped), some optional
    ones, valid values with an occasional cell of a hostile value or type."""
    names = list(COLUMNS) + draw(st.lists(st.sampled_from(sorted(OPTIONAL_COLUMNS)), max_size=3, unique=True))
    if draw(st.integers(0, 9)) == 0:
        names.remove(draw(st.sampled_from(list(COLUMNS))))
    n = draw(st.integers(0, 4))
    choices = {**COLUMNS, **OPTIONAL_COLUMNS}
    data = {c: [draw(st.sampled_from(choices[c])) if draw(st.integers(0, 9)) else draw(cells) for _ in range(n)]
            for c in names}
    return pd.DataFrame(data, index=range(n))


@SETTINGS
@given(request_frames(), st.booleans(), _some_of({"region": texts, "pue": st.one_of(numbers, texts), "flash_attention": flags,
                                                  "engine": texts}, most=2))
def test_predict_frame(frame: pd.DataFrame, as_arrow: bool, options: dict[str, Any]) -> None:
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except ARROW_ERRORS:  # a column of mixed types: given as the DataFrame it is
        event("a column Arrow cannot convert")
        table = None
    given_frame: Any = table if as_arrow and table is not None else frame
    result, error = _outcome(lambda: llmco2.predict_frame(given_frame, **options))
    if "flash_attention" in options and not _is_flag(options["flash_attention"]):
        assert error is not None
    if error is None:
        assert isinstance(result, type(given_frame)), type(result)
        out = result.to_pandas() if isinstance(result, pa.Table) else result
        assert len(out) == len(frame)
        _check_frame(out)
        for column in ("prefill_j", "decode_j", "total_j", "latency_s", "operational_g", "total_g"):
            assert (out[column].to_numpy(dtype=float) >= 0).all(), column


@pytest.mark.parametrize("cell", ["x", b"x", 1 + 1j, object(), [8], 10**25, True])
def test_predict_frame_of_mixed_columns(cell: Any) -> None:
    """A column Arrow cannot type is read as the text of its cells: the refusal names the column and
    the line of the bad cell (line 3: the second row; a complex number makes the whole column complex)."""
    frame = pd.DataFrame({"model": ["qwen2-0.5b"] * 2, "gpu": ["h100"] * 2, "batch_size": [1, 2], "prompt_tokens": [64, 64],
                          "generated_tokens": [8, cell]})
    _, error = _outcome(lambda: llmco2.predict_frame(frame))
    assert error is not None and "generated_tokens" in str(error), str(error)
    assert ("line 2" if isinstance(cell, complex) else "line 3") in str(error), str(error)


@pytest.mark.parametrize("cell", ["8", 8.0, np.int64(8)])
def test_a_mixed_column_of_valid_cells_is_read_as_a_request_file_would_be(cell: Any) -> None:
    frame = pd.DataFrame({"model": ["qwen2-0.5b"] * 2, "gpu": ["h100"] * 2, "batch_size": [1, "1"], "prompt_tokens": [64, 64],
                          "generated_tokens": [8, cell]})
    result, error = _outcome(lambda: llmco2.predict_frame(frame))
    assert error is None and result["total_j"].iloc[0] == result["total_j"].iloc[1], result
    assert result["batch_size"].tolist() == [1, "1"]  # the input columns are returned as given


def test_an_arrow_column_of_lists_names_the_column() -> None:
    table = pa.table({"model": ["qwen2-0.5b"], "gpu": ["h100"], "batch_size": [[1]], "prompt_tokens": [64], "generated_tokens": [8]})
    _, error = _outcome(lambda: llmco2.predict_frame(table))
    assert error is not None and error.field == "batch_size", error


@SETTINGS
@given(st.one_of(hostile, texts, st.just(pd.Series([1, 2])), st.just(pd.DataFrame())))
def test_predict_frame_of_something_else(value: Any) -> None:
    result, error = _outcome(lambda: llmco2.predict_frame(value))
    if error is None:
        assert isinstance(result, pd.DataFrame) and len(result) == 0, type(result)


# -- llmco2.serve ------------------------------------------------------------------------------------
# The workload and engine limits below are numbers of any value (zero, negative, huge, fractional);
# values of other types, NaN and infinity are in SERVING_WRONG_TYPES, each refused naming its parameter.
small = st.one_of(st.integers(1, 24), st.integers(1, 24), st.integers(1, 24), st.integers(-3, 0), st.integers(10**6, 10**12))
WORKLOAD_ARGS = {"lengths": st.one_of(st.sampled_from(["fixed", "conv", "code"]), st.sampled_from(["fixed", "conv", "code"]), texts),
                 "n": small, "concurrency": small,
                 "rate": st.one_of(st.floats(0.01, 50.0), st.floats(0.01, 50.0), st.floats(-1.0, 50.0), st.sampled_from([0.0, 1e-9, 1e9])),
                 "prompt_tokens": st.one_of(st.integers(1, 512), st.integers(-3, 0), st.integers(10**5, 10**9)),
                 "output_tokens": st.one_of(st.integers(1, 64), st.integers(-3, 0), st.integers(10**5, 10**9)),
                 "seed": st.integers(0, 2**32)}
SERVE_ARGS = {"num_gpus": st.one_of(st.integers(1, 2), numbers), "tp": st.one_of(st.none(), st.integers(1, 2), numbers),
              "engine": texts, "dtype": texts, "max_batch": st.one_of(st.integers(-1, 300), st.integers(10**6, 10**12)),
              "max_batched_tokens": st.one_of(st.integers(-1, 8192), st.integers(10**6, 10**12)), "chunked_prefill": st.booleans(),
              "region": texts, "carbon_intensity": numbers, "pue": st.one_of(numbers, texts), "lifetime_years": numbers,
              "scope": st.one_of(st.sampled_from(["gpu", "server"]), st.text(max_size=4)), "platform": texts, "ep": numbers}
_WORKLOAD = {"lengths": "fixed", "n": 4, "rate": 2.0, "prompt_tokens": 64, "output_tokens": 8}


def _check_served(result: Any, workload: Any) -> None:
    assert isinstance(result, llmco2.ServingResult) and isinstance(result.requests, pd.DataFrame)
    rows = result.requests
    assert len(rows) == len(workload.prompt_tokens)
    one_token = (rows["output_tokens"] == 1).to_numpy() if "output_tokens" in rows else np.zeros(len(rows), bool)
    assert not rows["tpot_s"][~one_token].isna().any()  # TPOT is undefined (NaN) for a single output token only
    _finite(rows.drop(columns="tpot_s"), "requests")
    _finite(result.summary, "summary")
    assert result.summary["energy_j"] > 0


@SETTINGS
@given(_some_of(WORKLOAD_ARGS, most=2), st.sampled_from(["qwen2-0.5b", "qwen2-0.5b", "llama3.1-8b", "nope"]),
       st.sampled_from(["h100", "a100-80gb", "l4", "nope"]), _some_of(SERVE_ARGS, most=2))
def test_serve(workload_changes: dict[str, Any], model: str, gpu: str, args: dict[str, Any]) -> None:
    workload_args = {**_WORKLOAD, "n": 12, **workload_changes}
    if "concurrency" in workload_changes and "rate" not in workload_changes:
        workload_args["rate"] = None
    workload, error = _outcome(lambda: llmco2.make_workload(**workload_args))
    if error is not None:
        return
    result, error = _outcome(lambda: llmco2.serve(model, gpu, workload, **args))
    if error is None:
        _check_served(result, workload)


#: Values of another type, NaN, infinity or beyond any range, and the parameter each refusal names
#: (they raised TypeError, ValueError, OverflowError or KeyError, or, for chunked_prefill, were read
#: as a boolean). make_workload's ``n`` is named as compare's and the command line's ``serving_requests``.
SERVING_WRONG_TYPES = {
    "n='4'": ({"n": "4"}, {}, "serving_requests"), "n=4.5": ({"n": 4.5}, {}, "serving_requests"),
    "n=True": ({"n": True}, {}, "serving_requests"), "rate='4'": ({"rate": "4"}, {}, "rate"),
    "rate=''": ({"rate": ""}, {}, "rate"), "rate=[1]": ({"rate": [1]}, {}, "rate"), "rate=nan": ({"rate": math.nan}, {}, "rate"),
    "concurrency=nan": ({"rate": None, "concurrency": math.nan}, {}, "concurrency"),
    "concurrency=inf": ({"rate": None, "concurrency": math.inf}, {}, "concurrency"),
    "concurrency=10**30": ({"rate": None, "concurrency": 10**30}, {}, "concurrency"),
    "concurrency='4'": ({"rate": None, "concurrency": "4"}, {}, "concurrency"),
    "prompt_tokens=nan": ({"prompt_tokens": math.nan}, {}, "prompt_tokens"),
    "prompt_tokens=10**30": ({"prompt_tokens": 10**30}, {}, "prompt_tokens"),
    "prompt_tokens='64'": ({"prompt_tokens": "64"}, {}, "prompt_tokens"),
    "output_tokens=inf": ({"output_tokens": math.inf}, {}, "output_tokens"),
    "output_tokens=10**30": ({"output_tokens": 10**30}, {}, "output_tokens"),
    "lengths=['fixed']": ({"lengths": ["fixed"]}, {}, "lengths"),
    "seed='4'": ({"seed": "4"}, {}, "seed"), "seed=-1": ({"seed": -1}, {}, "seed"), "seed=0.5": ({"seed": 0.5}, {}, "seed"),
    "max_batch='4'": ({}, {"max_batch": "4"}, "max_batch"), "max_batch=None": ({}, {"max_batch": None}, "max_batch"),
    "max_batch=nan": ({}, {"max_batch": math.nan}, "max_batch"), "max_batch=True": ({}, {"max_batch": True}, "max_batch"),
    "max_batched_tokens='4'": ({}, {"max_batched_tokens": "4"}, "max_batched_tokens"),
    "max_batched_tokens=4.5": ({}, {"max_batched_tokens": 4.5}, "max_batched_tokens"),
    "chunked_prefill='no'": ({}, {"chunked_prefill": "no"}, "chunked_prefill"),
    "chunked_prefill=None": ({}, {"chunked_prefill": None}, "chunked_prefill"),
    "chunked_prefill=0": ({}, {"chunked_prefill": 0}, "chunked_prefill"),
    "scope=None": ({}, {"scope": None}, "scope"), "energy_scale=nan": ({}, {"energy_scale": math.nan}, "energy_scale"),
    "energy_scale='4'": ({}, {"energy_scale": "4"}, "energy_scale"), "energy_scale=0": ({}, {"energy_scale": 0}, "energy_scale"),
    "energy_scale=inf": ({}, {"energy_scale": math.inf}, "energy_scale"),
}


@pytest.mark.parametrize("name", sorted(SERVING_WRONG_TYPES))
def test_serve_refuses_values_of_another_type(name: str) -> None:
    workload_args, args, field = SERVING_WRONG_TYPES[name]

    def call() -> Any:
        workload = llmco2.make_workload(**{**_WORKLOAD, **workload_args})
        result = llmco2.serve("qwen2-0.5b", "h100", workload, **args)
        _check_served(result, workload)
        return result

    _, error = _outcome(call)
    assert error is not None and error.field == field, (error, error and error.field)


def test_serve_takes_whole_floats_and_numpy_numbers() -> None:
    """A whole float (``4.0``) or a NumPy number is a number: refused only where its value is."""
    workload = llmco2.make_workload("fixed", n=np.int64(4), rate=np.float64(2.0), prompt_tokens=64.0, output_tokens=np.int32(8),
                                    seed=np.uint8(3))
    assert workload.prompt_tokens.tolist() == [64] * 4 and workload.output_tokens.tolist() == [8] * 4
    result = llmco2.serve("qwen2-0.5b", "h100", workload, max_batch=np.int64(8), max_batched_tokens=512.0,
                          chunked_prefill=np.bool_(False), energy_scale=np.float32(1.5))
    _check_served(result, workload)
    assert result.assumptions["server"]["max_batched_tokens"] == 512 and result.assumptions["server"]["chunked_prefill"] is False
    closed = llmco2.make_workload("fixed", n=4, concurrency=2.0, prompt_tokens=64, output_tokens=8)
    assert closed.concurrency == 2 and isinstance(closed.concurrency, int)


# -- a request served under load (llmco2.api.server) ------------------------------------------------
SERVED_ARGS = {"prompt_tokens": st.one_of(st.integers(1, 512), numbers), "generated_tokens": st.one_of(st.integers(1, 16), numbers),
               "batch_size": st.one_of(st.integers(1, 3), numbers), "gpus": st.one_of(st.integers(1, 2), numbers),
               "tp": st.one_of(st.none(), st.integers(1, 2), numbers), "dp": st.one_of(st.integers(1, 2), numbers),
               "ep": st.one_of(st.none(), numbers)}
LOAD_ARGS = {"concurrency": st.one_of(st.integers(1, 8), numbers), "rate": st.one_of(st.floats(0.1, 20.0), numbers),
             "background": st.one_of(st.sampled_from(["conv", "code", "fixed"]), texts),
             "serving_requests": st.one_of(st.integers(1, 16), numbers), "max_batch": st.one_of(st.integers(1, 64), numbers),
             "max_batched_tokens": st.one_of(st.integers(1, 4096), numbers), "chunked_prefill": flags, "seed": numbers,
             "calibration": flags}


def _served(request_args: dict[str, Any], load_args: dict[str, Any]) -> Any:
    from llmco2.api.server import ServedRequest, ServerLoad, serve_request

    load = {"rate": 2.0, "serving_requests": 8, **load_args}
    if "concurrency" in load_args and "rate" not in load_args:
        load.pop("rate")
    return serve_request(ServedRequest("qwen2-0.5b", "h100", **{"prompt_tokens": 64, "generated_tokens": 8, **request_args}),
                         ServerLoad(**load))


@SETTINGS
@given(_some_of(SERVED_ARGS, most=2), _some_of(LOAD_ARGS, most=2))
def test_serve_request(request_args: dict[str, Any], load_args: dict[str, Any]) -> None:
    def short(name: str, value: Any) -> Any:  # every copy and background request is simulated: keep the run short
        return 64 if name in ("batch_size", "serving_requests") and type(value) is int and value > 64 else value

    request_args = {k: short(k, v) for k, v in request_args.items()}
    load_args = {k: short(k, v) for k, v in load_args.items()}
    result, error = _outcome(lambda: _served(request_args, load_args))
    if any(name in load_args and not _is_flag(load_args[name]) for name in ("chunked_prefill", "calibration")):
        assert error is not None
    if error is None:
        _finite(result, "served")
        assert result["energy_j"]["total"] > 0 and isinstance(result["batch_size"], int)


#: Values of another type, NaN, infinity or fractions given to ServedRequest and ServerLoad, and the
#: parameter each refusal names (they raised TypeError or were used as given).
SERVED_WRONG_TYPES = {
    "concurrency='4'": ({}, {"rate": None, "concurrency": "4"}, "concurrency"),
    "concurrency=nan": ({}, {"rate": None, "concurrency": math.nan}, "concurrency"),
    "concurrency=2.5": ({}, {"rate": None, "concurrency": 2.5}, "concurrency"),
    "concurrency=True": ({}, {"rate": None, "concurrency": True}, "concurrency"),
    "rate='4'": ({}, {"rate": "4"}, "rate"), "rate=inf": ({}, {"rate": math.inf}, "rate"), "rate=[1]": ({}, {"rate": [1]}, "rate"),
    "background=['conv']": ({}, {"background": ["conv"]}, "background"),
    "background=array": ({}, {"background": np.array(["conv", "code"])}, "background"),
    "serving_requests='8'": ({}, {"serving_requests": "8"}, "serving_requests"),
    "serving_requests=4.5": ({}, {"serving_requests": 4.5}, "serving_requests"),
    "serving_requests=10**9": ({}, {"serving_requests": 10**9}, "serving_requests"),
    "max_batch='4'": ({}, {"max_batch": "4"}, "max_batch"), "max_batch=None": ({}, {"max_batch": None}, "max_batch"),
    "max_batched_tokens=nan": ({}, {"max_batched_tokens": math.nan}, "max_batched_tokens"),
    "chunked_prefill='no'": ({}, {"chunked_prefill": "no"}, "chunked_prefill"),
    "chunked_prefill=0": ({}, {"chunked_prefill": 0}, "chunked_prefill"),
    "calibration='yes'": ({}, {"calibration": "yes"}, "calibration"), "calibration=None": ({}, {"calibration": None}, "calibration"),
    "seed='4'": ({}, {"seed": "4"}, "seed"), "seed=-1": ({}, {"seed": -1}, "seed"), "seed=0.5": ({}, {"seed": 0.5}, "seed"),
    "prompt_tokens='64'": ({"prompt_tokens": "64"}, {}, "prompt_tokens"),
    "prompt_tokens=nan": ({"prompt_tokens": math.nan}, {}, "prompt_tokens"),
    "prompt_tokens=10**30": ({"prompt_tokens": 10**30}, {}, "prompt_tokens"),
    "generated_tokens=inf": ({"generated_tokens": math.inf}, {}, "generated_tokens"),
    "generated_tokens=None": ({"generated_tokens": None}, {}, "generated_tokens"),
    "batch_size=1.5": ({"batch_size": 1.5}, {}, "batch_size"), "batch_size=True": ({"batch_size": True}, {}, "batch_size"),
    "gpus='2'": ({"gpus": "2"}, {}, "gpus"), "gpus=0": ({"gpus": 0}, {}, "gpus"),
    "tp='1'": ({"tp": "1"}, {}, "tp"), "tp=nan": ({"tp": math.nan}, {}, "tp"),
    "dp='1'": ({"dp": "1"}, {}, "dp"), "dp=0": ({"dp": 0}, {}, "dp"),
    "ep=1.5": ({"ep": 1.5}, {}, "ep"), "ep=[1]": ({"ep": [1]}, {}, "ep"),
}


@pytest.mark.parametrize("name", sorted(SERVED_WRONG_TYPES))
def test_serve_request_refuses_values_of_another_type(name: str) -> None:
    request_args, load_args, field = SERVED_WRONG_TYPES[name]
    _, error = _outcome(lambda: _served(request_args, load_args))
    assert error is not None and error.field == field, (error, error and error.field)


def test_serve_request_takes_whole_floats_and_numpy_numbers() -> None:
    """Whole floats and NumPy numbers are taken, as ints where the parameter counts something."""
    from llmco2.api.server import ServedRequest, ServerLoad

    request = ServedRequest("qwen2-0.5b", "h100", prompt_tokens=64.0, generated_tokens=np.int64(8), batch_size=np.int32(2),
                            gpus=2.0, tp=np.int64(1), dp=np.int64(2), ep=None)
    load = ServerLoad(concurrency=np.int64(4), serving_requests=8.0, max_batch=np.int64(16), max_batched_tokens=512.0,
                      chunked_prefill=np.bool_(False), seed=np.uint8(3), calibration=np.bool_(True))
    for value in (request.prompt_tokens, request.generated_tokens, request.batch_size, request.gpus, request.tp, request.dp,
                  load.concurrency, load.serving_requests, load.max_batch, load.max_batched_tokens, load.seed):
        assert type(value) is int, (value, type(value))
    assert load.chunked_prefill is False and load.calibration is True
    assert ServerLoad(rate=np.float32(2.0)).rate == 2.0
    record = _served({"prompt_tokens": 64.0, "batch_size": np.int64(2)}, {"rate": None, "concurrency": 4.0, "seed": np.int64(1)})
    assert record["serving"]["load"]["concurrency"] == 4 and isinstance(record["serving"]["load"]["concurrency"], int)
    assert record["batch_size"] == 2 and isinstance(record["batch_size"], int)


# -- llmco2.compare ----------------------------------------------------------------------------------
# As with serve: numbers of any value here; values of another type are in COMPARE_WRONG_TYPES.
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6), st.none())
COMPARE_ARGS = {"rate": st.one_of(st.floats(0.01, 20.0), st.floats(0.01, 20.0), st.floats(allow_nan=True, allow_infinity=True),
                                  st.integers(-5, 100)),
                "concurrency": st.integers(-3, 24), "background": st.one_of(st.sampled_from(["conv", "code", "fixed"]), texts),
                "prompt_tokens": st.one_of(st.integers(1, 512), numbers), "generated_tokens": st.one_of(st.integers(1, 64), numbers),
                "slo_ttft_s": floats, "slo_tpot_s": floats, "slo_percentile": st.one_of(st.floats(allow_nan=True), st.integers(-5, 200)),
                "max_gpus": st.integers(-1, 2), "serving_requests": st.one_of(st.integers(-3, 24), st.integers(10**7, 10**12)),
                "seed": st.integers(0, 2**31), "expert_parallel": texts, "region": texts, "flash_attention": flags}


@SETTINGS
@given(st.sampled_from(["qwen2-0.5b", "qwen2-0.5b", "mixtral-8x7b", "nope"]),
       st.one_of(st.sampled_from([["h100"], ["h100"], "h100", ("l4",), ["h100-nope"], [], ""]), st.text(max_size=6)),
       _some_of(COMPARE_ARGS))
def test_compare(model: str, gpus: Any, changes: dict[str, Any]) -> None:
    args = {"rate": 2.0, "serving_requests": 12, "max_gpus": 1, **changes}
    if "concurrency" in changes and "rate" not in changes:
        args.pop("rate")
    result, error = _outcome(lambda: llmco2.compare(model, gpus, **args))
    if "flash_attention" in args and not _is_flag(args["flash_attention"]):
        assert error is not None
    if error is None:
        assert isinstance(result, pd.DataFrame) and len(result) >= 1
        assert result["rank"].dtype.kind == "i" and result["stable"].dtype == bool
        _finite(result, "compare")


#: Values of another type (and NaN) given to llmco2.compare, and the parameter each refusal names
#: (they raised TypeError, ValueError, OverflowError or AttributeError).
COMPARE_WRONG_TYPES = {
    "gpus=4.5": (4.5, {}, "gpus"), "gpus=[1]": ([1], {}, "gpus"), "gpus=['h100', None]": (["h100", None], {}, "gpus"),
    "gpus=b'h100'": (b"h100", {}, "gpus"), "rate='4'": (["h100"], {"rate": "4"}, "rate"),
    "rate=nan": (["h100"], {"rate": math.nan}, "rate"),
    "concurrency='4'": (["h100"], {"rate": None, "concurrency": "4"}, "concurrency"),
    "concurrency=nan": (["h100"], {"rate": None, "concurrency": math.nan}, "concurrency"),
    "slo_ttft_s='4'": (["h100"], {"slo_ttft_s": "4"}, "slo_ttft_s"), "slo_tpot_s=nan": (["h100"], {"slo_tpot_s": math.nan}, "slo_tpot_s"),
    "slo_percentile='4'": (["h100"], {"slo_percentile": "4"}, "slo_percentile"),
    "slo_percentile=nan": (["h100"], {"slo_percentile": math.nan}, "slo_percentile"),
    "max_gpus='4'": (["h100"], {"max_gpus": "4"}, "max_gpus"), "max_gpus=None": (["h100"], {"max_gpus": None}, "max_gpus"),
    "max_gpus=1.5": (["h100"], {"max_gpus": 1.5}, "max_gpus"),
    "serving_requests='4'": (["h100"], {"serving_requests": "4"}, "serving_requests"),
    "serving_requests=4.5": (["h100"], {"serving_requests": 4.5}, "serving_requests"),
    "seed=-1": (["h100"], {"seed": -1}, "seed"), "seed='4'": (["h100"], {"seed": "4"}, "seed"),
    "prompt_tokens='64'": (["h100"], {"background": "fixed", "prompt_tokens": "64", "generated_tokens": 8}, "prompt_tokens"),
    "generated_tokens=inf": (["h100"], {"background": "fixed", "prompt_tokens": 64, "generated_tokens": math.inf},
                             "generated_tokens"),
}


@pytest.mark.parametrize("name", sorted(COMPARE_WRONG_TYPES))
def test_compare_refuses_values_of_another_type(name: str) -> None:
    gpus, args, field = COMPARE_WRONG_TYPES[name]
    _, error = _outcome(lambda: llmco2.compare("qwen2-0.5b", gpus, **{"rate": 2.0, "serving_requests": 8, "max_gpus": 1, **args}))
    assert error is not None and error.field == field, (error, error and error.field)


def test_compare_takes_gpus_as_a_tuple_and_whole_floats() -> None:
    table = llmco2.compare("qwen2-0.5b", ("h100",), rate=np.float64(2.0), serving_requests=8.0, max_gpus=np.int64(1),
                           slo_percentile=np.int64(90), seed=np.int64(1))
    assert list(table["gpu"]) == ["h100-sxm"] and table.attrs["left_out"] == []


# -- a config.json given as the model ----------------------------------------------------------------
CONFIG_KEYS = ["model_type", "architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "vocab_size", "head_dim", "max_position_embeddings", "num_local_experts",
               "num_experts_per_tok", "sliding_window", "torch_dtype", "tie_word_embeddings", "rope_scaling",
               "layer_types", "quantization_config", "kv_lora_rank", "n_routed_experts", "moe_intermediate_size"]
json_values = st.recursive(
    st.one_of(st.integers(1, 64), st.integers(1, 64), st.integers(-3, 10**6), st.integers(-(10**30), 10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6), st.booleans(), st.none(),
              st.sampled_from(["llama", "mixtral", "qwen2", "deepseek_v2", "gemma2", "bfloat16", "full_attention"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=6)


def _write(folder: str, name: str, body: str | bytes) -> Path:
    path = Path(folder) / f"{next(_FILES)}-{name}"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return path


@SETTINGS
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=6), st.sampled_from(["llama", "mixtral", "qwen2", ""]),
       st.booleans(), st.sampled_from(["object", "object", "object", "list", "number", "not json", "bytes"]))
def test_config_json_as_the_model(changes: dict[str, Any], model_type: str, approximate: bool, shape: str) -> None:
    cfg = {"model_type": model_type, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, **changes}
    body: str | bytes = {"object": json.dumps(cfg), "list": json.dumps([cfg]), "number": "3", "not json": "{model_type: llama",
                         "bytes": b"\xff\xfe{}"}[shape]
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "config.json", body)
        result, error = _outcome(lambda: llmco2.predict(str(path), "h100", prompt_tokens=16, generated_tokens=4,
                                                        approximate=approximate))
    if error is None:
        _check_prediction(result)


# -- a checkpoint whose metadata was perturbed and re-hashed -----------------------------------------
SHIPPED = read_checkpoint(default_checkpoint_path())


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into the metadata: objects' keys and lists' items (each number of a list too)."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*path, i)))
    return out


META_PATHS = _paths(SHIPPED[1])[1:]


def _perturbed(meta: dict[str, Any], path: tuple[Any, ...], action: str, value: Any) -> dict[str, Any]:
    meta = copy.deepcopy(meta)
    parent = meta
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "scale" and isinstance(parent[last], int | float) and not isinstance(parent[last], bool):
        parent[last] = parent[last] * value if isinstance(value, int | float) and not isinstance(value, bool) else value
    else:
        parent[last] = value
    return meta


@settings(SETTINGS, max_examples=150)
@given(st.sampled_from(META_PATHS), st.sampled_from(["replace", "replace", "scale", "delete"]),
       st.one_of(json_values, st.sampled_from([0, -1, 1e300, -1e-300, 1e-12, 10**20, [], {}, "", [0.0]])), st.booleans())
def test_checkpoint_with_perturbed_metadata(path: tuple[Any, ...], action: str, value: Any, as_frame: bool) -> None:
    tensors, meta = SHIPPED
    meta = _perturbed(meta, path, action, value)
    event(f"perturbed: {path[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_checkpoint(Path(tmp) / f"{next(_FILES)}-edited.safetensors", tensors, meta)
        if as_frame:
            frame = pd.DataFrame({"model": ["qwen2-0.5b", "llama3.1-8b"], "gpu": ["h100", "jetson-orin"], "batch_size": [1, 8],
                                  "prompt_tokens": [64, 512], "generated_tokens": [8, 128]})
            result, error = _outcome(lambda: llmco2.predict_frame(frame, checkpoint=str(checkpoint)))
            if error is None:
                _check_frame(result)
        else:
            result, error = _outcome(lambda: llmco2.predict("qwen2-0.5b", "h100", prompt_tokens=64, generated_tokens=8,
                                                            checkpoint=str(checkpoint)))
            if error is None:
                _check_prediction(result)
    if error is not None:
        assert error.field == "checkpoint", (str(error), error.field)


def _load_edited(path: tuple[Any, ...], value: Any) -> llmco2.InvalidInputError | None:
    """The refusal of predicting with the shipped checkpoint whose metadata entry ``path`` is ``value``."""
    tensors, meta = SHIPPED
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_checkpoint(Path(tmp) / "edited.safetensors", tensors, _perturbed(meta, path, "replace", value))
        result, error = _outcome(lambda: llmco2.predict("qwen2-0.5b", "h100", prompt_tokens=64, generated_tokens=8,
                                                        checkpoint=str(checkpoint)))
    if error is None:
        _check_prediction(result)
    return error


@pytest.mark.parametrize("path", [("head", "physics", "step_ms", "vllm"), ("head", "physics", "launch_us", "hf"),
                                  ("head", "physics", "sequence_us", "vllm"), ("head", "physics", "collective_us"),
                                  ("head", "physics", "efficiency", "h100-sxm", 0), ("head", "physics", "activity", 1)])
@pytest.mark.parametrize("value", [[0.0], "2", None, math.nan, -1.0, 1e300])
def test_checkpoint_with_an_engine_constant_not_a_number_in_range(path: tuple[Any, ...], value: Any) -> None:
    """A list, text, NaN, a negative or a huge number for a constant of the physics prior is refused on
    loading, naming the entry (it loaded, then an IndexError or TypeError came when predicting)."""
    error = _load_edited(path, value)
    assert error is not None and error.field == "checkpoint", error
    assert ".".join(map(str, path[:3])) in str(error), str(error)


@pytest.mark.parametrize(("path", "value"), [(("head", "step", "params", "kernel_gap_s"), 1e300),
                                             (("head", "step", "params", "kernel_gap_s"), 1e30),
                                             (("head", "step", "params", "eta_compute"), 0.0),
                                             (("head", "step", "params", "power_base"), -0.5),
                                             (("head", "step", "params", "op_node_exp"), 1e3),
                                             (("head", "step", "params", "engines", "vllm", "step_s"), 10.0),
                                             (("head", "step", "params", "engines", "hf", "launch_s"), -1e-6),
                                             (("head", "step", "params", "engines", "vllm", "serving_worker_s"), math.inf)])
def test_checkpoint_with_a_step_constant_out_of_range(path: tuple[Any, ...], value: Any) -> None:
    """The step prior's constants far outside the fit's bounds are refused on loading, naming the
    constant (kernel_gap_s = 1e300 loaded, and predicted energies of 1e305 J and infinite carbon)."""
    error = _load_edited(path, value)
    assert error is not None and error.field == "checkpoint", error
    assert path[-1] in str(error), str(error)
