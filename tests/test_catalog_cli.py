"""``llmco2 catalog gpus|models|engines``: every entry of each catalog, as a table or as JSON."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from llmco2.cli import main
from llmco2.specs import engine_catalog, get_engine, gpu_catalog, model_catalog


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


@pytest.mark.parametrize(("which", "catalog"), [("gpus", gpu_catalog), ("models", model_catalog), ("engines", engine_catalog)])
def test_catalog_json_lists_every_entry(which: str, catalog) -> None:
    code, out = _run(["catalog", which, "--json"])
    assert code == 0
    assert [row["id"] for row in json.loads(out)] == [entry.id for entry in catalog()]


def test_catalog_engines_gives_each_engine_s_priors_and_the_names_it_answers_to() -> None:
    code, out = _run(["catalog", "engines", "--json"])
    rows = {row["id"]: row for row in json.loads(out)}
    assert {"vllm", "tgi", "llama-cpp", "hf", "tensorrt-llm"} <= set(rows)
    vllm = get_engine("vllm")
    assert rows["vllm"]["cuda_graphs"] is vllm.cuda_graphs and rows["vllm"]["launch_us"] == vllm.launch_overhead_us
    for row in rows.values():
        for alias in row["aliases"]:
            assert get_engine(alias).id == row["id"]
    code, table = _run(["catalog", "engines"])
    assert code == 0 and "llama-cpp" in table and "aliases" not in table
