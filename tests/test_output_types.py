"""Outputs keep the input's columns and their types: a Parquet log of integers, timestamps,
booleans and floats comes back with the same schema plus the prediction columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from llmco2.api.chunks import PREDICTION_COLUMNS
from tests.helpers import run_cli as run


def test_parquet_output_has_the_input_schema_plus_the_prediction_columns(tmp_path: Path, capsys) -> None:
    frame = pd.DataFrame({"model": ["llama3.1-8b"] * 3, "gpu": ["h100"] * 3, "batch_size": [1, 2, 4],
                          "prompt_tokens": [100, 200, 300], "generated_tokens": [10, 20, 30],
                          "ts": pd.to_datetime(["2023-11-16T01:00Z"] * 3), "flag": [True, False, None], "cost": [0.1, None, 0.3]})
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), src)
    out = tmp_path / "out.parquet"
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    schema_in, schema_out = pq.read_schema(src), pq.read_schema(out)
    assert [(f.name, f.type) for f in schema_out][:len(schema_in)] == [(f.name, f.type) for f in schema_in]
    assert schema_out.names[len(schema_in):] == list(PREDICTION_COLUMNS)
    back = pq.read_table(out)
    assert back.column("batch_size").to_pylist() == [1, 2, 4] and back.column("flag").to_pylist() == [True, False, None]
    assert back.column("cost").to_pylist()[1] is None
    # CSV stays text: the same rows written as CSV read back as the same values
    csv_out = tmp_path / "out.csv"
    assert run(["predict", "--requests", str(src), "--out", str(csv_out)], capsys)[0] == 0
    assert pd.read_csv(csv_out)["batch_size"].tolist() == [1, 2, 4]


def test_analyze_batch_writes_parquet_for_a_parquet_name_and_refuses_json(tmp_path: Path, capsys) -> None:
    src = tmp_path / "r.csv"
    src.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,h100,1,1,100,10\n")
    out = tmp_path / "a.parquet"
    assert run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)[0] == 0
    assert pq.read_table(out).num_rows == 1  # a real Parquet file, not CSV text under a .parquet name
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(tmp_path / "b.csv"), "--json"], capsys)
    assert code == 2 and "prints no JSON" in err and not (tmp_path / "b.csv").exists()
