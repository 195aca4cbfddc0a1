"""The `llmco2 analyze` command: JSON shape (convention 2 (docs/reference/conventions.md)), tables, batch mode, and
bad input -> exit code 2 with one line and no traceback (convention 7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli as run

LAYER = ["analyze", "layer", "--model", "llama3.1-8b", "--gpu", "a100-80gb", "--batch-size", "2",
         "--prompt-tokens", "512", "--gen-tokens", "129"]




def test_layer_json_follows_convention_2(capsys) -> None:
    code, out, _ = run(LAYER + ["--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert set(doc) >= {"nodes", "edges", "global"}
    names = [n["name"] for n in doc["nodes"]]
    assert names == ["norm_attn", "q_proj", "k_proj", "v_proj", "fuse_attn", "out_proj", "add_attn", "norm_mlp",
                     "gate_proj", "up_proj", "act_mlp", "down_proj", "add_mlp"]
    q = doc["nodes"][1]
    assert q["prefill"]["ops"] == 2 * 2 * 4096 * 4096 * 512
    assert q["decode"]["ops"] == 2 * 2 * 4096 * 4096 * 128
    assert all(isinstance(e, list) and len(e) == 2 for e in doc["edges"])
    g = doc["global"]
    assert (g["hidden_size"], g["num_kv_heads"], g["weight_bits"], g["batch_size"]) == (4096, 8, 16, 2)
    assert g["model_totals"]["prefill"]["ops"] > g["layer_totals"]["prefill"]["ops"] * 32 - 1


def test_layer_json_multi_gpu_without_flash(capsys) -> None:
    code, out, _ = run(LAYER + ["--gpus", "2", "--no-flash-attention", "--dtype", "bf16", "--json"], capsys)
    assert code == 0
    names = [n["name"] for n in json.loads(out)["nodes"]]
    assert {"matmul_qk", "softmax", "matmul_sv", "all_reduce_attn", "all_reduce_mlp"} <= set(names)
    assert "fuse_attn" not in names


def test_layer_accepts_hf_config_path(tmp_path: Path, capsys) -> None:
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
           "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "hidden_act": "silu",
           "max_position_embeddings": 2048, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run(["analyze", "layer", "--model", str(path), "--gpu", "jetson-orin", "--batch-size", "1",
                        "--prompt-tokens", "64", "--gen-tokens", "16", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["global"]["num_kv_heads"] == 4


def test_human_tables(capsys) -> None:
    code, out, _ = run(LAYER, capsys)
    assert code == 0
    assert "q_proj" in out and "Whole model" in out and "fits" in out
    code, out, _ = run(["analyze", "model"] + LAYER[2:], capsys)
    assert code == 0 and "prefill" in out and "decode" in out


def test_model_summary_json(capsys) -> None:
    code, out, _ = run(["analyze", "model"] + LAYER[2:] + ["--json"], capsys)
    summary = json.loads(out)["summary"]
    assert summary["dominant_phase"] in ("prefill", "decode")
    assert summary["prefill"]["dominant_kernels"][0]["share_of_time"] > 0
    assert summary["fits_in_memory"] is True


def test_batch_csv(tmp_path: Path, capsys) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\n"
                   "llama3.1-8b,a100-80gb,1,1,128,16\nqwen2-7b,h100,2,4,1024,256\n")
    out = tmp_path / "out.csv"
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    import pandas as pd

    frame = pd.read_csv(out)
    assert list(frame["gpu"]) == ["a100-80gb", "h100"]  # the input's cells, as written (predict keeps them too)
    assert (frame["prefill_ops"] > 0).all() and (frame["decode_time_s"] > 0).all()


BAD = [
    (["--gpu", "a100-80gb"], ["--gpu", "a999"], "a999"),
    (["--model", "llama3.1-8b"], ["--model", "llama9-8b"], "llama9-8b"),
    (["--prompt-tokens", "512"], ["--prompt-tokens", "-3"], "--prompt-tokens"),
    (["--gen-tokens", "129"], ["--gen-tokens", "0"], "--gen-tokens"),
    (["--batch-size", "2"], ["--batch-size", "0"], "--batch-size"),
    (["--gpu", "a100-80gb"], ["--gpu", "a100-80gb", "--gpus", "3"], "tensor_parallel"),
    (["--gpu", "a100-80gb"], ["--gpu", "t4", "--dtype", "bf16"], "bf16"),
    (["--gpu", "a100-80gb"], ["--gpu", "a100-80gb", "--dtype", "fp7"], "fp7"),
    (["--model", "llama3.1-8b"], ["--model", "/nonexistent/config.json"], "config.json"),
    (["--prompt-tokens", "512"], ["--prompt-tokens", "twelve"], "twelve"),
    (["--prompt-tokens", "512"], ["--prompt-tokens", "200000"], "context"),
]


@pytest.mark.parametrize("old, new, mention", BAD)
def test_bad_input_exits_2_with_one_line(old, new, mention, capsys) -> None:
    args = list(LAYER)
    i = args.index(old[0])
    args[i:i + len(old)] = new
    code, out, err = run(args + ["--json"], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert mention in lines[0]


def test_unknown_gpu_lists_close_matches(capsys) -> None:
    args = list(LAYER)
    args[args.index("a100-80gb")] = "a100-80"
    code, _, err = run(args, capsys)
    assert code == 2 and "did you mean" in err and "a100-80gb" in err


def test_heads_not_dividing_hidden_in_config(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 1000, "num_attention_heads": 16, "num_hidden_layers": 2, "vocab_size": 10}))
    code, _, err = run(["analyze", "layer", "--model", str(path), "--gpu", "h100", "--batch-size", "1",
                        "--prompt-tokens", "8", "--gen-tokens", "2"], capsys)
    assert code == 2 and "num_heads" in err and len(err.strip().splitlines()) == 1


def test_malformed_csv_row_names_its_line(tmp_path: Path, capsys) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,a100-80gb,1,128,16\n"
                   "llama3.1-8b,a100-80gb,1,-5,16\n")
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(tmp_path / "o.csv")], capsys)
    assert code == 2 and "line 3" in err and "prompt_tokens" in err and len(err.strip().splitlines()) == 1


def test_attention_bad_input_through_cli(capsys) -> None:
    code, _, err = run(["analyze", "attention", "--hidden-size", "1024", "--num-heads", "16", "--batch-size", "2",
                        "--seq-len", "128", "--tp", "3", "--json"], capsys)
    assert code == 2 and "tp" in err and len(err.strip().splitlines()) == 1


def test_console_script_runs_and_fails_cleanly() -> None:
    exe = Path(sys.executable).with_name("llmco2")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "llmco2.cli"]
    ok = subprocess.run(cmd + ["analyze", "attention", "--hidden-size", "1024", "--num-heads", "16", "--batch-size", "2",
                               "--seq-len", "128", "--json"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and json.loads(ok.stdout)["flops_total"] == 2281701376
    bad = subprocess.run(cmd + ["analyze", "layer", "--model", "nope", "--gpu", "h100", "--batch-size", "1",
                                "--prompt-tokens", "1", "--gen-tokens", "1"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_docs_list_every_paper_deviation() -> None:
    from llmco2.analytic.kernels import PAPER_DEVIATIONS

    page = (Path(__file__).resolve().parents[1] / "docs" / "concepts" / "analytic-engine.md").read_text()
    for where, paper, ours in PAPER_DEVIATIONS:
        assert f"| {where} | {paper} | {ours} |" in page


def test_batch_csv_applies_architecture_columns(tmp_path: Path, capsys) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens,num_layers,num_heads,hidden_size\n"
                   "llama3.1-8b,a100-80gb,1,1,128,16,32,32,4096\n"
                   "llama3.1-8b,a100-80gb,1,1,128,16,16,32,4096\n"
                   "llama3.1-8b,a100-80gb,1,1,128,16,32,33,4096\n")
    out = tmp_path / "out.csv"
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 2 and "line 4" in err and "num_heads" in err  # 33 heads do not divide 4096
    src.write_text("\n".join(src.read_text().splitlines()[:3]) + "\n")
    code, _, err = run(["analyze", "batch", "--requests", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    import pandas as pd

    frame = pd.read_csv(out)
    # half the layers: the layer stack's work halves (embedding/LM head unchanged)
    assert frame["prefill_ops"][1] < 0.51 * frame["prefill_ops"][0]
