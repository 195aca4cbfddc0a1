"""Hostile and careless inputs of issue 33 that earlier rounds left: each ends in exit 2 with one
line naming its cause (``InvalidInputError`` in the API), never a traceback or a silent answer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmco2.errors import InvalidInputError
from llmco2.file_checks import MAX_JSON_DEPTH, JSONTooDeepError, parse_json
from llmco2.specs import get_model
from llmco2.specs.toml_cache import loads_toml
from tests.helpers import run_cli

BASE = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096}
ONE = ["--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "10", "--gen-tokens", "5"]
REQUESTS = "model,gpu,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,h100,1,100,50\n"


def _one_line_error(code: int, err: str, *mentions: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for m in mentions:
        assert m in err, err


# -- JSON nested absurdly deep -------------------------------------------------------------------
@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
                                  "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)])
def test_parse_json_refuses_deep_documents(text: str) -> None:
    with pytest.raises(JSONTooDeepError, match="nested more than"):
        parse_json(text)


def test_parse_json_reads_ordinary_documents() -> None:
    deep_enough = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    assert json.dumps(parse_json(deep_enough)) == deep_enough


def test_deep_config_json_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(["predict", "--model", str(path), *ONE], capsys)
    _one_line_error(code, err, "--model", "nested more than 64 levels deep")


def test_deep_catalog_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMCO2_CACHE_DIR", str(tmp_path))
    text = "world = 484.4\n"
    assert loads_toml(text, "grid") == {"world": 484.4}
    (entry,) = (tmp_path / "toml-v2").glob("grid-*.json")
    entry.write_text("[" * 100_000 + "]" * 100_000)
    assert loads_toml(text, "grid") == {"world": 484.4}  # parsed again, not a RecursionError


def test_deep_partial_manifest_starts_afresh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "r.csv", tmp_path / "pred.csv"
    src.write_text(REQUESTS)
    (tmp_path / ".pred.csv.partial").write_text("junk")
    (tmp_path / ".pred.csv.partial.json").write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    assert out.read_text().count("\n") == 2


# -- a path given as a model that is not a config file -------------------------------------------
def test_model_path_that_is_a_directory_or_special_file(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    with pytest.raises(InvalidInputError, match="is a directory without a config.json"):
        get_model(str(folder))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInputError, match="is not a regular file"):
        get_model(str(fifo))
    with pytest.raises(InvalidInputError, match="is not a regular file"):
        get_model("/dev/zero")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InvalidInputError, match="is a directory"):
        get_model(str(tmp_path / "dir.json"))


def test_model_path_without_json_suffix_is_read_as_a_config(tmp_path: Path) -> None:
    path = tmp_path / "my_config"
    path.write_text(json.dumps({**BASE, "architectures": ["LlamaForCausalLM"]}))
    assert get_model(str(path)).num_layers == 4
    with pytest.raises(InvalidInputError, match="unknown model"):
        get_model("no-such-model-or-file")


# -- a symbolic link loop as the output ----------------------------------------------------------
@pytest.mark.parametrize("command", [["predict", "--requests", "{src}", "--out", "{out}"],
                                     ["sample", "--n", "3", "--out", "{out}"],
                                     ["analyze", "batch", "--requests", "{src}", "--out", "{out}"]])
def test_output_that_is_a_symlink_loop(command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "r.csv", tmp_path / "loop.csv"
    src.write_text(REQUESTS)
    out.symlink_to(out.name)
    code, _, err = run_cli([a.format(src=src, out=out) for a in command], capsys)
    _one_line_error(code, err, "--out", "symbolic link that leads back to itself")
    assert out.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["loop.csv", "r.csv"]


def test_api_output_that_is_a_symlink_loop(tmp_path: Path) -> None:
    from llmco2 import FileJob, predict_file

    src, out = tmp_path / "r.csv", tmp_path / "loop.csv"
    src.write_text(REQUESTS)
    out.symlink_to(out.name)
    with pytest.raises(InvalidInputError, match="symbolic link") as info:
        predict_file(FileJob(requests=str(src), out=str(out)))
    assert info.value.field == "out"


# -- a negative or fractional seed ---------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["focused", "random"])
def test_sample_refuses_a_negative_seed(strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.csv"
    code, _, err = run_cli(["sample", "--strategy", strategy, "--n", "3", "--seed", "-1", "--out", str(out)], capsys)
    _one_line_error(code, err, "--seed", "whole number from 0", "-1")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seed", [-1, 2.5, "3", None])
def test_sampler_refuses_a_bad_seed(seed: object) -> None:
    from llmco2.data.sampling import RandomSampler

    sampler = RandomSampler(max_prompt=1000, max_generated=1000)
    with pytest.raises(InvalidInputError, match="whole number") as info:
        sampler.sample(2, seed=seed)  # type: ignore[arg-type]
    assert info.value.field == "seed"
    with pytest.raises(InvalidInputError, match="whole number"):
        next(sampler.sample_blocks(2, seed=seed))  # type: ignore[arg-type]


# -- llmco2 measure names --configs, and reads a gzip-compressed configurations file ------------
@pytest.mark.parametrize(("make", "mention"), [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: os.mkfifo(p), "is not a regular file"),
    (lambda p: p.write_text('{"model": 1}\n'), "does not look like a request file"),
])
def test_measure_errors_name_configs(make, mention: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = tmp_path / "configs.csv"
    make(configs)
    code, _, err = run_cli(["measure", "--configs", str(configs), "--out", str(tmp_path / "m.csv"), "--dry-run",
                            "--device", "h200"], capsys)
    _one_line_error(code, err, "--configs", mention)
    assert "--requests" not in err


def test_measure_reads_gzip_configs_with_an_engine_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    configs = tmp_path / "configs.csv.gz"
    with gzip.open(configs, "wt") as fh:
        fh.write("model,gpu,batch_size,prompt_tokens,generated_tokens,engine\n"
                 "llama3.1-8b,h200,1,100,50,hf-static\nllama3.1-8b,h200,2,100,50,\n")
    code, out, err = run_cli(["measure", "--configs", str(configs), "--out", str(tmp_path / "m.csv"), "--dry-run",
                              "--device", "h200", "--json"], capsys)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["total"] == 2 and [c["engine"] for c in plan["configurations"]] == ["hf-static", "hf"]


# -- report trace --serving --sweep-requests: refused up front, naming the flag ------------------
@pytest.mark.parametrize("count", ["0", "1000000000"])
def test_report_sweep_requests_out_of_range(count: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["report", "trace", "--serving", "--sweep-requests", count, "-o", str(tmp_path / "t.png")],
                           capsys)
    _one_line_error(code, err, "--sweep-requests", "from 1 to 1,000,000")
    assert "requests-count" not in err and list(tmp_path.iterdir()) == []


def test_trace_lengths_names_its_own_parameter() -> None:
    from llmco2.serving.workload import trace_lengths

    with pytest.raises(InvalidInputError) as info:
        trace_lengths("conv", 10**9)
    assert info.value.field == "n"


# -- the serving API: rates near zero, empty texts ------------------------------------------------
@pytest.mark.parametrize("rate", [1e-300, 1e-6])
def test_make_workload_refuses_a_rate_below_one_a_day(rate: float) -> None:
    from llmco2 import make_workload

    with pytest.raises(InvalidInputError, match="one request a day") as info:
        make_workload(n=5, rate=rate)
    assert info.value.field == "rate"


def test_make_workload_takes_a_rate_of_one_a_day() -> None:
    from llmco2 import make_workload
    from llmco2.serving.workload import MIN_RATE

    assert len(make_workload(n=3, rate=MIN_RATE).prompt_tokens) == 3


@pytest.mark.parametrize(("name", "value", "mention"), [("region", "", "is empty"), ("pue", " ", "is empty"),
                                                        ("region", "Narnia", "unknown region")])
def test_serve_refuses_bad_assumptions_before_simulating(name: str, value: str, mention: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import llmco2.serving.api as serving_api
    from llmco2 import make_workload, serve

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before the assumptions were checked")

    workload = make_workload(n=5, rate=1.0)
    monkeypatch.setattr(serving_api, "simulate", no_simulation)
    with pytest.raises(InvalidInputError, match=mention) as info:
        serve("llama3.1-8b", "h100", workload, **{name: value})
    assert info.value.field == name


# -- a checkpoint that is a directory, a special file or a zip of something else ----------------
def _special_checkpoints(tmp_path: Path) -> dict[str, tuple[str, str]]:
    import zipfile

    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    with zipfile.ZipFile(tmp_path / "notes.zip", "w") as archive:
        archive.writestr("notes.txt", "hello")
    return {"folder": (str(tmp_path / "folder"), "is a directory, not a file"),
            "pipe": (str(tmp_path / "pipe"), "is not a regular file"),
            "zero": ("/dev/zero", "is not a regular file"),
            "zip": (str(tmp_path / "notes.zip"), "got a zip archive")}


@pytest.mark.parametrize("which", ["folder", "pipe", "zero", "zip"])
def test_predict_checkpoint_that_is_not_a_checkpoint_file(which: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, mention = _special_checkpoints(tmp_path)[which]
    code, _, err = run_cli(["predict", "--model", "llama3.1-8b", *ONE, "--checkpoint", path], capsys)
    _one_line_error(code, err, "--checkpoint", mention)
    assert "no such" not in err and "pickle" not in err and "--trust" not in err


@pytest.mark.parametrize("which", ["folder", "pipe", "zip"])
def test_checkpoint_inspect_names_its_path(which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, mention = _special_checkpoints(tmp_path)[which]
    code, _, err = run_cli(["checkpoint", "inspect", path], capsys)
    _one_line_error(code, err, "path: ", mention)
    assert "--checkpoint" not in err


def test_a_torch_zip_is_still_called_pickle_based(tmp_path: Path) -> None:
    import zipfile

    from llmco2.prediction.checkpoint_file import read_checkpoint

    legacy = tmp_path / "old.pt"
    with zipfile.ZipFile(legacy, "w") as archive:  # the layout torch.save writes
        archive.writestr("old/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("old/version", "3\n")
    with pytest.raises(InvalidInputError, match="pickle-based checkpoint"):
        read_checkpoint(legacy)


# -- analyze options that a prefill or a FLOP count without --elapsed-s would ignore -------------
ATTENTION = ["analyze", "attention", "--hidden-size", "4096", "--num-heads", "32", "--batch-size", "1", "--seq-len", "16"]


@pytest.mark.parametrize(("extra", "mention"), [
    (["--new-tokens", "5"], "--new-tokens only applies to decode"),
    (["--kv-len", "past", "--decode-projections", "q"], "--decode-projections, --kv-len only apply to decode"),
])
def test_attention_decode_options_in_prefill(extra: list[str], mention: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli([*ATTENTION, "--phase", "prefill", *extra], capsys)
    _one_line_error(code, err, mention)
    code, out, err = run_cli([*ATTENTION, "--phase", "decode", *extra, "--json"], capsys)
    assert code == 0 and json.loads(out)["flops_per_chip"] > 0, err


@pytest.mark.parametrize("extra", [["--gpu", "h100"], ["--gpus", "4"], ["--dtype", "fp8"]])
def test_flops_peak_options_need_elapsed(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    flops = ["analyze", "flops", "--model", "llama3.1-8b", "--batch-size", "1", "--seq-len", "16"]
    code, _, err = run_cli([*flops, *extra], capsys)
    _one_line_error(code, err, extra[0], "only applies with --elapsed-s")
    code, out, err = run_cli([*flops, "--gpu", "h100", *extra, "--elapsed-s", "0.01", "--json"], capsys)
    assert code == 0 and 0 < json.loads(out)["mfu"] < 1, err


# -- a gzip-compressed hourly intensity file is read, as a gzip request log is --------------------
HOURS = b"timestamp,g_co2eq_per_kwh,region\n2024-03-01T00:00:00Z,100,FR\n2024-03-01T01:00:00Z,300,FR\n"


@pytest.mark.parametrize("name", ["hours.csv.gz", "hours.csv"])  # gzip by its name, or by its first bytes
def test_gzip_intensity_file_is_read(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    hours = tmp_path / name
    hours.write_bytes(gzip.compress(HOURS))
    plain = tmp_path / "plain.csv"
    plain.write_bytes(HOURS)
    one = ["predict", "--model", "llama3.1-8b", *ONE, "--region", "FR", "--timestamp", "2024-03-01T01:10Z", "--json"]
    code, out, err = run_cli([*one, "--intensity-file", str(hours)], capsys)
    assert code == 0, err
    assert json.loads(out)["assumptions"]["grid"]["g_co2eq_per_kwh"] == 300
    src = tmp_path / "r.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens,timestamp\n"
                   "llama3.1-8b,h100,1,100,10,2024-03-01T00:30Z\nllama3.1-8b,h100,1,100,10,2024-03-01T01:30Z\n")
    outputs = []
    for intensity in (hours, plain):
        out_path = tmp_path / f"p_{intensity.name}.csv"
        code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(out_path), "--region", "FR",
                                "--intensity-file", str(intensity)], capsys)
        assert code == 0, err
        outputs.append(out_path.read_text())
    assert outputs[0] == outputs[1]  # the same predictions as from the uncompressed file
    import pandas as pd

    assert list(pd.read_csv(tmp_path / f"p_{hours.name}.csv")["intensity_g_per_kwh"]) == [100, 300]  # each row's hour


def test_damaged_gzip_intensity_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    hours = tmp_path / "hours.csv.gz"
    hours.write_bytes(gzip.compress(HOURS)[:-6])
    code, _, err = run_cli(["predict", "--model", "llama3.1-8b", *ONE, "--region", "FR", "--timestamp", "2024-03-01T01:10Z",
                            "--intensity-file", str(hours)], capsys)
    _one_line_error(code, err, "--intensity-file", "is not a readable gzip file")
    assert "not an hourly intensity file" not in err


@pytest.mark.parametrize("kind", ["xz", "bzip2", "gzip twice"])
def test_a_file_compressed_in_a_format_not_read_directly_is_named_as_such(kind: str, tmp_path: Path, capsys) -> None:
    """xz, bzip2 or doubly gzipped request and intensity files: exit 2 and one line naming the
    compression (they read 'not UTF-8 text' before); the file's name does not matter."""
    import bz2
    import gzip
    import lzma

    pack = {"xz": lzma.compress, "bzip2": bz2.compress, "gzip twice": lambda b: gzip.compress(gzip.compress(b))}[kind]
    requests = tmp_path / "requests.csv"
    requests.write_bytes(pack(REQUESTS.encode()))
    code, out, err = run_cli(["predict", "--requests", str(requests), "--out", str(tmp_path / "out.csv")], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"is compressed ({kind}): decompress it to text first" in err and "--requests" in err
    hourly = tmp_path / "hourly.csv"
    hourly.write_bytes(pack(b"datetime,zone,carbon_intensity_g_per_kwh\n2024-01-01T00:00Z,DE,400\n"))
    code, _, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "10",
                            "--gen-tokens", "10", "--intensity-file", str(hourly), "--timestamp", "2024-01-01T00:00"], capsys)
    assert code == 2 and f"is compressed ({kind})" in err and len(err.strip().splitlines()) == 1


