"""Importers of public measurements into the canonical energy table.

Tests on the real files use the ``shared_data`` fixture (skipped when the folder is absent);
edge cases use small hand-written files in ``tmp_path``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmco2.data.importers import IMPORTERS, ImportResult, detect_format, import_all, import_file
from llmco2.data.importers.base import gpu_id, model_id
from llmco2.data.importers.tokenpowerbench import engine_for, parse_config
from llmco2.data.schema import COLUMN_NAMES, validate, write_table
from llmco2.errors import InvalidInputError
from llmco2.specs import get_model, gpu_catalog, model_catalog
from llmco2.specs.engines import engine_ids

ZERO = "energy_j == 0 (recording failure)"


def check_common(result: ImportResult, fmt: str, path: Path) -> pd.DataFrame:
    """What every import result must satisfy."""
    t = result.table
    assert result.source == fmt and result.path == path
    assert list(t.columns) == list(COLUMN_NAMES)
    assert (t["source"] == fmt).all() and (t["source_file"] == path.name).all()
    validate(t, on_error="raise")
    assert set(t["device"]) <= set(gpu_catalog().ids) and set(t["model"]) <= set(model_catalog().ids)
    assert not t.duplicated(["source_file", "source_row", "phase"]).any()
    for col in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size", "num_experts"):
        assert t[col].notna().all(), col
    for model, kv in t.groupby("model")["num_kv_heads"].unique().items():
        assert list(kv) == [get_model(model).num_kv_heads]
    flags = t["flag"].dropna().str.split(";").explode()
    assert flags.value_counts().to_dict() == result.flagged
    assert "\n" not in result.summary()
    return t


def raw_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# -- real files -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, rows, zeros", [("train_trace.csv", 31_952, 11), ("train_uniform.csv", 31_857, 16)])
def test_co2meter_real(shared_data, name, rows, zeros) -> None:
    path = shared_data / "co2meter" / name
    r = import_file("co2meter", path)
    t = check_common(r, "co2meter", path)
    assert r.rows_read == rows == len(raw_lines(path))
    assert r.dropped == {ZERO: zeros}
    assert len(t) == rows - zeros and (t["energy_j"] > 0).all()
    assert set(t["device"]) == {"jetson-orin", "rk3588-npu"}
    assert set(t["model"]) == {"tinyllama-1.1b", "qwen1.5-0.5b", "qwen2-1.5b", "internlm2-1.8b"}
    kv = t.groupby("model")["num_kv_heads"].first()
    assert kv["tinyllama-1.1b"] == 4 and kv["qwen2-1.5b"] == 2 and kv["internlm2-1.8b"] == 8 and kv["qwen1.5-0.5b"] == 16
    assert (t.loc[t["model"] == "tinyllama-1.1b", "num_layers"] == 22).all()  # the file's 32 is an erratum
    assert r.flagged["file_num_layers_32_catalog_22"] == (t["model"] == "tinyllama-1.1b").sum()
    assert set(t["phase"]) == {"prefill", "decode"} and set(t["trace"]) == {"code", "conv"}
    assert (t["engine"] == "edge").all()
    assert (t.loc[t["phase"] == "prefill", "generated_tokens"] == 1).all()
    assert (t["level"] == "request").all() and (t["batch_size"] == 1).all() and (t["num_devices"] == 1).all()
    assert (t["weight_bits"] == 16).all() and (t["kv_bits"] == 16).all()
    # no header: the first data row is line 1, and source_row points at the line the values came from
    lines = raw_lines(path)
    for row in t.sample(20, random_state=0).itertuples():
        fields = lines[row.source_row - 1].split(",")
        assert float(fields[18]) == pytest.approx(row.energy_j) and float(fields[15]) == row.prompt_tokens
    assert t["source_row"].min() == 1


def test_argonne_real(shared_data) -> None:
    path = shared_data / "datacenter" / "argonne_llm_inference_bench.csv"
    r = import_file("argonne", path)
    t = check_common(r, "argonne", path)
    assert r.rows_read == 577
    assert all(reason.startswith("model not in catalog: ") for reason in r.dropped)
    assert r.rows_read - sum(r.dropped.values()) == len(t)
    assert set(t["device"]) == {"a100-40gb", "h100-sxm", "gaudi2"}
    # DeepSpeed-MII is DeepSpeed in the engine catalog; the 2024 vLLM is V0; Gaudi2 runs Optimum Habana
    assert set(t["engine"]) == {"vllm-v0", "tensorrt-llm", "deepspeed", "optimum-habana"}
    src = pd.read_csv(path)
    frameworks = src.set_index(np.arange(2, len(src) + 2)).loc[t["source_row"].astype(int), "framework"].str.lower().to_numpy()
    expected = {"vllm": "vllm-v0", "tensorrt-llm": "tensorrt-llm", "deepspeed": "deepspeed", "deepspeed-mii": "deepspeed"}
    want = [expected[f] for f in frameworks]
    want = ["optimum-habana" if d == "gaudi2" and e == "deepspeed" else e for d, e in zip(t["device"], want, strict=True)]
    assert list(t["engine"]) == want
    assert set(t["num_devices"]) == {1, 2, 4} and (t["tensor_parallel"] == t["num_devices"]).all()
    assert (t["phase"] == "total").all() and (t["level"] == "batch").all() and (t["measurement"] == "power_x_latency").all()
    assert (t["prompt_tokens"] == t["generated_tokens"]).all()
    idle = t["flag"].fillna("").str.contains("power_includes_idle_gpus")
    assert 100 < r.flagged["power_includes_idle_gpus"] == idle.sum()
    assert (t.loc[idle, "num_devices"] == 1).all()
    src = pd.read_csv(path)
    lines = src.set_index(np.arange(2, len(src) + 2))
    flagged_src = lines.loc[t.loc[idle, "source_row"].astype(int)]
    assert flagged_src["source"].str.startswith("943daf64").all() and (flagged_src["power_unit_in_file"] == "W").all()


def test_mlenergy_v2_real(shared_data) -> None:
    path = shared_data / "datacenter" / "mlenergy_v2_2024.csv"
    r = import_file("mlenergy_v2", path)
    t = check_common(r, "mlenergy_v2", path)
    assert r.rows_read == 356 and r.dropped["multimodal task (mllm_text_generation)"] == 42
    assert r.rows_read - sum(r.dropped.values()) == len(t)
    assert (t["level"] == "steady_state").all() and (t["phase"] == "total").all() and t["prompt_tokens"].isna().all()
    assert (t["engine"] == "vllm-v0").all() and set(t["device"]) == {"a100-40gb", "h100-sxm"}
    assert (t["num_devices"] == t["tensor_parallel"] * t["pipeline_parallel"]).all()
    # the '-pp1' model_dir rows are Mixtral-8x22B with PP 1
    src = pd.read_csv(path)
    pp1 = np.flatnonzero(src["model_dir"].str.endswith("-pp1").to_numpy()) + 2
    got = t.set_index("source_row").loc[pp1]
    assert len(got) == 2 and (got["model"] == "mixtral-8x22b").all() and (got["pipeline_parallel"] == 1).all()


def test_mlenergy_v3_real(shared_data) -> None:
    path = shared_data / "datacenter" / "mlenergy_v3_2025.csv"
    r = import_file("mlenergy_v3", path)
    t = check_common(r, "mlenergy_v3", path)
    assert r.rows_read == 405
    assert r.dropped["multimodal task (image-chat)"] == 92 and r.dropped["multimodal task (video-chat)"] == 39
    assert not any("Llama-4" in reason for reason in r.dropped)  # Scout and Maverick-FP8 resolve through the catalog
    llama4 = t[t["model"].str.startswith("llama4")]
    assert (llama4["model"] == "llama4-scout").sum() == 20 and (llama4["model"] == "llama4-maverick").sum() == 9
    assert (llama4.loc[llama4["model"] == "llama4-maverick", "weight_bits"] == 8).all()
    assert r.rows_read - sum(r.dropped.values()) == len(t)
    assert set(t["weight_bits"]) == {16, 8, 4}
    assert (t.loc[t["model"].str.startswith("gpt-oss"), "weight_bits"] == 4).all()
    assert (t["device"] == "h100-sxm").all() and (t["level"] == "steady_state").all()


def test_wilkins_real(shared_data) -> None:
    path = shared_data / "datacenter" / "wilkins_energy_inference.csv"
    r = import_file("wilkins", path)
    t = check_common(r, "wilkins", path)
    assert r.rows_read == 2773
    assert r.dropped == {"device not in catalog: Apple M1 Pro (not NVIDIA)": 291}
    assert (t["kv_cache"] == False).all()  # noqa: E712 (nullable boolean)
    assert (t["pipeline_parallel"] == t["num_devices"]).all() and (t["tensor_parallel"] == 1).all()
    assert set(t["device"]) == {"v100", "a100-40gb"} and (t["batch_size"] == 1).all() and (t["phase"] == "total").all()
    assert 0 < r.flagged["repeat_outlier"] < 50
    big = t[t["energy_j"] > 1e6]
    assert len(big) > 5 and big["flag"].isna().all()  # the long no-KV-cache runs are real, kept unflagged
    # quoted prompts span several lines: source_row is the line where the record starts
    lines = raw_lines(path)
    src_names = {"llama2-7b": "Llama-2 (7B)", "llama2-13b": "Llama-2 (13B)", "llama2-70b": "Llama-2 (70B)",
                 "falcon-7b": "Falcon (7B)", "falcon-40b": "Falcon (40B)", "mistral-7b": "Mistral (7B)",
                 "mixtral-8x7b": "Mixtral (8x7B)"}
    for row in t.itertuples():
        assert lines[row.source_row - 1].startswith(src_names[row.model] + ","), row.source_row
    assert t["source_row"].max() > r.rows_read + 1  # multi-line records exist


def test_delavande_real(shared_data) -> None:
    path = shared_data / "datacenter" / "delavande_prefill_decode_h100.csv"
    r = import_file("delavande", path)
    t = check_common(r, "delavande", path)
    assert r.rows_read == 100 and len(t) == 200 and r.dropped == {}
    assert t["phase"].value_counts().to_dict() == {"prefill": 100, "decode": 100}
    assert (t.loc[t["phase"] == "prefill", "generated_tokens"] == 1).all()
    assert (t["device"] == "h100-sxm").all() and (t["model"] == "llama3.1-8b").all() and (t["engine"] == "hf").all()
    over = (t["energy_j"] / t["latency_s"] > 700).to_numpy()
    assert r.flagged == {"power_exceeds_tdp": int(over.sum())}
    assert t.loc[t["phase"] == "prefill", "flag"].eq("power_exceeds_tdp").all()
    src = pd.read_csv(path)
    first = t.iloc[:2]
    assert list(first["source_row"]) == [2, 2] and list(first["phase"]) == ["prefill", "decode"]
    assert first["energy_j"].iloc[1] == pytest.approx(src["energy_gpu_decode_J"].iloc[0])
    assert first["generated_tokens"].iloc[1] == src["response_tokens"].iloc[0]


@pytest.mark.parametrize("variant, dropped", [("eager", 27), ("noeager", 21)])
def test_tokenpowerbench_real(shared_data, variant, dropped) -> None:
    path = shared_data / "datacenter" / f"tokenpowerbench_qwen3_{variant}.csv"
    r = import_file("tokenpowerbench", path)
    t = check_common(r, "tokenpowerbench", path)
    src = pd.read_csv(path)
    assert r.rows_read == len(src)
    assert r.dropped == {"model not in catalog: Qwen3.5-27B": dropped}
    assert (t["model"] == "qwen3-14b").all() and r.flagged["device_assumed"] == len(t)
    assert (t["device"] == "h100-sxm").all() and (t["level"] == "batch").all()
    assert (t["engine"] == {"eager": "vllm-eager", "noeager": "vllm"}[variant]).all()
    # per batch: energy = mJ/token x batch tokens
    mj = src.set_index(np.arange(2, len(src) + 2)).loc[t["source_row"].astype(int), "mj_per_token"].to_numpy()
    per_token = (t["energy_j"] / (t["batch_size"] * t["generated_tokens"])).to_numpy(float)
    assert per_token == pytest.approx(mj / 1000)
    assert set(t["num_devices"]) == {1, 2} and set(t["batch_size"]) == {128, 256}
    assert (t["generated_tokens"] < 2000).all()


def test_splitwise_real(shared_data) -> None:
    path = shared_data / "datacenter" / "splitwise_perf_model.csv"
    r = import_file("splitwise", path)
    t = check_common(r, "splitwise", path)
    src = pd.read_csv(path)
    assert r.rows_read == len(src) == 1260 and len(t) == 2 * 1260
    assert t["energy_j"].isna().all() and (t["measurement"] == "latency_only").all()
    prefill = t[t["phase"] == "prefill"]
    assert prefill["latency_s"].to_numpy(float) == pytest.approx(src["prompt_time"].to_numpy() / 1000)  # ms in the file
    assert (prefill["generated_tokens"] == 1).all()
    assert r.flagged["power_capped"] == 2 * (src["hardware"] == "h100-80gb-pcap").sum()


# What a data folder holds besides data files, and why it is not imported. A folder that states its
# contents this way (README/DATA.md, scripts, script results, sweep configurations, failure logs)
# imports every other .csv file and refuses the rest with a reason.
NOT_DATA = (
    (lambda rel: rel.startswith("azure/"), "energy"),
    (lambda rel: rel.endswith(".md"), "documentation"),
    (lambda rel: rel.endswith(".py"), "script"),
    (lambda rel: rel.endswith(".json"), "JSON"),
    (lambda rel: rel.endswith(".txt"), "notes"),
    (lambda rel: rel.endswith(".failed.csv"), "failure log"),
    (lambda rel: rel.rsplit("/", 1)[-1].startswith("configs"), "configurations"),
    (lambda rel: rel.startswith("collected/raw/"), "converted from"),
)


def expected_refusal(rel: str) -> str | None:
    """The word the refusal reason of a file must contain, or None for a data file to import."""
    for matches, word in NOT_DATA:
        if matches(rel):
            return word
    return None


def test_import_all_real(shared_data) -> None:
    start = time.perf_counter()
    table, results, refused = import_all(shared_data)
    seconds = time.perf_counter() - start
    print(f"import_all: {len(table):,} rows from {len(results)} files in {seconds:.2f} s")
    validate(table, on_error="raise")
    assert len(table) == sum(len(r.table) for r in results)
    files = {p.relative_to(shared_data).as_posix() for p in shared_data.rglob("*") if p.is_file() and not p.name.startswith(".")}
    imported = {r.path.relative_to(shared_data).as_posix() for r in results}
    reasons = {p.relative_to(shared_data).as_posix(): why for p, why in refused}
    assert not imported & set(reasons) and imported | set(reasons) >= files  # every file once: imported or refused
    for rel in sorted(files):
        word = expected_refusal(rel)
        if word is None:
            assert rel in imported, f"{rel} is data but was refused: {reasons.get(rel)}"
        else:
            assert rel in reasons and word in reasons[rel], (rel, reasons.get(rel))
    assert {r.source for r in results} >= set(IMPORTERS) - {"canonical", "h100_hf"}
    if (shared_data / "h100_hf" / "h100_hf_train.csv").is_file():
        assert "h100_hf" in {r.source for r in results}
    assert {r.path.name for r in results} >= {"train_trace.csv", "train_uniform.csv", "argonne_llm_inference_bench.csv"}
    assert set(table["device"]) <= set(gpu_catalog().ids) and set(table["model"]) <= set(model_catalog().ids)
    assert set(table["engine"].dropna()) <= set(engine_ids()) and table["engine"].notna().all()
    assert not table.duplicated(["source", "source_file", "source_row", "phase"]).any()


def test_h100_hf_real(shared_data) -> None:
    path = shared_data / "h100_hf" / "h100_hf_train.csv"
    if not path.is_file():
        pytest.skip(f"{path} is not in this copy of the shared data")
    r = import_file("h100_hf", path)
    t = check_common(r, "h100_hf", path)
    src = pd.read_csv(path)
    assert r.rows_read == len(src) == len(t) and r.dropped == {}
    assert (t["engine"] == "hf").all() and (t["device"] == "h100-sxm").all()
    quantised = t["flag"].str.contains("counter_quantised").to_numpy(dtype=bool)
    prefill = (t["phase"] == "prefill").to_numpy()
    zero_repeat = (t["energy_std_j"] / t["energy_j"] > 1).to_numpy(dtype=bool)
    assert zero_repeat.sum() == 25 and (quantised[zero_repeat]).all()  # the README's 25 prefill rows with a 0 J repeat
    assert (quantised == prefill).all()  # every single-pass prefill row, no decode row
    assert t["flag"].str.contains("random_weights").all()  # the harness's own flags are kept
    assert r.flagged == {"counter_quantised": int(prefill.sum()), "random_weights": len(t)}


def test_device_and_model_names_resolve_through_the_catalog() -> None:
    for name, gpu in [("Nvidia GH200 GPU", "gh200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("B200", "b200"),
                      ("Nvidia H100 GPU", "h100-sxm"), ("Habana Gaudi2", "gaudi2"), ("V100-16GB (Palmetto, Intel host)", "v100"),
                      ("nvidia b200 gpu", "b200"), ("NVIDIA H200 GPU", "h200")]:
        assert gpu_id(name) == gpu, name
    for name in ("Apple M1 Pro (not NVIDIA)", "h100-80gb", "Jetson-Nano", "TPU v5e"):
        assert gpu_id(name) is None, name  # h100-80gb is close to a100-80gb but not the same GPU
    assert gpu_id("Nvidia A100 GPU", {"Nvidia A100 GPU": "a100-40gb"}) == "a100-40gb"
    for name, model in [("Qwen3-14B", "qwen3-14b"), ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"),
                        ("mistralai/Mistral-7B-v0.1", "mistral-7b"), ("Mistral 7B", "mistral-7b")]:
        assert model_id(name) == model, name
    for name in ("Qwen3.5-27B", "Deci/DeciLM-7B", "Qwen9-1T"):
        assert model_id(name) is None, name


def test_tokenpowerbench_engine_from_file_name() -> None:
    assert engine_for(Path("tokenpowerbench_qwen3_eager.csv")) == "vllm-eager"
    assert engine_for(Path("tokenpowerbench_qwen3_noeager.csv")) == "vllm"
    assert engine_for(Path("tokenpowerbench_qwen3.csv")) == "vllm"


# -- hand-written edge cases ----------------------------------------------------------------------
ARCH = {
    "tinyllama": "silu,2048,5632,32,32,32000",  # the file format's known 32-layer erratum
    "qwen2-1.5b": "silu,1536,8960,28,12,151936",
    "gpt5": "silu,4096,16384,48,32,100000",
}


def co2_line(model="qwen2-1.5b", device="Nvidia-Orin", prefill=True, prompt=100, gen=None, latency="0.5", energy="2.5",
             code=True) -> str:
    gen = 1 if prefill and gen is None else (gen or 40)
    trace = "1,0" if code else "0,1"
    phase = "1,0" if prefill else "0,1"
    return f"{trace},{phase},{device},1,{model},16,{ARCH[model]},1,{prompt},{gen},{latency},{energy}"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_co2meter_small_file(tmp_path) -> None:
    path = write(tmp_path / "train_trace.csv", [
        co2_line(), co2_line(prefill=False, gen=40, energy="30.0", code=False), co2_line(energy="0"),
        co2_line(model="tinyllama"), co2_line(model="gpt5"), co2_line(device="Jetson-Nano"),
    ])
    r = import_file("co2meter", path)
    t = check_common(r, "co2meter", path)
    assert r.rows_read == 6
    assert r.dropped == {ZERO: 1, "model not in catalog: gpt5": 1, "device not in catalog: Jetson-Nano": 1}
    assert list(t["source_row"]) == [1, 2, 4]
    assert list(t["phase"]) == ["prefill", "decode", "prefill"] and list(t["trace"]) == ["code", "conv", "code"]
    assert list(t["num_kv_heads"]) == [2, 2, 4]
    assert t["num_layers"].iloc[2] == 22 and t["flag"].iloc[2] == "file_num_layers_32_catalog_22"
    assert r.flagged == {"file_num_layers_32_catalog_22": 1}
    assert "6 rows read, 3 imported" in r.summary()


def test_co2meter_blank_lines_keep_line_numbers(tmp_path) -> None:
    path = write(tmp_path / "x.csv", [co2_line(), "", co2_line(energy="3.5")])
    t = import_file("co2meter", path).table
    assert list(t["source_row"]) == [1, 3] and list(t["energy_j"]) == [2.5, 3.5]


def test_co2meter_wrong_column_count(tmp_path) -> None:
    path = write(tmp_path / "bad.csv", [co2_line(), co2_line() + ",extra"])
    with pytest.raises(InvalidInputError, match=r"bad\.csv, line 2: 20 fields, expected 19") as err:
        import_file("co2meter", path)
    assert "\n" not in str(err.value)


def test_co2meter_non_numeric_energy(tmp_path) -> None:
    path = write(tmp_path / "bad.csv", [co2_line(), co2_line(), co2_line(energy="n/a")])
    with pytest.raises(InvalidInputError, match=r"bad\.csv, line 3: energy_j: 'n/a' is not a number"):
        import_file("co2meter", path)


def test_co2meter_architecture_must_match_catalog(tmp_path) -> None:
    wrong = co2_line().replace(",1536,8960,", ",4096,8960,")
    path = write(tmp_path / "bad.csv", [co2_line(), wrong])
    with pytest.raises(InvalidInputError, match=r"line 2: hidden_size: 4096 for qwen2-1.5b but the catalog .* has 1536"):
        import_file("co2meter", path)


def test_co2meter_prefill_generates_one_token(tmp_path) -> None:
    path = write(tmp_path / "bad.csv", [co2_line(gen=7)])
    with pytest.raises(InvalidInputError, match=r"line 1: generated_tokens: a prefill row must generate exactly 1 token"):
        import_file("co2meter", path)


def test_co2meter_phase_must_be_one_hot(tmp_path) -> None:
    path = write(tmp_path / "bad.csv", [co2_line().replace("1,0,1,0,", "1,0,1,1,", 1)])
    with pytest.raises(InvalidInputError, match=r"line 1: is_prefill,is_decode: .* one-hot phase"):
        import_file("co2meter", path)


ARGONNE_HEADER = ("source,hardware,num_devices,framework,model,input_len,output_len,batch_size,latency_s,"
                  "throughput_tok_s_in_plus_out,avg_power_W,power_unit_in_file,energy_J_est,energy_per_output_token_J")


def argonne_line(commit="1411ecc8 (latest)", hw="Nvidia H100 GPU", n=1, fw="vLLM", model="meta-llama/Meta-Llama-3-8B",
                 length=256, batch=8, latency=2.0, power=400.0, unit="mW", energy=None) -> str:
    energy = f"{power * latency:.2f}" if energy is None else energy
    return f"\"{commit}\",{hw},{n},{fw},{model},{length},{length},{batch},{latency},1000,{power},{unit},{energy},0.5"


def test_argonne_small_file(tmp_path) -> None:
    path = write(tmp_path / "argonne.csv", [
        ARGONNE_HEADER,
        argonne_line(),
        argonne_line(commit="943daf64 (superseded)", unit="W", power=640.0),
        argonne_line(commit="943daf64 (superseded)", unit="W", n=2, power=900.0, fw="TensorRT-LLM"),
        argonne_line(model="Deci/DeciLM-7B"),
        argonne_line(hw="Habana Gaudi2", fw="Deepspeed", model="mistralai/Mistral-7B-v0.1", power=700.0, unit="W"),
    ])
    r = import_file("argonne", path)
    t = check_common(r, "argonne", path)
    assert r.dropped == {"model not in catalog: Deci/DeciLM-7B": 1}
    assert list(t["source_row"]) == [2, 3, 4, 6]
    assert list(t["flag"].fillna("")) == ["", "power_includes_idle_gpus", "", ""]
    # the benchmark's 2024 vLLM is the V0 engine; on Gaudi2 DeepSpeed runs through Optimum Habana with HPU graphs
    assert list(t["engine"]) == ["vllm-v0", "vllm-v0", "tensorrt-llm", "optimum-habana"]
    assert list(t["device"]) == ["h100-sxm", "h100-sxm", "h100-sxm", "gaudi2"]
    assert t["energy_j"].iloc[0] == pytest.approx(800.0)


def test_argonne_device_names_resolve_through_the_catalog(tmp_path) -> None:
    path = write(tmp_path / "argonne.csv", [
        ARGONNE_HEADER,
        argonne_line(hw="Nvidia GH200 GPU"),
        argonne_line(hw="Nvidia A100 GPU"),
        argonne_line(hw="Nvidia B200 GPU", fw="Deepspeed-MII"),
        argonne_line(hw="Cerebras WSE-3"),
        argonne_line(hw="Cerebras WSE-3", fw="SomeNewEngine"),
    ])
    r = import_file("argonne", path)
    t = check_common(r, "argonne", path)
    assert list(t["device"]) == ["gh200", "a100-40gb", "b200"]  # the gh200 rows used to be dropped
    assert list(t["engine"]) == ["vllm-v0", "vllm-v0", "deepspeed"]
    assert r.dropped == {"device not in catalog: Cerebras WSE-3": 2}


def test_unknown_engine_is_kept_as_unknown(tmp_path) -> None:
    path = write(tmp_path / "argonne.csv", [ARGONNE_HEADER, argonne_line(fw="SomeNewEngine")])
    assert list(import_file("argonne", path).table["engine"]) == ["unknown"]


def test_argonne_missing_column(tmp_path) -> None:
    header = ARGONNE_HEADER.replace(",energy_J_est", "")
    path = write(tmp_path / "argonne.csv", [header, argonne_line().rsplit(",", 2)[0] + ",0.5"])
    with pytest.raises(InvalidInputError, match=r"argonne\.csv, line 1: missing column\(s\) energy_J_est"):
        import_file("argonne", path)


def test_argonne_non_numeric_energy_and_unconverted_power(tmp_path) -> None:
    path = write(tmp_path / "a.csv", [ARGONNE_HEADER, argonne_line(), argonne_line(energy="lots")])
    with pytest.raises(InvalidInputError, match=r"a\.csv, line 3: energy_J_est: 'lots' is not a number"):
        import_file("argonne", path)
    path = write(tmp_path / "b.csv", [ARGONNE_HEADER, argonne_line(power=433000.0)])  # left in mW
    with pytest.raises(InvalidInputError, match=r"b\.csv, line 2: avg_power_W: .* not a plausible power in watts"):
        import_file("argonne", path)


WILKINS_HEADER = ("model,system,gpu,num_gpus,input_tokens,max_new_tokens,runtime_s,gpu_energy_J,cpu_energy_J,prompt_prefix,"
                  "iteration,phase_tag,source_files")


def test_wilkins_multiline_records_and_drops(tmp_path) -> None:
    a100 = '"A100-40GB (Some cluster, AMD host)"'
    path = write(tmp_path / "wilkins.csv", [
        WILKINS_HEADER,
        f'Llama-2 (7B),sys,{a100},1,12,64,5.0,900.0,40.0,"Write a poem\nabout the sea\nplease",0,start-inference-A-0,f.csv',
        f"Llama-2 (7B),sys,{a100},1,12,64,5.1,910.0,40.0,Short prompt,1,start-inference-A-1,f.csv",
        'Llama-2 (7B),M1,"Apple M1 Pro (not NVIDIA)",1,12,64,9.0,30.0,40.0,Short prompt,0,inference-A-0,f.csv',
        f"Llama-2 (7B),sys,{a100},1,12,64,5.0,0.0,40.0,Short prompt,2,start-inference-A-2,f.csv",
        f"GPT-9 (1T),sys,{a100},4,12,64,5.0,900.0,40.0,Short prompt,0,start-inference-A-0,f.csv",
    ])
    r = import_file("wilkins", path)
    t = check_common(r, "wilkins", path)
    assert r.rows_read == 5
    assert r.dropped == {"device not in catalog: Apple M1 Pro (not NVIDIA)": 1, "energy_j == 0": 1,
                         "model not in catalog: GPT-9 (1T)": 1}
    assert list(t["source_row"]) == [2, 5]  # the first record spans lines 2-4
    assert (t["kv_cache"] == False).all() and list(t["generated_tokens"]) == [64, 64]  # noqa: E712


def test_wilkins_repeat_outlier_flagged_not_dropped(tmp_path) -> None:
    rows = [WILKINS_HEADER]
    for i, energy in enumerate([2500.0, 800.0, 810.0, 790.0]):  # a warm-up first iteration
        rows.append(f'Mistral (7B),sys,"V100-16GB (host)",1,30,32,{4.0 if i else 12.0},{energy},10,Hi,{i},start-inference-B-{i},f.csv')
    r = import_file("wilkins", write(tmp_path / "w.csv", rows))
    assert len(r.table) == 4 and r.flagged == {"repeat_outlier": 1}
    assert r.table["flag"].iloc[0] == "repeat_outlier" and r.table["device"].iloc[0] == "v100"


DELAVANDE_HEADER = ("idx,prompt_tokens,response_tokens,duration_prefill_s,duration_generate_s,duration_decode_s,"
                    "energy_prefill_cpu_J,energy_prefill_gpu_J,energy_generate_cpu_J,energy_generate_gpu_J,"
                    "energy_cpu_decode_J,energy_gpu_decode_J")


def test_delavande_small_file(tmp_path) -> None:
    path = write(tmp_path / "d.csv", [
        DELAVANDE_HEADER,
        "0,500,30,0.2,1.0,0.8,10,200.0,40,600.0,30,400.0",   # prefill 1000 W (flagged), decode 500 W
        "1,800,20,0.3,0.9,0.6,10,150.0,40,150.0,30,0.0",     # decode energy 0: dropped
        "2,800,1,0.3,0.3,0.0,10,150.0,40,150.0,30,0.0",      # one-token response: no decode row
    ])
    r = import_file("delavande", path)
    t = check_common(r, "delavande", path)
    assert list(zip(t["source_row"], t["phase"], strict=True)) == [(2, "prefill"), (2, "decode"), (3, "prefill"), (4, "prefill")]
    assert r.dropped == {"energy_j == 0": 1, "decode row of a one-token response (no decode phase)": 1}
    assert r.flagged == {"power_exceeds_tdp": 1} and t["flag"].iloc[0] == "power_exceeds_tdp"
    assert list(t["generated_tokens"]) == [1, 30, 1, 1]


def test_tokenpowerbench_config_and_errors(tmp_path) -> None:
    assert parse_config("Single GPU") == (1, 1, 1)
    assert parse_config("TP2 × PP2") == (2, 2, 1) and parse_config("PP2 × DP2") == (1, 2, 2) and parse_config("DP4") == (1, 1, 4)
    assert parse_config("TP2 × TP2") is None and parse_config("EP4") is None
    header = "model_name,workload,config,duration,throughput,mj_per_token,gpu_avg_power"
    ok = write(tmp_path / "t.csv", [header, "Qwen3-14B,bs64_out100,TP2,10.0,5120.0,200.0,1024.0",
                                    "Qwen9-1T,bs64_out100,TP2,10.0,5120.0,200.0,1024.0"])
    r = import_file("tokenpowerbench", ok)
    t = check_common(r, "tokenpowerbench", ok)
    assert r.dropped == {"model not in catalog: Qwen9-1T": 1}
    assert t["generated_tokens"].iloc[0] == pytest.approx(5120 * 10 / 1024)  # 50 tokens per request
    assert t["energy_j"].iloc[0] == pytest.approx(0.2 * 64 * 50) and t["num_devices"].iloc[0] == 2
    bad = write(tmp_path / "bad.csv", [header, "Qwen3-14B,bs64_out100,EP2,10.0,5120.0,200.0,1024.0"])
    with pytest.raises(InvalidInputError, match=r"bad\.csv, line 2: config: 'EP2' is not a parallel config"):
        import_file("tokenpowerbench", bad)


def test_canonical_round_trip(tmp_path) -> None:
    src = write(tmp_path / "train_uniform.csv", [co2_line(), co2_line(model="tinyllama", prefill=False, gen=12)])
    first = import_file("co2meter", src)
    for suffix in (".parquet", ".csv"):
        out = write_table(first.table, tmp_path / f"table{suffix}")
        again = import_file("canonical", out)
        assert again.source == "canonical" and again.rows_read == 2 and again.dropped == {}
        assert again.flagged == first.flagged
        pd.testing.assert_frame_equal(again.table, first.table)


def test_import_file_errors(tmp_path) -> None:
    with pytest.raises(InvalidInputError, match="unknown format 'nope'; formats: co2meter, argonne, .*canonical"):
        import_file("nope", tmp_path / "x.csv")
    with pytest.raises(InvalidInputError, match="no such file"):
        import_file("argonne", tmp_path / "missing.csv")
    empty = write(tmp_path / "empty.csv", [])
    with pytest.raises(InvalidInputError, match="empty file"):
        import_file("argonne", empty)
    with pytest.raises(InvalidInputError, match="no data rows"):
        import_file("co2meter", empty)
    with pytest.raises(InvalidInputError, match="no data rows"):
        import_file("argonne", write(tmp_path / "header_only.csv", [ARGONNE_HEADER]))


def test_import_all_detects_and_refuses(tmp_path) -> None:
    (tmp_path / "co2meter").mkdir()
    (tmp_path / "datacenter").mkdir()
    (tmp_path / "azure").mkdir()
    write(tmp_path / "co2meter" / "train_trace.csv", [co2_line(), co2_line(energy="0")])
    write(tmp_path / "datacenter" / "argonne_llm_inference_bench.csv", [ARGONNE_HEADER, argonne_line()])
    write(tmp_path / "datacenter" / "notes.txt", ["hello"])
    write(tmp_path / "datacenter" / "mystery.csv", ["a,b", "1,2"])
    (tmp_path / "measured").mkdir()
    write_table(import_file("co2meter", write(tmp_path / "x.csv", [co2_line()])).table, tmp_path / "measured" / "h100.csv")
    (tmp_path / "x.csv").unlink()
    write(tmp_path / "measured" / "h100.failed.csv", ["key,reason,time"])
    (tmp_path / "h100_hf").mkdir()
    write(tmp_path / "h100_hf" / "configs.csv", ["model,gpu"])
    write(tmp_path / "h100_hf" / "h100_hf_train.failed.csv", ["key,reason,time"])
    write(tmp_path / "h100_hf" / "crosscheck.py", ["print(1)"])
    write(tmp_path / "azure" / "AzureLLMInferenceTrace_code.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens"])
    table, results, refused = import_all(tmp_path)
    assert sorted(r.source for r in results) == ["argonne", "canonical", "co2meter"]  # canonical: found by its header
    assert len(table) == 3 and set(table["source"]) == {"co2meter", "argonne"}
    reasons = {p.name: why for p, why in refused}
    assert reasons["mystery.csv"] == "no importer recognises this file name" and "Azure" in reasons["AzureLLMInferenceTrace_code.csv"]
    assert "notes" in reasons["notes.txt"] and "configurations" in reasons["configs.csv"] and "script" in reasons["crosscheck.py"]
    assert "failure log" in reasons["h100_hf_train.failed.csv"]
    assert detect_format(tmp_path / "datacenter" / "wilkins_energy_inference.csv", tmp_path) == ("wilkins", "")
    # a recognised but malformed file is an error, not a silent refusal
    write(tmp_path / "datacenter" / "delavande_prefill_decode_h100.csv", ["idx,prompt_tokens", "0,12"])
    with pytest.raises(InvalidInputError, match="delavande_prefill_decode_h100.csv, line 1: missing column"):
        import_all(tmp_path)
    with pytest.raises(InvalidInputError, match="is not a folder"):
        import_all(tmp_path / "nothing")
