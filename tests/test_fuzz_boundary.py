"""Property-based checks of the command-line boundary and the file readers: random options,
values and files never give a traceback; every run either exits 0 with finite results or exits 2
with one line. The CLI runs in-process through ``main(argv)``."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import tempfile
from pathlib import Path

import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llmco2.cli import main

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NON_FINITE = re.compile(r"\b(nan|NaN|inf|Infinity)\b")

weird_numbers = st.one_of(
    st.integers(min_value=-5, max_value=5000), st.integers(min_value=-(10**25), max_value=10**25),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "inf", "-inf", "1e20", "-9.2e18", "3.5", "0x10", ""]),
)
valid_counts = st.integers(min_value=1, max_value=64)
numbers = st.one_of(valid_counts, valid_counts, weird_numbers)
texts = st.one_of(st.text(max_size=12), st.sampled_from(["", " ", "llama3.1-8b", "qwen2-0.5b", "h100", "a100-80gb", "fra",
                                                           "google", "vllm", "hf", "fp16", "int4", "jetson-orin"]))


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def _check(argv: list[str]) -> tuple[int, str, str]:
    code, out, err = _cli(argv)
    event(f"{argv[0]} exit {code}")
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        lines = [line for line in err.strip().splitlines() if not line.startswith("WARNING")]
        assert len(lines) == 1 and lines[0], (argv, err)
    else:
        assert not NON_FINITE.search(out), (argv, out[-500:])
    return code, out, err


def _value(v: object) -> str:
    return repr(v) if isinstance(v, float) else str(v)


PREDICT_FLAGS = {"--model": texts, "--gpu": texts, "--gpus": numbers, "--tp": numbers, "--batch-size": numbers,
                 "--prompt-tokens": numbers, "--gen-tokens": numbers, "--engine": texts, "--region": texts,
                 "--carbon-intensity": numbers, "--pue": st.one_of(numbers, texts), "--lifetime-years": numbers,
                 "--dtype": texts, "--out": st.just("OUT")}
BASE = {"--model": "qwen2-0.5b", "--gpu": "a100-80gb", "--batch-size": "1", "--prompt-tokens": "64", "--gen-tokens": "8"}


@SETTINGS
@given(st.dictionaries(st.sampled_from(sorted(PREDICT_FLAGS)), st.none(), max_size=3).flatmap(
    lambda keys: st.fixed_dictionaries({k: PREDICT_FLAGS[k] for k in keys})), st.booleans(), st.booleans())
def test_predict_options(flags: dict, keep_base: bool, as_json: bool) -> None:
    options = {**(BASE if keep_base else {}), **{k: _value(v) for k, v in flags.items()}}
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["predict"] + [x for k, v in options.items() for x in (k, v.replace("OUT", f"{tmp}/o.csv"))]
        code, out, _ = _check(argv + (["--json"] if as_json else []))
    if code == 0 and as_json:
        doc = json.loads(out)
        assert all(math.isfinite(doc[k]) and doc[k] >= 0 for k in ("prefill", "decode", "total", "operational"))


ANALYZE_FLAGS = {"--batch-size": numbers, "--prompt-tokens": numbers, "--gen-tokens": numbers, "--gpus": numbers,
                 "--tp": numbers, "--dtype": texts, "--kv-dtype": texts}


@SETTINGS
@given(st.fixed_dictionaries({}, optional=ANALYZE_FLAGS), st.sampled_from(["model", "layer"]), st.booleans())
def test_analyze_options(flags: dict, what: str, ignore_context: bool) -> None:
    options = {**{k: v for k, v in BASE.items() if k != "--model"}, **{k: _value(v) for k, v in flags.items()}}
    argv = ["analyze", what, "--model", "llama3.1-8b", "--json", *[x for kv in options.items() for x in kv]]
    _check(argv + (["--ignore-context"] if ignore_context else []))


REQUIRED = {"model": ["qwen2-0.5b", "llama3.1-8b", "mixtral-8x7b"], "gpu": ["a100-80gb", "h100", "jetson-orin", "l4"],
            "batch_size": ["1", "4", "16"], "prompt_tokens": ["64", "512"], "generated_tokens": ["1", "8", "128"]}
OPTIONAL = {"num_gpus": ["1", "2", ""], "tensor_parallel": ["1", ""], "dtype": ["fp16", "bf16", "int8", ""],
            "flash_attention": ["true", "false", ""], "engine": ["vllm", "hf", "sglang", ""], "hidden_size": ["", "1024"],
            "num_layers": ["", "4"], "total_j": ["1.5", "", "x"], "note": ["a", "b,c", 'say "hi"']}
weird_cells = st.one_of(weird_numbers.map(_value), st.text(max_size=8))


@st.composite
def request_files(draw: st.DrawFn) -> str:
    """Mostly valid request files: the required columns (one sometimes dropped or doubled), some
    optional ones, rows of valid values with an occasional odd cell or a row of the wrong width."""
    header = list(REQUIRED) + draw(st.lists(st.sampled_from(sorted(OPTIONAL)), max_size=4, unique=True))
    if draw(st.integers(0, 9)) == 0:
        header.remove(draw(st.sampled_from(list(REQUIRED))))
    if draw(st.integers(0, 9)) == 0:
        header.append(draw(st.sampled_from(header)))
    choices = {**REQUIRED, **OPTIONAL}
    rows = []
    for _ in range(draw(st.integers(0, 5))):
        row = []
        for col in header:
            cell = draw(st.sampled_from(choices[col])) if draw(st.integers(0, 11)) else draw(weird_cells)
            row.append(cell if not any(c in cell for c in ',"\r\n') else '"' + cell.replace('"', '""') + '"')
        if draw(st.integers(0, 14)) == 0:
            row = row[:-1]
        rows.append(",".join(row))
    return "\n".join([",".join(header), *rows]) + "\n"


@SETTINGS
@given(request_files(), st.sampled_from([".csv", ".parquet"]))
def test_request_files(body: str, out_suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "r.csv", Path(tmp) / f"p{out_suffix}"
        src.write_text(body)
        code, _, _ = _check(["predict", "--requests", str(src), "--out", str(out)])
        if code == 0:
            frame = pd.read_parquet(out) if out_suffix == ".parquet" else pd.read_csv(out)
            numeric = frame[["prefill_j", "decode_j", "total_j", "latency_s", "operational_g", "total_g"]]
            assert numeric.map(lambda x: math.isfinite(float(x))).all().all()
        else:
            assert not out.exists()
        assert [p.name for p in Path(tmp).iterdir() if p.name.startswith(".")] == []  # nothing left behind
        _check(["analyze", "batch", "--requests", str(src), "--out", str(Path(tmp) / "a.csv")])


CONFIG_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "vocab_size", "head_dim", "max_position_embeddings", "num_local_experts", "num_experts_per_tok", "sliding_window"]
json_values = st.one_of(st.integers(1, 64), st.integers(1, 64), st.integers(-3, 10**6), st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=5), st.booleans(), st.none(), st.lists(st.integers(0, 4), max_size=2))


@SETTINGS
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=6), st.sampled_from(["llama", "mixtral", "qwen2", ""]))
def test_config_json(changes: dict, model_type: str) -> None:
    cfg = {"model_type": model_type, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, **changes}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg))
        _check(["analyze", "model", "--model", str(path), "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "16",
                "--gen-tokens", "4", "--json"])


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from(["argonne", "co2meter", "mlenergy_v2", "wilkins", "delavande"]))
def test_importers_and_readers_on_random_bytes(blob: bytes, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.csv"
        src.write_bytes(blob)
        _check(["data", "import", fmt, str(src), "--out", str(Path(tmp) / "t.parquet")])
        _check(["predict", "--requests", str(src), "--out", str(Path(tmp) / "p.csv")])
        _check(["evaluate", "--data", str(src)])