# -- found by a larger randomized campaign ---------------------------------------------------------
def test_compare_gpus_all_names_every_gpu_of_the_catalog() -> None:
    from llmco2.api.compare_options import gpu_ids
    from llmco2.specs import gpu_catalog

    ids = gpu_ids("all")
    assert ids == sorted(gpu_catalog().ids) and all(isinstance(i, str) for i in ids)  # not a TypeError sorting GPUs


def test_compare_names_a_gpu_without_the_dtype_rather_than_a_misfit() -> None:
    from llmco2 import compare

    with pytest.raises(InvalidInputError, match="t4: has no bf16 throughput") as info:
        compare("qwen2-0.5b", "t4", concurrency=1, serving_requests=20)
    assert info.value.field == "gpus" and "does not fit" not in str(info.value)
    table = compare("qwen2-0.5b", "t4,l4", concurrency=1, serving_requests=20)
    assert table.attrs["left_out"] == ["t4: has no bf16 throughput (supported: fp16, fp32, int4, int8); choose another `dtype`"]


@pytest.mark.parametrize("elapsed", ["1e-320", "5e-324", "1e-300"])
def test_flops_elapsed_so_short_that_the_mfu_is_infinite(elapsed: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["analyze", "flops", "--model", "qwen2-0.5b", "--batch-size", "1", "--seq-len", "10",
                              "--gpu", "h100", "--elapsed-s", elapsed, "--json"], capsys)
    _one_line_error(code, err, "--elapsed-s", "too short", "infinite")
    assert out == ""


