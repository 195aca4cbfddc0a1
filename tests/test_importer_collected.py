"""The ``collected`` importer (``shared/data/collected/*.csv``) and the parallelism columns kept from
ML.ENERGY v3.

Hand-written snippets in ``tmp_path`` pin the mappings (GPU, engine, precision, flags); one test per
real file (skipped without the shared data) pins row counts and drop reasons. GPU catalog ids that
another change adds (``a100-pcie-40gb``, ``v100-pcie-32gb``, ...) may be absent: the expectations
follow the catalog, so the tests hold either way.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmco2.data.importers import IMPORTERS, detect_format, import_all, import_file
from llmco2.data.importers import collected as col
from llmco2.data.schema import COLUMN_NAMES, QUANTISATIONS, validate
from llmco2.errors import InvalidInputError
from llmco2.specs import gpu_catalog, model_catalog
from tests.helpers import run_cli

HEADER = list(col.REQUIRED)
VLLM = "vLLM 0.8.4 (V0 engine, enforce_eager)"
HF = "HF transformers (PyTorch generate, accelerate DP)"
FASTCHAT = "HF transformers via FastChat (PyTorch 2.0.1)"
ECE_NOTE = ("raw_model=CodeLlama-7b-Instruct-hf; vLLM max_num_seqs=64 -> batch_size=min(mns,n)=64, waves=2; batch_size is a "
            "cap: actual concurrency may be lower if the KV cache is short; NVML energy counter (Zeus-derived EnergyMonitor), "
            "GPU 0 only")
HB_NOTE = ("config=batching_16; HF transformers + accelerate data parallel over 4 GPUs (NO_SHARD, one full replica per GPU); "
           "run totals: GPU energy 1000 J (all 4 GPUs; mean of the 4 per-process CodeCarbon readings)")
V1_NOTE = ("ML.ENERGY leaderboard v1 (2023); each row is the MEAN over ~3000 ShareGPT first-turn prompts run one at a time "
           "(batch 1); energy_j = mean GPU energy per response (Zeus, NVML); prompt_tokens UNKNOWN")


def row(**kw: object) -> dict[str, object]:
    """One collected row: CodeLlama-7B bf16 on an A100-SXM4-80GB under vLLM eager, 200 W x 10 s."""
    out: dict[str, object] = {
        "source_repo": "someone/repo", "source_path": "data/x.csv", "source_commit": "abc", "model_hf": "codellama/CodeLlama-7b-Instruct-hf",
        "gpu": "A100-SXM4-80GB", "num_gpus": 1, "tensor_parallel": 1, "engine": VLLM, "dtype": "bf16 (vLLM dtype=auto)",
        "batch_size": 64, "prompt_tokens": 133, "generated_tokens": 512, "phase": "total", "energy_j": 2000.0, "latency_s": 10.0,
        "avg_power_w": 200.0, "notes": ECE_NOTE,
    }
    out.update(kw)
    return out


def write(tmp_path: Path, rows: list[dict[str, object]], name: str = "snippet.csv") -> Path:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HEADER, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path = tmp_path / name
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


def flags_of(table: pd.DataFrame, i: int) -> set[str]:
    value = table["flag"].iloc[i]
    return set() if pd.isna(value) else set(str(value).split(";"))


def expected_device(name: str) -> tuple[str | None, bool]:
    """The catalog id a collected GPU name should get now, and whether it is a stand-in."""
    ids = set(gpu_catalog().ids)
    candidates = col.DEVICES[name]
    found = next((c for c in candidates if c in ids), None)
    return found, found is not None and found != candidates[0]


# -- mappings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(col.DEVICES))
def test_gpu_names_map_to_catalog_ids_or_are_dropped_with_the_reason(tmp_path: Path, name: str) -> None:
    r = import_file("collected", write(tmp_path, [row(gpu=name)]))
    device, proxy = expected_device(name)
    if device is None:
        assert len(r.table) == 0
        assert list(r.dropped) == [f"device not in catalog: {name} (the catalog has none of {', '.join(col.DEVICES[name])})"]
        return
    assert list(r.table["device"]) == [device]
    flags = flags_of(r.table, 0)
    assert (col.DEVICE_PROXY in flags) == proxy
    assert (col.VARIANT_UNSTATED in flags) == ("variant unstated" in name)


def test_gpu_decisions() -> None:
    # energy_code_eval's A100 is the SXM4 80 GB part; the ML.ENERGY v1 A100 is the 80 GB PCIe part
    # (a100-80gb stands in while the catalog has no PCIe 80 GB entry); its V100 is a PCIe 32 GB board
    assert col.DEVICES["A100-SXM4-80GB"] == ("a100-80gb",) and col.DEVICES["A40"] == ("a40",)
    assert col.DEVICES["A100-PCIE-40GB"] == ("a100-pcie-40gb",)
    assert col.DEVICES["A100 (variant unstated)"][-1] == "a100-80gb"
    assert all("v100" in c and "32gb" in c for c in col.DEVICES["V100-32GB (variant unstated)"])


@pytest.mark.parametrize("name, engine, flags", [
    ("vLLM 0.8.4 (V0 engine, enforce_eager)", "vllm-eager", ()),
    ("vLLM 0.8.4 (V0 engine, enforce_eager, multi-step scheduler)", "vllm-eager", (col.MULTI_STEP,)),
    ("vLLM 0.8.4 (V0 engine, enforce_eager, chunked prefill)", "vllm-eager", (col.CHUNKED_PREFILL,)),
    ("vLLM 0.6.3", "vllm-v0", ()),
    ("vLLM 0.10.1", "vllm", ()),
    (HF, "hf", ()),
    (FASTCHAT, "hf", ()),
])
def test_engine_strings(name: str, engine: str, flags: tuple[str, ...]) -> None:
    assert col.engine_for(name) == (engine, flags)


def test_unknown_engine_raises_with_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, [row(), row(engine="TensorRT-LLM 0.9")])
    with pytest.raises(InvalidInputError, match=r"line 3: engine: 'TensorRT-LLM 0.9'"):
        import_file("collected", path)


@pytest.mark.parametrize("dtype, bits, method, kv, assumed", [
    ("bf16 (vLLM dtype=auto)", 16, "none", 16, False),
    ("fp16", 16, "none", 16, False),
    ("float16", 16, "none", 16, False),
    ("float32", 32, "none", 32, False),
    ("awq-int4 (w4a16)", 4, "awq", 16, False),
    ("gptq (bits not stated; TheBloke-style, likely int4)", 4, "gptq", 16, True),
    ("gptq int8", 8, "gptq", 16, False),
    ("hqq-4bit gs64", 4, "hqq", 16, False),
    ("int8 bitsandbytes (compute float16)", 8, "bnb-int8", 16, False),
    ("4-bit bitsandbytes (compute float16)", 4, "bnb-nf4", 16, False),
    ("nf4", 4, "bnb-nf4", 16, False),
    ("bitsandbytes fp4", 4, "bnb-fp4", 16, False),
])
def test_precision_strings(dtype: str, bits: int, method: str, kv: int, assumed: bool) -> None:
    assert col.precision_for(dtype) == (bits, method, kv, assumed)
    assert method in QUANTISATIONS


def test_precision_columns_of_rows(tmp_path: Path) -> None:
    dtypes = ["bf16 (vLLM dtype=auto)", "awq-int4 (w4a16)", "gptq (bits not stated; TheBloke-style, likely int4)", "hqq-4bit gs64"]
    r = import_file("collected", write(tmp_path, [row(dtype=d) for d in dtypes]))
    t = r.table
    assert list(t["weight_bits"]) == [16, 4, 4, 4] and list(t["kv_bits"]) == [16, 16, 16, 16]
    assert list(t["quantisation"]) == ["none", "awq", "gptq", "hqq"]
    assert [col.BITS_ASSUMED in flags_of(t, i) for i in range(4)] == [False, False, True, False]
    with pytest.raises(InvalidInputError, match=r"line 2: dtype: 'int3 magic'"):
        import_file("collected", write(tmp_path, [row(dtype="int3 magic")], "bad.csv"))


# -- judgements -------------------------------------------------------------------------------------
def test_vllm_rows(tmp_path: Path) -> None:
    r = import_file("collected", write(tmp_path, [row()]))
    t = r.table
    assert list(t.columns) == list(COLUMN_NAMES)
    one = t.iloc[0]
    assert (one["source"], one["source_file"], one["source_row"]) == ("collected", "snippet.csv", 2)
    assert (one["device"], one["model"], one["engine"]) == ("a100-80gb", "codellama-7b", "vllm-eager")
    assert (one["phase"], one["level"], one["measurement"]) == ("total", "batch", "nvml_energy")
    assert (one["num_devices"], one["tensor_parallel"], one["pipeline_parallel"], one["data_parallel"],
            one["expert_parallel"]) == (1, 1, 1, 1, 1)
    assert (one["batch_size"], one["prompt_tokens"], one["generated_tokens"]) == (64, 133, 512)
    assert one["energy_j"] == 2000 and one["latency_s"] == 10 and bool(one["kv_cache"]) and bool(one["flash_attention"])
    assert one["num_layers"] == model_catalog().get("codellama-7b").num_layers
    assert flags_of(t, 0) == {col.BATCH_CAP}  # the batch is vLLM's max_num_seqs, kept but marked
    assert r.flagged == {col.BATCH_CAP: 1}


def test_flag_notes_become_flags(tmp_path: Path) -> None:
    rows = [
        row(notes=ECE_NOTE + "; FLAG: avg power 60 W is near idle - GPU barely loaded (run looks launch/CPU-bound)",
            energy_j=600.0, avg_power_w=60.0),
        row(notes="FLAG: avg power 1180 W > TDP 250 W x 4", energy_j=2950.0, avg_power_w=295.0),
        row(notes="something; FLAG: the counter wrapped"),
        row(notes="no flag here"),
    ]
    r = import_file("collected", write(tmp_path, rows))
    t = r.table
    assert len(t) == 4  # flagged rows are kept
    assert col.NEAR_IDLE in flags_of(t, 0) and col.EXCEEDS_TDP in flags_of(t, 1) and col.FLAGGED in flags_of(t, 2)
    assert flags_of(t, 3) == set()
    assert set(col.UNRELIABLE) == {col.NEAR_IDLE, col.EXCEEDS_TDP, col.FLAGGED}


def test_flagged_rows_are_left_out_of_fits(tmp_path: Path) -> None:
    from llmco2.data.usable import UNRELIABLE_FLAGS, usable_rows

    rows = [row(notes="FLAG: avg power 1180 W > TDP 250 W x 4", energy_j=2950.0, avg_power_w=295.0),
            row(notes=ECE_NOTE + "; FLAG: avg power 60 W is near idle", energy_j=600.0, avg_power_w=60.0),
            row()]
    t = import_file("collected", write(tmp_path, rows)).table
    kept, _ = usable_rows(t)
    lines = set(kept["source_row"])
    assert 2 not in lines and 4 in lines  # power_exceeds_tdp is left out; batch_is_cap alone does not exclude a row
    assert [f for f in col.UNRELIABLE if f not in UNRELIABLE_FLAGS] == []
    assert list(kept["source_row"]) == [4]


def test_mean_request_rows_of_the_v1_leaderboard(tmp_path: Path) -> None:
    r = import_file("collected", write(tmp_path, [row(model_hf="lmsys/vicuna-7B", gpu="A40", engine=FASTCHAT, dtype="fp16",
                                                      batch_size=1, prompt_tokens="", generated_tokens=258.85, energy_j=1946.2,
                                                      latency_s=10.06, avg_power_w=193.39, notes=V1_NOTE)]))
    one = r.table.iloc[0]
    assert (one["model"], one["device"], one["engine"]) == ("llama-7b", "a40", "hf")  # a LLaMA-7B fine-tune
    assert one["level"] == "request" and pd.isna(one["prompt_tokens"]) and one["generated_tokens"] == 258.85
    assert one["measurement"] == "nvml_energy" and not bool(one["flash_attention"])  # 2023 FastChat: unfused attention
    assert flags_of(r.table, 0) == {col.PROMPT_UNKNOWN}


def test_data_parallel_replica_rows(tmp_path: Path) -> None:
    rows = [row(gpu="A100-PCIE-40GB", engine=HF, dtype="int8 bitsandbytes (compute float16)", batch_size=16, prompt_tokens=128,
                generated_tokens=128, notes=HB_NOTE),
            row(gpu="A100-PCIE-40GB", engine=HF, dtype="4-bit bitsandbytes (compute float16)", notes=HB_NOTE)]
    r = import_file("collected", write(tmp_path, rows))
    device, _ = expected_device("A100-PCIE-40GB")
    if device is None:
        assert len(r.table) == 0 and sum(r.dropped.values()) == 2
        return
    t = r.table
    assert (t["device"] == "a100-pcie-40gb").all() and (t["engine"] == "hf").all()
    assert (t["measurement"] == "codecarbon").all() and (t["level"] == "batch").all()
    assert (t["num_devices"] == 1).all() and (t["data_parallel"] == 1).all()  # one replica of the four
    assert list(t["quantisation"]) == ["bnb-int8", "bnb-nf4"] and list(t["weight_bits"]) == [8, 4]


def test_models_the_catalog_lacks_are_dropped_with_the_reason(tmp_path: Path) -> None:
    rows = [row(model_hf="RWKV/rwkv-raven-7b"), row(model_hf="RWKV/rwkv-raven-7b"), row(model_hf="someone/unknown-9b"),
            row(model_hf="metaai/llama-13B"), row(energy_j=0.0, avg_power_w=0.0)]
    r = import_file("collected", write(tmp_path, rows))
    assert r.dropped == {"model not in catalog: RWKV/rwkv-raven-7b (RNN, not a transformer)": 2,
                         "model not in catalog: someone/unknown-9b": 1, col.ZERO_ENERGY: 1}
    assert list(r.table["model"]) == ["llama2-13b"]  # LLaMA-1 13B has Llama-2-13B's dimensions
    assert r.rows_read == 5 and r.rows_read - sum(r.dropped.values()) == len(r.table)


@pytest.mark.parametrize("change, match", [
    ({"avg_power_w": 300.0}, r"line 2: avg_power_w: 300 W x 1 GPUs disagrees"),
    ({"energy_j": "lots"}, r"line 2: energy_j: 'lots' is not a number"),
    ({"latency_s": 0}, r"line 2: latency_s"),
    ({"phase": "both"}, r"line 2: phase: 'both'"),
    ({"num_gpus": 1.5}, r"line 2: num_gpus"),
])
def test_malformed_rows_raise_with_the_line(tmp_path: Path, change: dict, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        import_file("collected", write(tmp_path, [row(**change)]))


def test_not_a_collected_file(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(InvalidInputError, match="does not look like a collected file"):
        import_file("collected", path)


def test_detect_format_of_the_collected_folder() -> None:
    assert "collected" in IMPORTERS
    assert detect_format(Path("collected/energy_code_eval.csv"), Path(".")) == ("collected", "")
    fmt, reason = detect_format(Path("collected/raw/mlenergy_v1_legacy/A100_chat_benchmark.csv"), Path("."))
    assert fmt is None and "converted from" in reason
    fmt, reason = detect_format(Path("collected/raw/energy_code_eval__batching_combined.csv"), Path("."))
    assert fmt is None and "converted from" in reason


# -- ML.ENERGY v3 parallelism columns ------------------------------------------------------------------
V3_HEADER = ("task,model_id,gpu_model,num_gpus,tensor_parallel,expert_parallel,data_parallel,avg_batch_size,avg_output_len,"
             "energy_per_request_joules,weight_precision")


def test_mlenergy_v3_keeps_data_and_expert_parallel(tmp_path: Path) -> None:
    path = tmp_path / "mlenergy_v3_snippet.csv"
    path.write_text(V3_HEADER + "\n"
                    "gpqa,Qwen/Qwen3-30B-A3B-Thinking-2507,H100,2,1,2,1,50.0,900.0,300.0,bfloat16\n"
                    "gpqa,Qwen/Qwen3-30B-A3B-Thinking-2507,H100,4,2,1,2,60.0,900.0,350.0,bfloat16\n")
    t = import_file("mlenergy_v3", path).table
    assert list(t["expert_parallel"]) == [2, 1] and list(t["data_parallel"]) == [1, 2]
    assert pd.isna(t["tensor_parallel"].iloc[0]) and t["tensor_parallel"].iloc[1] == 2
    # data_parallel is optional in the file
    path.write_text("\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != 6) for line in path.read_text().splitlines()))
    t = import_file("mlenergy_v3", path).table
    assert t["data_parallel"].isna().all() and list(t["expert_parallel"]) == [2, 1]


def test_mlenergy_v3_real_parallelism(shared_data: Path) -> None:
    path = shared_data / "datacenter" / "mlenergy_v3_2025.csv"
    t = import_file("mlenergy_v3", path).table
    src = pd.read_csv(path)
    lines = src.set_index(np.arange(2, 2 + len(src))).loc[t["source_row"].astype(int)]
    assert (t["expert_parallel"].to_numpy(dtype=int) == lines["expert_parallel"].to_numpy()).all()
    assert (t["data_parallel"].to_numpy(dtype=int) == lines["data_parallel"].to_numpy()).all()
    assert (t["expert_parallel"] > 1).sum() > 0


# -- the real files -----------------------------------------------------------------------------------
def _v1_expected() -> tuple[int, dict[str, int]]:
    """Rows of mlenergy_v1_legacy.csv kept, and dropped by reason, for the catalog as it is now."""
    no_model = ["FreedomIntelligence/phoenix-inst-chat-7b", "Neutralzz/BiLLa-7B-SFT", "OpenAssistant/oasst-sft-1-pythia-12b",
                "RWKV/rwkv-raven-7b", "Salesforce/xgen-7b-8k-inst", "StabilityAI/stablelm-tuned-alpha-7b",
                "databricks/dolly-v2-12b", "lmsys/fastchat-t5-3b-v1.0", "togethercomputer/RedPajama-INCITE-7B-Chat"]
    # rows per GPU: A40 23 models x 4 tasks, A100 and V100 21 x 4; the nine models above ran on all three
    per_gpu = {"A40": 92, "A100 (variant unstated)": 84, "V100-32GB (variant unstated)": 84}
    dropped: dict[str, int] = {}
    kept, gpus_kept = 0, 0
    for gpu, n in per_gpu.items():
        if gpu != "A40" and expected_device(gpu)[0] is None:
            dropped[f"device not in catalog: {gpu} (the catalog has none of {', '.join(col.DEVICES[gpu])})"] = n
        else:
            kept += n - 4 * len(no_model)
            gpus_kept += 1
    for name in no_model:
        note = col.MODEL_NOTES.get(name)
        dropped[f"model not in catalog: {name}" + (f" ({note})" if note else "")] = 4 * gpus_kept
    return kept, dropped


def _check_real(path: Path, r) -> pd.DataFrame:
    t = r.table
    assert r.source == "collected" and list(t.columns) == list(COLUMN_NAMES)
    validate(t, on_error="raise")
    assert (t["source"] == "collected").all() and (t["source_file"] == path.name).all()
    assert set(t["device"]) <= set(gpu_catalog().ids) and set(t["model"]) <= set(model_catalog().ids)
    assert r.rows_read - sum(r.dropped.values()) == len(t)
    assert t["flag"].dropna().str.split(";").explode().value_counts().to_dict() == r.flagged
    src = pd.read_csv(path)
    lines = src.set_index(np.arange(2, len(src) + 2)).loc[t["source_row"].astype(int)]
    assert (lines["energy_j"].to_numpy() == t["energy_j"].to_numpy(dtype=float)).all()  # source_row is the CSV line
    flagged_src = lines["notes"].str.contains("FLAG:").to_numpy()
    unreliable = t["flag"].fillna("").str.contains("|".join(col.UNRELIABLE)).to_numpy()
    assert (flagged_src == unreliable).all()  # every FLAG: row, and only those, is marked unreliable
    return t


def test_energy_code_eval_real(shared_data: Path) -> None:
    path = shared_data / "collected" / "energy_code_eval.csv"
    r = import_file("collected", path)
    t = _check_real(path, r)
    assert r.rows_read == 1501 and r.dropped == {} and len(t) == 1501
    assert r.flagged == {col.NEAR_IDLE: 20, col.BATCH_CAP: 1501, col.MULTI_STEP: 86, col.CHUNKED_PREFILL: 27,
                         col.BITS_ASSUMED: 444}
    assert (t["engine"] == "vllm-eager").all() and set(t["device"]) == {"a100-80gb", "a40"}
    assert (t["device"] == "a40").sum() == 64
    assert t.groupby("quantisation").size().to_dict() == {"awq": 439, "gptq": 444, "hqq": 21, "none": 597}
    assert set(t["weight_bits"]) == {4, 16} and (t["level"] == "batch").all() and (t["measurement"] == "nvml_energy").all()
    near_idle = t[t["flag"].str.contains(col.NEAR_IDLE).fillna(False)]
    assert (near_idle["model"] == "deepseek-coder-v2-lite").all()
    # the A100 runs were held at 300 W: the evidence of ENFORCED_LIMITS_W (every run's mean power at most 299.1 W,
    # hundreds of them piled up within 10 W below the limit), and only those rows carry it
    a100 = t["device"] == "a100-80gb"
    assert (t.loc[a100, "power_limit_w"] == 300.0).all() and t.loc[~a100, "power_limit_w"].isna().all()
    power = t["energy_j"] / t["latency_s"]
    assert power[a100].max() < 300.0 and ((power[a100] > 290.0).sum() > 300)


def test_hb_thesis_real(shared_data: Path) -> None:
    path = shared_data / "collected" / "hb_thesis_a100pcie.csv"
    r = import_file("collected", path)
    t = _check_real(path, r)
    assert r.rows_read == 1996
    device, _ = expected_device("A100-PCIE-40GB")
    models = {"meta-llama/Llama-3.2-1B": 1707, "meta-llama/Llama-3.2-3B": 289}
    expected: dict[str, int] = {}
    if device is None:
        expected[f"device not in catalog: A100-PCIE-40GB (the catalog has none of {', '.join(col.DEVICES['A100-PCIE-40GB'])})"] = 1996
    else:
        for name, n in models.items():
            if col.model_id(name) is None:
                expected[f"model not in catalog: {name}"] = n
    assert r.dropped == expected
    if len(t):
        assert (t["measurement"] == "codecarbon").all() and (t["engine"] == "hf").all()
        assert (t["data_parallel"] == 1).all() and (t["num_devices"] == 1).all()
        assert set(t["quantisation"]) <= {"none", "bnb-int8", "bnb-nf4"}
        assert t["model"].value_counts().to_dict() == {col.model_id(name): n for name, n in models.items() if col.model_id(name)}


def test_mlenergy_v1_legacy_real(shared_data: Path) -> None:
    path = shared_data / "collected" / "mlenergy_v1_legacy.csv"
    r = import_file("collected", path)
    t = _check_real(path, r)
    kept, dropped = _v1_expected()
    assert r.rows_read == 260 and len(t) == kept
    assert r.dropped == dropped
    assert (t["level"] == "request").all() and t["prompt_tokens"].isna().all() and (t["batch_size"] == 1).all()
    assert r.flagged[col.PROMPT_UNKNOWN] == kept and (t["engine"] == "hf").all() and (t["weight_bits"] == 16).all()
    unstated = t["device"] != "a40"
    assert r.flagged.get(col.VARIANT_UNSTATED, 0) == int(unstated.sum())
    assert set(t["model"]) <= {"llama-7b", "llama2-7b", "llama2-13b"}


def test_import_all_includes_collected_rows(tmp_path: Path, shared_data: Path) -> None:
    for f in (shared_data / "collected").rglob("*"):  # links, not copies, of the shared files
        if f.is_file():
            link = tmp_path / f.relative_to(shared_data)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(f)
    table, results, refused = import_all(tmp_path)
    assert sorted(r.path.name for r in results) == ["energy_code_eval.csv", "hb_thesis_a100pcie.csv", "mlenergy_v1_legacy.csv"]
    assert refused and all("converted from" in why for p, why in refused if "/raw/" in p.as_posix())
    assert (table["source"] == "collected").all() and len(table) == sum(len(r.table) for r in results) >= 1501


def test_cli_import_collected(tmp_path: Path, capsys, shared_data: Path) -> None:
    out = tmp_path / "x.parquet"
    code, _, err = run_cli(["data", "import", "collected", str(shared_data / "collected" / "energy_code_eval.csv"), "-o", str(out)],
                           capsys)
    assert code == 0, err
    assert "collected energy_code_eval.csv: 1,501 rows read, 1,501 imported" in err and "20 power_near_idle" in err
    assert len(pd.read_parquet(out)) == 1501
