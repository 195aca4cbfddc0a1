"""Azure LLM inference traces: loading and validation, statistics, the paper's Figure 6."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmco2.data import azure
from llmco2.data.azure import ecdf, load_trace, plot_figure6, trace_stats
from llmco2.errors import InvalidInputError

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write_trace(path, rows: list[str]) -> str:
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return str(path)


def test_trace_stats_match_data_md(shared_data) -> None:
    code, conv = load_trace("code"), load_trace("conv")
    s_code, s_conv = trace_stats(code), trace_stats(conv)
    assert s_code["count"] == 8819 and s_conv["count"] == 19366
    assert s_code["prompt_tokens"]["median"] == 1469 and s_code["generated_tokens"]["median"] == 13
    assert s_conv["prompt_tokens"]["median"] == 1020 and s_conv["generated_tokens"]["median"] == 129
    assert s_code["prompt_tokens"]["max"] == 7437 and s_code["generated_tokens"]["max"] == 1899
    assert s_conv["prompt_tokens"]["max"] == 14050 and s_conv["generated_tokens"]["max"] == 1000
    for s in (s_code, s_conv):
        for col in ("prompt_tokens", "generated_tokens"):
            r = s[col]
            assert r["p10"] <= r["p25"] <= r["median"] <= r["p75"] <= r["p90"] <= r["p99"] <= r["max"]
    assert str(code["timestamp"].dtype).startswith("datetime64")
    assert code["prompt_tokens"].dtype == np.int64 and conv["generated_tokens"].dtype == np.int64
    assert code["timestamp"].dt.date.astype(str).eq("2023-11-16").all()


def test_figure6_written(shared_data, tmp_path) -> None:
    out = plot_figure6(tmp_path / "fig6.png", load_trace("code"), load_trace("conv"))
    data = out.read_bytes()
    assert len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure6_formats_and_defaults_without_shared_data(tmp_path) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"timestamp": pd.Timestamp("2023-11-16"), "prompt_tokens": rng.integers(0, 5000, 300),
                          "generated_tokens": rng.integers(0, 500, 300)})
    for suffix in (".svg", ".pdf"):
        out = plot_figure6(tmp_path / f"fig{suffix}", frame, frame)
        assert out.stat().st_size > 0
    with pytest.raises(InvalidInputError, match="unknown figure format"):
        plot_figure6(tmp_path / "fig.jpg", frame, frame)
    with pytest.raises(InvalidInputError, match="does not exist"):
        plot_figure6(tmp_path / "missing" / "fig.png", frame, frame)


def test_load_custom_trace_and_cache(tmp_path) -> None:
    path = write_trace(tmp_path / "t.csv", ["2023-11-16 18:17:03.9799600,4808,10", "2023-11-16 18:17:04.0319600,0,8"])
    azure.clear_cache()
    df = load_trace("code", path)
    assert list(df.columns) == ["timestamp", "prompt_tokens", "generated_tokens"]
    assert df["prompt_tokens"].tolist() == [4808, 0] and df["generated_tokens"].tolist() == [10, 8]
    assert df["timestamp"].iloc[0] == pd.Timestamp("2023-11-16 18:17:03.97996")
    df.loc[0, "prompt_tokens"] = -1  # callers get a copy: the cache is not touched
    again = load_trace("code", path)
    assert again["prompt_tokens"].iloc[0] == 4808
    assert azure._read_trace_file.cache_info().misses == 1


@pytest.mark.parametrize(("row", "message"), [
    ("2023-11-16 18:17:05.0,12.5,3", "line 3: ContextTokens '12.5' is not a non-negative integer"),
    ("2023-11-16 18:17:05.0,-4,3", "line 3: ContextTokens '-4'"),
    ("2023-11-16 18:17:05.0,12,abc", "line 3: GeneratedTokens 'abc'"),
    ("2023-11-16 18:17:05.0,12,", "line 3: GeneratedTokens ''"),
    ("yesterday,12,3", "line 3: TIMESTAMP 'yesterday' is not a date-time"),
])
def test_bad_trace_file_names_file_and_line(tmp_path, row, message) -> None:
    path = write_trace(tmp_path / "bad.csv", ["2023-11-16 18:17:03.9799600,4808,10", row, "2023-11-16 18:17:06.0,1,1"])
    with pytest.raises(InvalidInputError, match="bad.csv") as info:
        load_trace("conv", path)
    assert message in str(info.value)


def test_bad_trace_header_and_arguments(tmp_path) -> None:
    path = tmp_path / "cols.csv"
    path.write_text("TIMESTAMP,Prompt,GeneratedTokens\n2023-11-16 18:17:03.9,1,1\n")
    with pytest.raises(InvalidInputError, match="line 1: missing columns ContextTokens"):
        load_trace("code", path)
    with pytest.raises(InvalidInputError, match="no such file"):
        load_trace("code", tmp_path / "none.csv")
    with pytest.raises(InvalidInputError, match="unknown Azure trace 'chat'"):
        load_trace("chat", path)
    with pytest.raises(InvalidInputError, match="prompt_tokens"):
        trace_stats(pd.DataFrame({"x": [1]}))


def test_ecdf() -> None:
    x, f = ecdf([3, 1, 2, 2, np.nan])
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert np.allclose(f, [0.25, 0.75, 1.0])
    with pytest.raises(InvalidInputError):
        ecdf([])
