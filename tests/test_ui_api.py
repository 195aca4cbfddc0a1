"""The calculator page's server, without a browser (FastAPI's TestClient): the page and its files
(nothing fetched from elsewhere), the pickers' catalog, ``/api/compare`` and ``/api/predict``
answering what ``llmco2.compare`` and ``llmco2.predict`` return, an uploaded config.json as the
model, bad input refused with HTTP 400 and the message ``llmco2 compare`` prints, and
``llmco2 ui`` itself (serving, a busy port, the missing extra named in one line)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the ui extra is not installed (pip install 'llmco2[ui]')")
pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx (pip install httpx)")

from fastapi.testclient import TestClient  # noqa: E402

import llmco2  # noqa: E402
from llmco2.cli.ui import build_app  # noqa: E402
from llmco2.ui.app import create_app  # noqa: E402
from llmco2.ui.form import UI_SERVING_REQUESTS, read_compare_form  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"model": "llama3.1-8b", "gpus": "h100", "concurrency": "4", "max_gpus": "1", "serving_requests": "30"}
#: A small Llama config.json (TinyLlama's shape).
CONFIG = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
          "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "hidden_act": "silu",
          "max_position_embeddings": 2048, "tie_word_embeddings": False, "_name_or_path": "uploaded-llama"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(build_app())


def test_the_page_and_its_files_are_served_and_fetch_nothing_from_elsewhere(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<script src="/static/app.js"' in page.text and 'href="/static/style.css"' in page.text
    for name in ("app.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200
    static = (ROOT / "llmco2" / "ui" / "static").glob("*")
    addresses = {a for f in static for a in re.findall(r"https?://[^\s\"')]+", f.read_text())}
    assert addresses <= {"http://www.w3.org/2000/svg"}, addresses


def test_the_catalog_lists_the_pickers_choices(client: TestClient) -> None:
    c = client.get("/api/catalog").json()
    assert "llama3.1-8b" in {m["id"] for m in c["models"]}
    gpus = {g["id"]: g for g in c["gpus"]}
    assert gpus["h100-sxm"]["datacentre"] and not gpus["rtx-4090"]["datacentre"]
    assert {"world", "fra"} <= {r["id"] for r in c["regions"]}
    assert c["backgrounds"] == ["conv", "code", "fixed"] and "vllm" in c["engines"] and "bf16" in c["dtypes"]
    assert c["defaults"]["serving_requests"] == UI_SERVING_REQUESTS and c["defaults"]["region"] == "world"


def test_compare_answers_llmco2_compares_table(client: TestClient) -> None:
    answer = client.post("/api/compare", data={**SMALL, "region": "fra", "slo_tpot_s": "0.05"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = llmco2.compare("llama3.1-8b", gpus="h100", concurrency=4, max_gpus=1, serving_requests=30, region="fra",
                              slo_tpot_s=0.05)
    assert body["verdict"] == expected.attrs["verdict"] and body["left_out"] == expected.attrs["left_out"]
    assert body["model"] == "llama3.1-8b" and body["columns"] == {"ttft": "ttft_p90_s", "tpot": "tpot_p90_s"}
    assert body["assumptions"]["grid"]["region"] == "fra"
    assert [r["label"] for r in body["options"]] == expected["label"].tolist()
    for got, want in zip(body["options"], expected.to_dict(orient="records"), strict=True):
        for column in ("g_per_output_token", "g_per_output_token_low", "j_per_output_token", "power_w", "tpot_p90_s"):
            assert got[column] == pytest.approx(want[column], rel=1e-12)
        assert got["meets_slo"] == want["meets_slo"] and got["extrapolated"] == want["extrapolated"]


def test_an_empty_field_is_the_default_and_serving_requests_is_small() -> None:
    kwargs = read_compare_form({"model": "llama3.1-8b", "rate": "2", "region": "", "slo_tpot_s": " "})
    assert kwargs == {"model": "llama3.1-8b", "rate": 2.0, "serving_requests": UI_SERVING_REQUESTS}


#: Form fields -> the command line's flags for the same bad input, and the flag the error names.
BAD = [
    ({"rate": "-1"}, ["--rate", "-1"], "--rate"),
    ({"concurrency": "0"}, ["--concurrency", "0"], "--concurrency"),
    ({"concurrency": "4", "gpus": "h100,nosuch"}, ["--concurrency", "4", "--gpus", "h100,nosuch"], "--gpus"),
    ({"concurrency": "4", "region": "nowhere"}, ["--concurrency", "4", "--region", "nowhere"], "--region"),
    ({"concurrency": "4", "pue": "0.5"}, ["--concurrency", "4", "--pue", "0.5"], "--pue"),
    ({"concurrency": "4", "slo_percentile": "100"}, ["--concurrency", "4", "--slo-percentile", "100"], "--slo-percentile"),
    ({"concurrency": "4", "max_gpus": "0"}, ["--concurrency", "4", "--max-gpus", "0"], "--max-gpus"),
    ({"concurrency": "4", "serving_requests": "0"}, ["--concurrency", "4", "--serving-requests", "0"], "--serving-requests"),
    ({"concurrency": "4", "model": "nosuch-model"}, ["--concurrency", "4", "--model", "nosuch-model"], "--model"),
    ({"concurrency": "4", "prompt_tokens": "100"}, ["--concurrency", "4", "--prompt-tokens", "100"], "--background"),
    ({"concurrency": "4", "dtype": "fp5"}, ["--concurrency", "4", "--dtype", "fp5"], "--dtype"),
]


@pytest.mark.parametrize(("fields", "flags", "field"), BAD, ids=[" ".join(f) for _, f, _ in BAD])
def test_bad_input_is_refused_with_the_command_lines_message(client: TestClient, capsys: pytest.CaptureFixture[str],
                                                             fields: dict[str, str], flags: list[str], field: str) -> None:
    answer = client.post("/api/compare", data={"model": "llama3.1-8b", "gpus": "h100", **fields})
    code, _, err = run_cli(["compare", "--model", "llama3.1-8b", "--gpus", "h100", *flags], capsys)
    assert code == 2 and answer.status_code == 400
    assert answer.json()["error"] == err.strip().removeprefix("llmco2: error: ")
    assert answer.json()["field"] == field


def test_text_where_a_number_belongs_and_a_missing_model_are_refused(client: TestClient) -> None:
    answer = client.post("/api/compare", data={"model": "llama3.1-8b", "rate": "fast"})
    assert answer.status_code == 400 and answer.json() == {"error": "--rate: invalid float value: 'fast'", "field": "--rate",
                                                          "parameter": "rate"}
    assert client.post("/api/compare", data={"rate": "1"}).json()["field"] == "--model"
    assert client.post("/api/compare", data={"model": "llama3.1-8b", "rate": "nan"}).json()["error"] == \
        "--rate: must be a finite number, got nan"
    assert client.post("/api/compare", data={"model": "llama3.1-8b", "rate": "1", "colour": "red"}).status_code == 400


def test_without_the_command_lines_wording_errors_name_the_api_parameter() -> None:
    answer = TestClient(create_app()).post("/api/compare", data={"model": "llama3.1-8b", "rate": "-1"})
    assert answer.json()["field"] == "rate" and answer.json()["error"].startswith("rate: ")


def test_an_uploaded_config_json_is_the_model(client: TestClient, tmp_path: Path) -> None:
    fields = {k: v for k, v in SMALL.items() if k != "model"}
    answer = client.post("/api/compare", data=fields, files={"config": ("config.json", json.dumps(CONFIG), "application/json")})
    assert answer.status_code == 200, answer.text
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    expected = llmco2.compare(str(path), gpus="h100", concurrency=4, max_gpus=1, serving_requests=30)
    assert answer.json()["model"] == expected.attrs["model"] == "uploaded-llama"
    assert answer.json()["options"][0]["g_per_output_token"] == pytest.approx(expected["g_per_output_token"].iloc[0], rel=1e-12)


def test_a_bad_config_json_names_the_uploaded_file_not_a_temporary_path(client: TestClient) -> None:
    broken = {**CONFIG, "num_attention_heads": 0}
    for content in ("{not json", json.dumps(broken)):
        answer = client.post("/api/compare", data={"concurrency": "4", "gpus": "h100"},
                             files={"config": ("my-config.json", content, "application/json")})
        assert answer.status_code == 400, answer.text
        assert "llmco2-ui-" not in answer.json()["error"], answer.json()


def test_predict_answers_llmco2_predicts_record(client: TestClient) -> None:
    fields = {"model": "llama3.1-8b", "gpu": "h100", "prompt_tokens": "512", "generated_tokens": "128", "region": "fra"}
    answer = client.post("/api/predict", data=fields)
    assert answer.status_code == 200, answer.text
    want = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=512, generated_tokens=128, region="fra").to_dict()
    assert json.dumps(answer.json(), sort_keys=True) == json.dumps(want, sort_keys=True)
    refused = client.post("/api/predict", data={**fields, "prompt_tokens": "-3"})
    assert refused.status_code == 400 and refused.json()["field"] == "--prompt-tokens"
    assert client.post("/api/predict", data={"model": "llama3.1-8b", "prompt_tokens": "5"}).json()["field"] == "--gpu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_llmco2_ui_serves_the_page_until_stopped() -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "llmco2.cli", "ui", "--no-browser", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, page = time.monotonic() + 60, ""
        while time.monotonic() < deadline and server.poll() is None and not page:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
                    page = answer.read().decode()
            except OSError:
                time.sleep(0.2)
        assert "llmco2 calculator" in page
    finally:
        server.terminate()
        _, err = server.communicate(timeout=20)
    assert f"llmco2 calculator on http://127.0.0.1:{port}/" in err


def test_a_busy_port_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, _, err = run_cli(["ui", "--no-browser", "--port", str(port)], capsys)
    assert code == 2 and err.startswith(f"llmco2: error: --port: cannot listen on 127.0.0.1:{port}") and err.count("\n") == 1


def test_without_the_ui_extra_the_command_names_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "llmco2.ui.app", raising=False)
    code, _, err = run_cli(["ui", "--no-browser"], capsys)
    assert code == 2
    assert err == ("llmco2: error: ui needs the ui extra (fastapi is not installed): pip install 'llmco2[ui]'\n")


def test_numbers_become_plain_json() -> None:
    import numpy as np

    from llmco2.ui.app import json_ready

    assert json_ready({"a": np.float64("nan"), "b": [np.int64(3), float("inf")], "c": "x"}) == {"a": None, "b": [3, None], "c": "x"}


def test_the_ui_docstring_examples_run() -> None:
    import doctest

    import llmco2.ui.app
    import llmco2.ui.catalog
    import llmco2.ui.form

    for module in (llmco2.ui.form, llmco2.ui.catalog, llmco2.ui.app):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_the_wheel_carries_the_pages_files() -> None:
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["llmco2.ui"]
    files = [f"static/{p.name}" for p in (ROOT / "llmco2" / "ui" / "static").iterdir() if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_the_page_takes_the_scope(client: TestClient) -> None:
    for scope in ("gpu", "server"):
        answer = client.post("/api/compare", data={**SMALL, "scope": scope})
        assert answer.status_code == 200, answer.text
        expected = llmco2.compare("llama3.1-8b", gpus="h100", concurrency=4, max_gpus=1, serving_requests=30, scope=scope)
        got = answer.json()["options"][0]
        assert got["scope"] == scope
        assert got["g_per_output_token"] == pytest.approx(expected["g_per_output_token"].iloc[0], rel=1e-12)


def test_the_page_takes_expert_parallelism_and_the_degrees(client: TestClient) -> None:
    """The form's expert parallelism (auto, off, only or a degree) and tp/dp reach llmco2.compare as the
    command's --ep/--tp/--dp do."""
    form = {"model": "qwen3-30b-a3b", "gpus": "h100", "concurrency": "4", "max_gpus": "2", "serving_requests": "30"}
    for ep, tp in (("only", ""), ("off", "2"), ("2", "")):
        answer = client.post("/api/compare", data={**form, "expert_parallel": ep, **({"tp": tp} if tp else {})})
        assert answer.status_code == 200, answer.text
        expected = llmco2.compare("qwen3-30b-a3b", gpus="h100", concurrency=4, max_gpus=2, serving_requests=30,
                                  expert_parallel=int(ep) if ep.isdigit() else ep, **({"tp": int(tp)} if tp else {}))
        assert [r["label"] for r in answer.json()["options"]] == expected["label"].tolist()
        assert [r["expert_parallel"] for r in answer.json()["options"]] == expected["expert_parallel"].tolist()
    bad = client.post("/api/compare", data={**form, "expert_parallel": "sometimes"})
    assert bad.status_code == 400 and bad.json()["parameter"] == "expert_parallel"