def test_flops_mfu_of_an_ordinary_time() -> None:
    from llmco2.analytic.flop_split import mfu

    assert mfu(1e12, 1.0, 1e15) == pytest.approx(1e-3)


@pytest.mark.parametrize(("limits", "field"), [({"max_batched_tokens": 1}, "max_batched_tokens"),
                                               ({"max_batch": 1, "max_batched_tokens": 10**6}, "max_batch")])
def test_serve_refuses_limits_that_take_too_many_iterations(limits: dict[str, int], field: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import llmco2.serving.api as serving_api
    from llmco2 import make_workload, serve

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated hours of scheduler iterations")

    monkeypatch.setattr(serving_api, "simulate", no_simulation)
    with pytest.raises(InvalidInputError, match="scheduler iterations, more than the 10,000,000") as info:
        serve("qwen2-0.5b", "h100", make_workload(n=100_000, rate=1.0, seed=0), **limits)
    assert info.value.field == field


def test_serving_max_batched_tokens_one_on_many_requests_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["predict", "--model", "qwen2-0.5b", "--serving", "--rate", "1", "--max-batched-tokens", "1",
                            "--serving-requests", "20000", *ONE], capsys)
    _one_line_error(code, err, "--max-batched-tokens", "--serving-requests")


def test_an_empty_model_or_gpu_cell_is_called_empty(tmp_path: Path, capsys) -> None:
    """A blank model or GPU cell in a request file: exit 2, one line, 'is empty' (it read
    "unknown model ''" with the whole catalog)."""
    for header_cells, column in (((" ", "h100"), "model"), (("llama3.1-8b", ""), "gpu")):
        path = tmp_path / f"{column}.csv"
        path.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens\n" + ",".join(header_cells) + ",1,100,10\n")
        code, out, err = run_cli(["predict", "--requests", str(path), "--out", str(tmp_path / f"o_{column}.csv")], capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert f"line 2: {column}: the {column} is empty" in err


@pytest.mark.parametrize("name", ["out.json", "out.tsv", "out", "out.parquet.gz"])
def test_an_output_suffix_that_names_no_format_is_refused_before_work(name: str, tmp_path: Path, capsys) -> None:
    """predict --requests writes CSV, gzip CSV or Parquet as the suffix says; another suffix (it
    wrote CSV text under a .json name) is refused with one line, and nothing is written."""
    requests = tmp_path / "r.csv"
    requests.write_text(REQUESTS)
    code, out, err = run_cli(["predict", "--requests", str(requests), "--out", str(tmp_path / name)], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--out" in err
    assert not (tmp_path / name).exists() and sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


# -- API arguments of the wrong type or shape (a randomized campaign over the public API) ----------
def _refused(call, field: str) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        call()
    assert info.value.field == field and "\n" not in str(info.value), (info.value.field, str(info.value))
    return info.value


@pytest.mark.parametrize("name", ["options", "assumptions"])
@pytest.mark.parametrize("value", ["int4", {"region": "FR"}, 4])
def test_options_or_assumptions_of_another_type_are_refused(name: str, value: object) -> None:
    """``predict(..., assumptions="int4")`` (and predict_frame, compare) was a TypeError from
    dataclasses.replace."""
    import pandas as pd

    import llmco2

    _refused(lambda: llmco2.predict("qwen2-0.5b", "h100", prompt_tokens=64, generated_tokens=4, **{name: value}), name)
    frame = pd.DataFrame({"model": ["qwen2-0.5b"], "gpu": ["h100"], "batch_size": [1], "prompt_tokens": [64],
                          "generated_tokens": [4]})
    _refused(lambda: llmco2.predict_frame(frame, **{name: value}), name)
    _refused(lambda: llmco2.compare("qwen2-0.5b", "h100", rate=1.0, serving_requests=10, **{name: value}), name)


@pytest.mark.parametrize(("changes", "field"), [
    ({"workers": float("inf")}, "workers"), ({"workers": "4"}, "workers"), ({"workers": 2.5}, "workers"),
    ({"workers": 0}, "workers"), ({"partition_rows": float("nan")}, "partition_rows"),
    ({"partition_rows": (4,)}, "partition_rows"), ({"partition_rows": True}, "partition_rows"),
    ({"address": float("nan")}, "address"), ({"address": ["local"]}, "address"), ({"address": " "}, "address"),
    ({"verbose": "no"}, "verbose"), ({"verbose": float("inf")}, "verbose")])
def test_cluster_options_are_checked_when_built(changes: dict, field: str) -> None:
    """ClusterOptions took any value (NaN workers, a list as the address) and left it to fail later
    with a TypeError, or not at all."""
    import llmco2

    _refused(lambda: llmco2.ClusterOptions(**changes), field)


def test_cluster_options_take_whole_numbers() -> None:
    import numpy as np

    import llmco2

    options = llmco2.ClusterOptions(address="local", workers=np.int64(2), partition_rows=262_144.0, verbose=np.bool_(True))
    assert options.workers == 2 and options.partition_rows == 262_144


def test_compare_refuses_a_progress_that_cannot_be_called() -> None:
    """``compare(progress=[...])`` was a TypeError after the first configuration's simulation."""
    import llmco2

    _refused(lambda: llmco2.compare("qwen2-0.5b", "h100", rate=1.0, serving_requests=10, progress=["h100"]), "progress")


@pytest.mark.parametrize(("name", "value"), [("predictor", "conv"), ("cost", 4), ("calibration", {"factor": 1.0})])
def test_serve_refuses_a_model_of_another_type(name: str, value: object) -> None:
    """``serve(predictor="conv")`` was an AttributeError deep in the cost model."""
    import llmco2

    _refused(lambda: llmco2.serve("qwen2-0.5b", "h100", llmco2.make_workload(n=4, rate=1.0), **{name: value}), name)


@pytest.mark.parametrize("basis", [["direct"], {"direct": 1}])
def test_load_intensity_refuses_a_basis_that_is_no_text(basis: object) -> None:
    """A basis given as a list or a dict is refused naming ``basis``."""
    import llmco2

    _refused(lambda: llmco2.load_intensity("/nonexistent.csv", basis=basis), "basis")


def test_load_intensity_refuses_a_basis_that_is_an_array() -> None:
    """``load_intensity(..., basis=np.array([]))`` was a ValueError (the truth value of an array)."""
    import numpy as np

    import llmco2

    _refused(lambda: llmco2.load_intensity("/nonexistent.csv", basis=np.array([])), "basis")


@pytest.mark.parametrize("field", ["model", "checkpoint", "intensity"])
def test_a_name_too_long_for_a_path_is_refused(field: str) -> None:
    """A model, checkpoint or intensity source of 100,000 characters was an OSError (file name too
    long) from the check whether it names a file."""
    import llmco2

    long = "x" * 100_000
    if field == "intensity":
        _refused(lambda: llmco2.load_intensity(long), field)
        return
    args = {"model": long} if field == "model" else {"model": "qwen2-0.5b", "checkpoint": long}
    _refused(lambda: llmco2.predict(gpu="h100", prompt_tokens=64, generated_tokens=4, **args), field)


@pytest.mark.parametrize(("changes", "field"), [
    ({"requests": ["r.csv"]}, "requests"), ({"requests": b"r.csv"}, "requests"), ({"requests": "x" * 100_000}, "requests"),
    ({"out": 4}, "out"), ({"out": "/tmp/" + "x" * 1000 + ".csv"}, "out"), ({"options": "fixed"}, "options"),
    ({"assumptions": True}, "assumptions"), ({"cluster": 10**30}, "cluster"), ({"on_error": ["raise"]}, "on_error")])
def test_file_job_fields_of_another_type_are_refused(changes: dict, field: str, tmp_path: Path) -> None:
    """A FileJob with a list as its requests, a number as out, text as its options or a name too
    long for a path was a TypeError, AttributeError or OSError when predicted."""
    import llmco2

    requests = tmp_path / "r.csv"
    requests.write_text(REQUESTS)
    args = {"requests": str(requests), "out": str(tmp_path / "o.csv"), **changes}
    _refused(lambda: llmco2.predict_file(llmco2.FileJob(**args)), field)
    assert not (tmp_path / "o.csv").exists()


def test_a_nul_byte_in_a_path_is_refused_in_one_line() -> None:
    """A file name holding a NUL byte (requests, out, checkpoint) is InvalidInputError naming the
    argument, where pathlib raised ValueError('embedded null byte')."""
    import llmco2
    from llmco2.api.files import FileJob

    with pytest.raises(InvalidInputError, match="NUL byte"):
        llmco2.predict_file(FileJob(requests="r\x00.csv", out="o.csv"))
    with pytest.raises(InvalidInputError, match="NUL byte"):
        llmco2.predict("llama3.1-8b", "h100", prompt_tokens=10, generated_tokens=10, checkpoint="a\x00b")


def test_a_time_or_duration_column_is_no_count_but_passes_through_as_an_extra(tmp_path: Path) -> None:
    """predict_frame refuses a timedelta or timestamp where a count or id is read (a 5 s duration
    was read as 5,000,000 tokens), and keeps such a column with its type when it is an extra."""
    import pandas as pd

    import llmco2

    base = {"model": ["llama3.1-8b"], "gpu": ["h100"], "batch_size": [1], "prompt_tokens": [100], "generated_tokens": [50]}
    with pytest.raises(InvalidInputError, match="a time or a duration") as info:
        llmco2.predict_frame(pd.DataFrame({**base, "generated_tokens": [pd.Timedelta(seconds=5)]}))
    assert info.value.field == "generated_tokens"
    out = llmco2.predict_frame(pd.DataFrame({**base, "waited": [pd.Timedelta(seconds=3)]}))
    assert str(out["waited"].dtype).startswith("timedelta64") and out["total_j"].iloc[0] > 0


# -- every refusal of a request file's content names the flag, the file and the line the same way --
@pytest.mark.parametrize("row", ["llama3.1-8b,h100,1,100,abc", "llama3.1-8b,h100,1,100", "llama3.1-8b,nogpu,1,100,10"])
def test_request_file_refusals_share_one_prefix(row: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "r.csv"
    src.write_text(REQUESTS.splitlines()[0] + "\n" + row + "\n")
    code, _, err = run_cli(["predict", "--requests", str(src), "--out", str(tmp_path / "o.csv")], capsys)
    _one_line_error(code, err)
    assert err.startswith(f"llmco2: error: --requests: {src}, line 2: "), err
