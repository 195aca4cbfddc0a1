"""The Python API (convention 10 (docs/reference/conventions.md)): ``llmco2.predict`` equals ``llmco2 predict --json``,
``llmco2.predict_frame`` equals ``predict --requests``, bad input raises the command's message, and
``import llmco2`` stays cheap."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import llmco2
from llmco2.cli.flags import as_command_line
from llmco2.errors import InvalidInputError
from llmco2.specs import get_gpu, get_model
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
ARGS = {"prompt_tokens": 700, "generated_tokens": 90, "batch_size": 2}
CLI = ["--batch-size", "2", "--prompt-tokens", "700", "--gen-tokens", "90"]


def assert_close(a: Any, b: Any, rel: float = 1e-9) -> None:
    """Equal structures, numbers to ``rel``."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_close(a[k], b[k], rel)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_close(x, y, rel)
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert math.isclose(a, b, rel_tol=rel), (a, b)
    else:
        assert a == b


def cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run_cli(["predict", *args, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("api", "cli"), [
    ({"region": "usa"}, ["--region", "usa"]),
    ({"carbon_intensity": 250.0, "pue": 1.2, "gpus": 2, "engine": "hf"},
     ["--carbon-intensity", "250", "--pue", "1.2", "--gpus", "2", "--engine", "hf"]),
    ({"pue": "google", "lifetime_years": 3.0, "dtype": "bf16"}, ["--pue", "google", "--lifetime-years", "3", "--dtype", "bf16"]),
])
def test_predict_equals_cli_json(api: dict[str, Any], cli: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    p = llmco2.predict("llama3.1-8b", "h100", **ARGS, **api)
    expected = cli_json(["--model", "llama3.1-8b", "--gpu", "h100", *CLI, *cli], capsys)
    assert_close(p.to_dict(), expected)
    assert p.energy_j == p.to_dict()["energy_j"] and p.carbon_g["total"] == pytest.approx(expected["carbon_g"]["total"], rel=1e-9)
    assert p.latency_s["total"] > 0 and p.interval["total"][0] <= p.energy_j["total"] <= p.interval["total"][1]
    assert list(p.notes) == expected["notes"]
    with pytest.raises(AttributeError):
        p.energy_j = {}  # type: ignore[misc]


def test_objects_as_model_and_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    by_name = llmco2.predict("qwen2-7b", "a100-80gb", **ARGS).to_dict()
    by_object = llmco2.predict(get_model("qwen2-7b"), get_gpu("a100-80gb"), **ARGS).to_dict()
    assert_close(by_object, by_name)


def test_hourly_intensity_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame = pd.DataFrame({"timestamp": ["2024-03-01T00:00:00Z", "2024-03-01T01:00:00Z"], "g_co2eq_per_kwh": [100.0, 400.0]})
    path = tmp_path / "hours.csv"
    frame.to_csv(path, index=False)
    early = llmco2.predict("llama3.1-8b", "h100", **ARGS, intensity=frame, timestamp="2024-03-01T00:30:00Z")
    late = llmco2.predict("llama3.1-8b", "h100", **ARGS, intensity=str(path), timestamp="2024-03-01T01:30:00Z")
    assert late.carbon_g["operational"] / early.carbon_g["operational"] == pytest.approx(4.0, rel=1e-9)
    expected = cli_json(["--model", "llama3.1-8b", "--gpu", "h100", *CLI, "--intensity-file", str(path),
                         "--timestamp", "2024-03-01T01:30:00Z"], capsys)
    assert_close(late.to_dict(), expected)


@pytest.mark.parametrize(("api", "cli"), [
    ({"model": "llama3.1-8b", "gpu": "h1000"}, ["--model", "llama3.1-8b", "--gpu", "h1000"]),
    ({"model": "llama3.1-8b", "gpu": "h100", "generated_tokens": -1}, ["--model", "llama3.1-8b", "--gpu", "h100", "--gen-tokens", "-1"]),
    ({"model": "llama3.1-8b", "gpu": "h100", "gpus": 3, "tp": 2}, ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "3", "--tp", "2"]),
    ({"model": "llama3.1-8b", "gpu": "h100", "pue": 0.5}, ["--model", "llama3.1-8b", "--gpu", "h100", "--pue", "0.5"]),
    ({"model": "llama3.1-8b", "gpu": "h100", "region": "atlantis"}, ["--model", "llama3.1-8b", "--gpu", "h100", "--region", "atlantis"]),
])
def test_bad_input_raises_the_cli_message(api: dict[str, Any], cli: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    kwargs = {**ARGS, **api}
    with pytest.raises(InvalidInputError) as caught:
        llmco2.predict(kwargs.pop("model"), kwargs.pop("gpu"), **kwargs)
    base = dict(zip(CLI[::2], CLI[1::2], strict=True))
    base.update(dict(zip(cli[::2], cli[1::2], strict=True)))
    code, _, err = run_cli(["predict", *[x for kv in base.items() for x in kv]], capsys)
    assert code == 2
    assert err.strip() == f"llmco2: error: {as_command_line(caught.value)}"
    assert isinstance(caught.value, llmco2.InvalidInputError)
    assert not (caught.value.field or "").startswith("--")  # the API names parameters, not flags


def test_api_errors_name_parameters_and_the_command_line_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidInputError) as caught:
        llmco2.predict("llama3.1-8b", "h100", **ARGS, timestamp="2024-03-01T00:00:00Z")
    assert caught.value.field == "timestamp" and str(caught.value).startswith("timestamp: ")
    code, _, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", *CLI, "--timestamp", "2024-03-01T00:00:00Z"],
                           capsys)
    assert code == 2 and err.startswith("llmco2: error: --timestamp: ")


