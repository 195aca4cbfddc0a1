"""Outputs keep the input's columns and their types: a Parquet log of integers, timestamps,
booleans and floats comes back with the same schema plus the prediction columns and the
assumption columns (``grid_region, intensity_g_per_kwh, pue, notes``), single-process and from
the parts of a ``--cluster`` run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmco2.api.chunks import OUTPUT_COLUMNS, PREDICTION_COLUMNS
from llmco2.api.cluster_parts import MANIFEST_NAME
from tests.helpers import run_cli as run


def _typed_log(tmp_path: Path) -> Path:
    frame = pd.DataFrame({"model": ["llama3.1-8b"] * 3, "gpu": ["h100"] * 3, "batch_size": [1, 2, 4],
                          "prompt_tokens": [100, 200, 300], "generated_tokens": [10, 20, 30],
                          "ts": pd.to_datetime(["2023-11-16T01:00Z"] * 3), "flag": [True, False, None], "cost": [0.1, None, 0.3],
                          "region": ["FR", None, "de"]})
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), src)
    return src


def _expected_schema(schema_in: pa.Schema) -> pa.Schema:
    """The input's fields, then every prediction column (floats; ``extrapolated`` boolean), then the
    assumption columns."""
    added = [pa.field(c, pa.bool_() if c == "extrapolated" else pa.float64()) for c in PREDICTION_COLUMNS]
    added += [pa.field("grid_region", pa.string()), pa.field("intensity_g_per_kwh", pa.float64()),
              pa.field("pue", pa.float64()), pa.field("notes", pa.string())]
    return pa.schema([*schema_in, *added])


def test_parquet_output_has_the_input_schema_plus_the_prediction_columns(tmp_path: Path, capsys) -> None:
    src = _typed_log(tmp_path)
    out = tmp_path / "out.parquet"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    schema_in, schema_out = pq.read_schema(src), pq.read_schema(out)
    assert schema_out == _expected_schema(schema_in)  # names, types and nullability
    assert schema_out.names[len(schema_in):] == list(OUTPUT_COLUMNS)
    back = pq.read_table(out)
    assert back.column("batch_size").to_pylist() == [1, 2, 4] and back.column("flag").to_pylist() == [True, False, None]
    assert back.column("cost").to_pylist()[1] is None
    assert back.column("region").to_pylist() == ["FR", None, "de"]  # the input's column, unchanged
    assert back.column("grid_region").to_pylist() == ["fra", "world", "deu"] and back.column("notes").to_pylist() == [""] * 3
    # CSV stays text: the same rows written as CSV read back as the same values
    csv_out = tmp_path / "out.csv"
    assert run(["predict", "--requests", str(src), "--out", str(csv_out)], capsys)[0] == 0
    assert pd.read_csv(csv_out)["batch_size"].tolist() == [1, 2, 4]
    assert list(pd.read_csv(csv_out).columns) == [*schema_in.names, *OUTPUT_COLUMNS]


def test_cluster_parts_have_the_input_schema_plus_the_prediction_columns(tmp_path: Path, capsys) -> None:
    """The parts of a ``--cluster local`` run have the single-process output's schema and rows (each
    row's region resolved by the worker as by a single process); a
    folder of parts an earlier llmco2 wrote (its manifest lists no added columns) is refused with one
    line, not mixed."""
    pytest.importorskip("distributed")
    src = _typed_log(tmp_path)
    single = tmp_path / "single.parquet"
    assert run(["predict", "--requests", str(src), "--out", str(single)], capsys)[0] == 0
    out = tmp_path / "parts"
    argv = ["predict", "--requests", str(src), "--out", str(out), "--cluster", "local", "--workers", "1"]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    parts = sorted(out.glob("*.parquet"))
    assert len(parts) == 1 and pq.read_schema(parts[0]) == _expected_schema(pq.read_schema(src))
    assert pq.read_table(parts[0]).equals(pq.read_table(single))
    manifest = out / MANIFEST_NAME
    state = json.loads(manifest.read_text())
    assert state["fingerprint"]["columns"] == list(OUTPUT_COLUMNS)
    del state["fingerprint"]["columns"]  # as an llmco2 without the assumption columns wrote it
    manifest.write_text(json.dumps(state))
    parts[0].unlink()  # a part left to write: without the check the rerun would mix old and new parts
    code, _, err = run(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "other output columns (written by an earlier version); delete the folder" in err
    assert not list(out.glob("*.parquet"))


def test_analyze_batch_writes_parquet_for_a_parquet_name_and_refuses_json(tmp_path: Path, capsys) -> None:
    src = tmp_path / "r.csv"
    src.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,h100,1,1,100,10\n")
    out = tmp_path / "a.parquet"
    assert run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)[0] == 0
    assert pq.read_table(out).num_rows == 1  # a real Parquet file, not CSV text under a .parquet name
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(tmp_path / "b.csv"), "--json"], capsys)
    assert code == 2 and "prints no JSON" in err and not (tmp_path / "b.csv").exists()


# -- analyze batch: the same rule as predict ----------------------------------------------------
def _analysis_schema(schema_in: pa.Schema) -> pa.Schema:
    from llmco2.analytic.batch import ANALYSIS_COLUMNS

    added = [pa.field(c, pa.bool_() if c == "fits_in_memory" else pa.float64()) for c in ANALYSIS_COLUMNS]
    return pa.schema([*schema_in, *added])


def test_analyze_batch_keeps_the_parquet_schema(tmp_path: Path, capsys) -> None:
    from llmco2.analytic.batch import ANALYSIS_COLUMNS, analyze_request_table, read_request_csv

    src = _typed_log(tmp_path)
    out = tmp_path / "a.parquet"
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    assert pq.read_schema(out) == _analysis_schema(pq.read_schema(src))
    got, given = pq.read_table(out), pq.read_table(src)
    assert got.select(given.column_names).equals(given)  # every input cell, as typed
    expected = analyze_request_table(read_request_csv(src))
    for c in ANALYSIS_COLUMNS:  # the numbers of the table the analysis always made
        assert got.column(c).to_pylist() == expected[c].tolist(), c


def test_analyze_batch_keeps_the_csv_columns_as_written(tmp_path: Path, capsys) -> None:
    src = tmp_path / "r.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,user,\"note, quoted\",ts\n"
                   "llama3.1-8b,h100,1,100,10,u1,\"a, b\",2024-01-01T00:00:00Z\n"
                   "qwen2-7b,h100,2,200,20,u2,,2024-01-01T01:00:00Z\n")
    out = tmp_path / "a.csv"
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    frame = pd.read_csv(out, dtype=str, keep_default_na=False)
    given = pd.read_csv(src, dtype=str, keep_default_na=False)
    assert list(frame.columns[:len(given.columns)]) == list(given.columns)
    assert frame[list(given.columns)].equals(given)  # "h100" stays as written, not the catalog id
    again = tmp_path / "b.csv"  # an earlier output: its analysis columns are replaced, not repeated
    code, _, err = run(["analyze", "batch", "--requests", str(out), "--out", str(again)], capsys)
    assert code == 0, err
    assert again.read_bytes() == out.read_bytes()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
