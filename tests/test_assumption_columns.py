"""Every output says what each row was charged at and why it may be off: ``grid_region``,
``intensity_g_per_kwh``, ``pue`` and ``notes`` after the prediction columns, the same in request-file
outputs and :func:`llmco2.predict_frame`; an input column of one of those names is refused rather
than overwritten; a partial output of an llmco2 without them is not resumed into."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import llmco2
import llmco2.analytic.request_files as rf
import llmco2.carbon.footprint as footprint
from llmco2.api.chunks import OUTPUT_COLUMNS
from llmco2.carbon.accounting import J_PER_KWH, region
from tests.helpers import interrupted_on_call
from tests.helpers import run_cli as run

HEADER = "model,gpu,batch_size,prompt_tokens,generated_tokens,region\n"
ROWS = ["llama3.1-8b,h100,1,100,10,FR", "llama3.1-8b,b200,2,200,20,", "llama3.1-8b,h100,4,30000,3000,de",
        "phi3-small,h100,1,100,10,FR", "llama3.1-70b,t4,64,1000,100,FR"]
ASSUMED = ["grid_region", "intensity_g_per_kwh", "pue", "notes"]


def _log(tmp_path: Path, rows: list[str] = ROWS, header: str = HEADER, name: str = "log.csv") -> Path:
    src = tmp_path / name
    src.write_text(header + "".join(r + "\n" for r in rows))
    return src


def _predict(src: Path, out: Path, capsys, *extra: str) -> pd.DataFrame:
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out), *extra], capsys)
    assert code == 0, err
    return pd.read_parquet(out) if out.suffix == ".parquet" else pd.read_csv(out, keep_default_na=False, dtype={"region": str})


def test_each_row_says_its_region_intensity_pue_and_notes(tmp_path: Path, capsys) -> None:
    out = _predict(_log(tmp_path), tmp_path / "out.csv", capsys)
    assert list(out.columns[-len(OUTPUT_COLUMNS):]) == list(OUTPUT_COLUMNS)
    assert out["region"].tolist() == ["FR", "", "de", "FR", "FR"]  # the input column, as written
    assert out["grid_region"].tolist() == ["fra", "world", "deu", "fra", "fra"]
    assert out["intensity_g_per_kwh"].tolist() == [region(r).g_co2eq_per_kwh for r in ("fra", None, "deu", "fra", "fra")]
    totals = json.loads((tmp_path / "out.csv.totals.json").read_text())
    assert out["pue"].tolist() == [totals["assumptions"]["pue"]["value"]] * 5
    # operational carbon is the scope's energy x PUE x the row's intensity
    np.testing.assert_allclose(out["operational_g"], out["server_j"] / J_PER_KWH * out["pue"] * out["intensity_g_per_kwh"],
                               rtol=1e-9)
    # the notes are those the single predict lists for the same request
    for row, notes in zip(ROWS, out["notes"], strict=True):
        model, gpu, b, p, g, _ = row.split(",")
        single = llmco2.predict(model, gpu, batch_size=int(b), prompt_tokens=int(p), generated_tokens=int(g))
        assert notes == "; ".join(single.notes)
    assert out["notes"][0] == "" and out["notes"][1].startswith("unseen GPU b200")
    assert "prompt tokens 30,000 outside the trained range" in out["notes"][2]
    assert out["notes"][3].startswith("approximated: 16 blocksparse attention layers")  # the architecture's own note
    assert out["notes"][4].startswith("does not fit: needs 164.2 GB per GPU") and "; unseen GPU t4" in out["notes"][4]
    assert out["extrapolated"].tolist() == [False, True, True, False, True]


def test_a_given_intensity_and_region_are_written_on_every_row(tmp_path: Path, capsys) -> None:
    src = _log(tmp_path)
    out = _predict(src, tmp_path / "out.parquet", capsys, "--carbon-intensity", "100", "--pue", "1.2")
    assert out["grid_region"].isna().all()  # a number given: no region
    assert out["intensity_g_per_kwh"].tolist() == [100.0] * 5 and out["pue"].tolist() == [1.2] * 5
    out = _predict(_log(tmp_path, [r.rsplit(",", 1)[0] for r in ROWS], HEADER.replace(",region", ""), "plain_log.csv"),
                   tmp_path / "plain.csv", capsys, "--region", "FR")
    assert out["grid_region"].tolist() == ["fra"] * 5 and out["intensity_g_per_kwh"].tolist() == [55.3] * 5
    out = _predict(src, tmp_path / "empty.csv", capsys, "--region", "PL")
    assert out["grid_region"].tolist() == ["fra", "pol", "deu", "fra", "fra"]  # an empty cell takes --region


def test_an_hourly_intensity_is_written_per_row(tmp_path: Path, capsys) -> None:
    hours = tmp_path / "hours.csv"
    hours.write_text("timestamp,g_co2eq_per_kwh,region\n2024-03-01T00:00:00Z,100,FR\n2024-03-01T01:00:00Z,200,FR\n"
                     "2024-03-01T00:00:00Z,300,DE\n2024-03-01T01:00:00Z,500,DE\n")
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,timestamp,region\n"
                   "llama3.1-8b,a100-80gb,1,256,32,2024-03-01T00:30Z,DE\nllama3.1-8b,a100-80gb,1,256,32,2024-03-01T01:30Z,\n")
    out = _predict(src, tmp_path / "out.csv", capsys, "--intensity-file", str(hours), "--region", "FR")
    assert out["grid_region"].tolist() == ["deu", "fra"] and out["intensity_g_per_kwh"].tolist() == [300.0, 200.0]
    one = tmp_path / "one.csv"
    one.write_text("timestamp,g_co2eq_per_kwh\n2024-03-01T00:00:00Z,100\n2024-03-01T01:00:00Z,400\n")
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,timestamp\n"
                   "llama3.1-8b,a100-80gb,1,256,32,2024-03-01T01:30Z\n")
    out = _predict(src, tmp_path / "one_out.csv", capsys, "--intensity-file", str(one))
    assert out["grid_region"].tolist() == [""] and out["intensity_g_per_kwh"].tolist() == [400.0]  # the file names no region


def test_predict_frame_writes_the_same_columns_as_a_request_file(tmp_path: Path, capsys) -> None:
    src = _log(tmp_path)
    from_file = _predict(src, tmp_path / "out.parquet", capsys, "--region", "PL")
    frame = pd.read_csv(src, dtype={"region": str})
    from_frame = llmco2.predict_frame(frame, region="PL")
    assert list(from_frame.columns) == [*frame.columns, *OUTPUT_COLUMNS]
    for c in ASSUMED:
        assert from_frame[c].tolist() == from_file[c].tolist(), c
    table = llmco2.predict_frame(pa.Table.from_pandas(frame, preserve_index=False), region="PL")
    assert table.schema.field("notes").type == pa.string() and table.column("grid_region").to_pylist()[1] == "pol"


def test_an_input_column_named_like_an_added_column_is_refused(tmp_path: Path, capsys) -> None:
    for name in ASSUMED:
        src = _log(tmp_path, [f"{r},x" for r in ROWS], HEADER.replace("\n", f",{name}\n"))
        code, _, err = run(["predict", "--requests", str(src), "--out", str(tmp_path / "out.csv")], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"has a column named '{name}', which predict adds" in err and "rename" in err
        assert not (tmp_path / "out.csv").exists()
    with pytest.raises(llmco2.InvalidInputError, match="column named 'pue'"):
        llmco2.predict_frame(pd.read_csv(_log(tmp_path)).assign(pue=1.1))


def test_an_earlier_output_is_predicted_again_with_its_old_columns_replaced(tmp_path: Path, capsys) -> None:
    first = _predict(_log(tmp_path), tmp_path / "first.csv", capsys)
    code, _, err = run(["predict", "--requests", str(tmp_path / "first.csv"), "--out", str(tmp_path / "again.csv")], capsys)
    assert code == 0, err
    again = pd.read_csv(tmp_path / "again.csv", keep_default_na=False, dtype={"region": str})
    assert list(again.columns) == list(first.columns)
    pd.testing.assert_frame_equal(again, first)


def test_a_partial_output_of_an_earlier_llmco2_is_not_resumed(tmp_path: Path, capsys, monkeypatch) -> None:
    """An interrupted run's partial output whose manifest lists no added columns (an llmco2 that
    wrote none) is removed, not continued: the output is the same as an uninterrupted run's."""
    monkeypatch.setattr(rf, "CHUNK_ROWS", 2)
    src = _log(tmp_path, ROWS * 2)
    reference = tmp_path / "ref.csv"
    _predict(src, reference, capsys)
    out = tmp_path / "out.csv"
    stop_at_the_third_chunk = interrupted_on_call(footprint.predict_footprint, 3)
    with monkeypatch.context() as m:
        m.setattr(footprint, "predict_footprint", stop_at_the_third_chunk)
        assert run(["predict", "--requests", str(src), "--out", str(out)], capsys)[0] == 130
    manifest = tmp_path / ".out.csv.partial.json"
    state = json.loads(manifest.read_text())
    assert state["chunks"] == 2 and state["fingerprint"]["columns"] == list(OUTPUT_COLUMNS)
    del state["fingerprint"]["columns"]
    manifest.write_text(json.dumps(state))
    code, _, err = run(["predict", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0 and "interrupted run" not in err, err
    assert out.read_bytes() == reference.read_bytes()


def test_a_batch_run_in_waves_says_so_in_the_single_predict_and_the_notes_column() -> None:
    """Llama-2-7B, batch 64 of 1,024 + 1,024 tokens on an A100-40GB: vLLM pages its KV cache and runs 20 sequences
    at a time (what the prediction costs); HF generate cannot, and the request does not fit."""
    from llmco2.analytic.table import RequestTable
    from llmco2.api.output_columns import memory_note_rows
    from llmco2.specs import Request, get_gpu, get_model

    paged = llmco2.predict("llama2-7b", "a100-40gb", batch_size=64, prompt_tokens=1024, generated_tokens=1024, engine="vllm")
    static = llmco2.predict("llama2-7b", "a100-40gb", batch_size=64, prompt_tokens=1024, generated_tokens=1024, engine="hf")
    assert any(n.endswith("the prediction runs 20 at a time, 3.2 waves, as the engine's paged cache would") for n in paged.notes)
    assert any(n.startswith("does not fit: needs 82.2 GB per GPU") for n in static.notes)
    arch, gpu = get_model("llama2-7b"), get_gpu("a100-40gb")
    table = RequestTable.from_items([(arch, Request(batch_size=b, prompt_tokens=1024, generated_tokens=1024, engine="vllm"), gpu)
                                     for b in (20, 21, 64)])
    per_sequence = 2 * 32 * 2048 * 4096 * 2  # bytes of K and V per sequence at its full length
    memory = np.array([[13.5e9, b * per_sequence] for b in (20, 21, 64)])
    fits = memory.sum(axis=1) <= gpu.memory_bytes
    assert memory_note_rows(memory, fits, table).tolist() == [1, 2]  # 21 fits in 40 GB but not beside 90% of it