def test_gen_tokens_of_convention_10_is_generated_tokens() -> None:
    new = llmco2.predict("llama3.1-8b", "h100", **ARGS).to_dict()
    old_args = {**ARGS, "gen_tokens": ARGS["generated_tokens"]}
    del old_args["generated_tokens"]
    assert llmco2.predict("llama3.1-8b", "h100", **old_args).to_dict() == new
    with pytest.raises(InvalidInputError, match="give generated_tokens once"):
        llmco2.predict("llama3.1-8b", "h100", **ARGS, gen_tokens=ARGS["generated_tokens"] + 1)
    with pytest.raises(InvalidInputError, match="unknown option 'regoin'"):
        llmco2.predict("llama3.1-8b", "h100", **ARGS, regoin="FR")


def test_records_and_keywords_are_the_same_options() -> None:
    from llmco2.api import Assumptions, RequestOptions

    by_record = llmco2.predict("llama3.1-8b", "h100", **ARGS, options=RequestOptions(engine="hf"),
                               assumptions=Assumptions(region="FR", pue=1.2)).to_dict()
    by_name = llmco2.predict("llama3.1-8b", "h100", **ARGS, engine="hf", region="FR", pue="1.2").to_dict()
    assert by_record == by_name and by_record["engine"] == "hf"


def test_prediction_as_a_frame_matches_predict_frame() -> None:
    p = llmco2.predict("llama3.1-8b", "h100", **ARGS, region="fra")
    row = p.to_frame()
    frame = llmco2.predict_frame(pd.DataFrame([{"model": "llama3.1-8b", "gpu": "h100", "batch_size": 2, "prompt_tokens": 700,
                                                "generated_tokens": 90}]), region="fra")
    for column in ("prefill_j", "decode_j", "total_j", "total_j_low", "latency_s", "operational_g", "total_g"):
        assert row[column][0] == pytest.approx(frame[column][0], rel=1e-9), column
    for column in ("grid_region", "intensity_g_per_kwh", "pue", "notes"):  # what the row assumed, as predict_frame says it
        assert row[column][0] == frame[column][0], column
    assert (row["grid_region"][0], row["intensity_g_per_kwh"][0]) == ("fra", 55.3)
    assert "<table" in p._repr_html_()


def test_prediction_frame_notes_say_what_was_extrapolated() -> None:
    p = llmco2.predict("llama3.1-8b", "mi300x", **ARGS, carbon_intensity=300)
    frame = llmco2.predict_frame(pd.DataFrame([{"model": "llama3.1-8b", "gpu": "mi300x", "batch_size": 2, "prompt_tokens": 700,
                                                "generated_tokens": 90}]), carbon_intensity=300)
    row = p.to_frame()
    assert row["notes"][0] == "; ".join(p.notes) and "unseen GPU mi300x" in row["notes"][0]
    assert row["notes"][0] == frame["notes"][0]
    assert row["intensity_g_per_kwh"][0] == 300.0 == frame["intensity_g_per_kwh"][0]


REQUESTS = pd.DataFrame({
    "model": ["llama3.1-8b", "qwen2-7b", "llama3.1-70b", "llama3.1-8b"],
    "gpu": ["h100", "a100-80gb", "h100", "t4"],
    "batch_size": [1, 4, 2, 1],
    "prompt_tokens": [512, 128, 2048, 64],
    "generated_tokens": [64, 256, 32, 16],
    "num_gpus": [1, 2, 4, 1],
    "engine": ["vllm", "hf", "vllm", "vllm"],
    "note": ["a", "b, with comma", "c", "d"],
})


def test_predict_frame_equals_predict_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "requests.csv"
    REQUESTS.to_csv(src, index=False)
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv"), "--region", "fra"], capsys)
    assert code == 0, err
    expected = pd.read_csv(tmp_path / "out.csv")
    expected["notes"] = expected["notes"].fillna("")  # pandas reads an empty CSV cell as NaN; the frame has ""
    got = llmco2.predict_frame(REQUESTS, region="fra")
    assert isinstance(got, pd.DataFrame) and list(got.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-9)
    table = llmco2.predict_frame(pa.Table.from_pandas(REQUESTS), region="fra")
    assert isinstance(table, pa.Table)
    pd.testing.assert_frame_equal(table.to_pandas(), expected, check_dtype=False, rtol=1e-9)


def test_predict_frame_hourly_and_errors(tmp_path: Path) -> None:
    frame = REQUESTS.iloc[[0, 0]].reset_index(drop=True)
    frame["timestamp"] = pd.to_datetime(["2024-03-01T00:10:00Z", "2024-03-01T01:10:00Z"])
    hours = pd.DataFrame({"timestamp": ["2024-03-01T00:00:00Z", "2024-03-01T01:00:00Z"], "g_co2eq_per_kwh": [100, 400]})
    out = llmco2.predict_frame(frame, intensity=hours)
    assert out["operational_g"][1] / out["operational_g"][0] == pytest.approx(4.0, rel=1e-9)
    with pytest.raises(InvalidInputError, match=r"frame, line 3: gpu: .*h1000"):
        llmco2.predict_frame(REQUESTS.replace({"gpu": {"a100-80gb": "h1000"}}))
    with pytest.raises(InvalidInputError, match="1 request falls outside the hours"):
        llmco2.predict_frame(frame.assign(timestamp=["2024-03-01T00:10:00Z", "2024-03-02T00:00:00Z"]), intensity=hours)
    with pytest.raises(InvalidInputError, match="missing columns generated_tokens"):
        llmco2.predict_frame(REQUESTS.drop(columns=["generated_tokens"]))


def test_import_is_cheap() -> None:
    code = ("import sys, time; t = time.perf_counter(); import llmco2; dt = time.perf_counter() - t; "
            "print(dt, 'torch' in sys.modules, 'pandas' in sys.modules, 'llmco2.api' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    seconds, torch, pandas, api = out.split()
    assert float(seconds) < 0.3 and torch == "False" and pandas == "False" and api == "False"
    assert {"predict", "predict_frame", "serve", "Prediction"} <= set(dir(llmco2))
    with pytest.raises(AttributeError):
        llmco2.no_such_name  # noqa: B018


def test_serve_is_the_serving_api() -> None:
    from llmco2.serving.api import serve

    workload = llmco2.make_workload("fixed", n=20, concurrency=4, prompt_tokens=200, output_tokens=50)
    result = llmco2.serve("llama3.1-8b", "h100", workload)
    assert llmco2.serve is serve and isinstance(result, llmco2.ServingResult)
    assert result.summary["j_per_output_token"] > 0


def test_docs_python_examples_cover_the_public_api() -> None:
    """The README's and the docs' Python examples (run and checked by tests/test_docs_examples.py) use the main API."""
    from tests.docs_examples import doc_pages, parse_blocks

    blocks = [block for page in doc_pages() for block in parse_blocks(page) if block.lang == "python" and block.runnable]
    readme = [block for block in blocks if block.path.name == "README.md"]
    assert readme and all(">>> " in block.text for block in blocks)
    code = "\n".join(block.text for block in blocks)
    for name in ("predict", "predict_frame", "serve", "make_workload", "InvalidInputError"):
        assert f"llmco2.{name}" in code, name


def test_the_api_docstring_examples_run() -> None:
    import doctest

    import llmco2.api.options
    import llmco2.api.server
    import llmco2.api.single

    for module in (llmco2.api.options, llmco2.api.single, llmco2.api.server):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_predict_over_lists_equals_one_call_per_request() -> None:
    many = llmco2.predict(["llama3.1-8b", "qwen2-7b"], "h100", prompt_tokens=300, generated_tokens=[40, 80], region="fra")
    one = [llmco2.predict(m, "h100", prompt_tokens=300, generated_tokens=g, region="fra") for m, g in (("llama3.1-8b", 40),
                                                                                                       ("qwen2-7b", 80))]
    assert [p.to_dict() for p in many] == [p.to_dict() for p in one]
    with pytest.raises(InvalidInputError, match="of one length"):
        llmco2.predict("llama3.1-8b", "h100", prompt_tokens=[1, 2, 3], generated_tokens=[1, 2])
