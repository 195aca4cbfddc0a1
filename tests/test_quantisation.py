"""Weight quantisation as a request input: method names and dtypes (`Request.quantisation`), the
bitsandbytes kernels of the analytic engine (golden numbers on a tiny layer), and the option on
`llmco2.predict`, request files and ``llmco2 predict --quantisation``."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmco2
from llmco2.analytic.layer import LayerBatch, analyze_layers, layer_costs
from llmco2.analytic.model import model_totals
from llmco2.analytic.quantised import EXTRA_KERNELS_INT8, OUTLIER_SHARE, host_syncs, kernel_launches
from llmco2.api.options import FileJob, RequestOptions
from llmco2.errors import InvalidInputError
from llmco2.specs import GPU, ModelArch, Request
from llmco2.specs.quantisation import QUANTISATIONS, canonical_quantisation
from tests.helpers import run_cli as run

SINGLE = ["--model", "llama3.2-1b", "--gpu", "a100-pcie-40gb", "--batch-size", "16", "--prompt-tokens", "128",
          "--gen-tokens", "128"]


@pytest.fixture
def tiny() -> ModelArch:
    """A two-layer Llama-style model small enough to count by hand: d = 256, 4 heads of 64, MLP 512."""
    return ModelArch(id="tiny-q", hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=4,
                     head_dim=64, vocab_size=1000, max_context=4096)


def costs(arch: ModelArch, gpu: GPU, batch: int, **req: object) -> dict:
    """Decode costs of each slot of one request: 8 prompt tokens, 3 generated (2 decode steps)."""
    b = LayerBatch.from_items([(arch, Request(batch_size=batch, prompt_tokens=8, generated_tokens=3, **req), gpu)])
    return layer_costs(b, "decode")


# -- request fields ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, method, dtype, compute", [
    ("awq", "awq", "int4", "fp16"), ("GPTQ", "gptq", "int4", "fp16"), ("marlin", "gptq", "int4", "fp16"),
    ("bnb-int8", "bnb-int8", "int8", "int8"), ("bitsandbytes_int8", "bnb-int8", "int8", "int8"),
    ("bnb-nf4", "bnb-nf4", "int4", "fp16"), ("bnb-4bit", "bnb-nf4", "int4", "fp16"), ("bnb-fp4", "bnb-fp4", "int4", "fp16"),
    ("fp8", "fp8", "fp8", "fp8"), ("mxfp4", "mxfp4", "fp4", "fp16"), ("none", "none", "fp16", "fp16"),
])
def test_method_alone_sets_the_dtype(name: str, method: str, dtype: str, compute: str) -> None:
    r = Request(quantisation=name)
    assert (r.quantisation, r.weight_dtype, r.compute_dtype, r.activation_dtype) == (method, dtype, compute, "fp16")


def test_defaults_unchanged_without_a_method() -> None:
    r = Request()
    assert (r.weight_dtype, r.quantisation, r.weight_bytes, r.quant_path) == ("fp16", None, 2.0, "native")
    assert Request(weight_dtype="int4").compute_dtype == "fp16" and Request(weight_dtype="int8").compute_dtype == "int8"
    assert Request(quantisation="bnb-nf4").weight_bytes == 0.5 + 4 / 64  # 4-bit codes + an fp32 absmax per 64
    assert Request(quantisation="gptq", weight_dtype="int8").compute_dtype == "fp16"  # W8A16
    assert Request(quantisation="bnb-int8").replace(batch_size=4).quantisation == "bnb-int8"  # idempotent


@pytest.mark.parametrize("kwargs, mention", [
    (dict(quantisation="bnb-nf4", weight_dtype="fp16"), "not fp16"),
    (dict(quantisation="awq", weight_dtype="int8"), "not int8"),
    (dict(quantisation="bnb-int8", weight_dtype="int4"), "not int4"),
    (dict(quantisation="none", weight_dtype="int4"), "not int4"),
    (dict(quantisation="bnb-int8", activation_dtype="fp8"), "activations"),
    (dict(quantisation="hqq"), "not modelled"),
    (dict(quantisation="bnb-nf9"), "unknown method"),
])
def test_inconsistent_or_unknown_methods_refused(kwargs: dict, mention: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        Request(**kwargs)
    assert err.value.field == "quantisation" and mention in str(err.value) and "\n" not in str(err.value)


def test_accepted_values_listed() -> None:
    with pytest.raises(InvalidInputError) as err:
        canonical_quantisation("int3")
    assert all(q in str(err.value) for q in QUANTISATIONS)


# -- analytic kernels: golden numbers on the tiny layer ------------------------------------------
def test_golden_q_proj_decode(tiny: ModelArch, a100: GPU) -> None:
    """q_proj of one decode phase at batch 4 (2 steps, 8 token rows, 256 x 256 weights streamed twice)."""
    weights, rows = 256 * 256 * 2, 8 * 256
    fp16 = costs(tiny, a100, 4)["q_proj"]
    awq = costs(tiny, a100, 4, quantisation="awq")["q_proj"]
    nf4 = costs(tiny, a100, 4, quantisation="bnb-nf4")["q_proj"]
    int8 = costs(tiny, a100, 4, quantisation="bnb-int8")["q_proj"]
    gemm_ops = 2 * 8 * 256 * 256
    assert (float(fp16.weight_bytes[0]), float(fp16.ops[0])) == (2.0 * weights, gemm_ops)
    assert float(awq.weight_bytes[0]) == 0.5 * weights
    # bnb 4-bit at batch > 1: read the codes + absmax, write the fp16 matrix, the GEMM reads it again
    assert float(nf4.weight_bytes[0]) == pytest.approx((0.5625 + 2.0 + 2.0) * weights)
    assert float(nf4.ops[0]) == pytest.approx(gemm_ops + 2.0 * weights)
    assert float(nf4.act_load_bytes[0]) == float(fp16.act_load_bytes[0]) == 2.0 * rows
    # LLM.int8: int8 weights + outlier rows; 13 bytes read per input element, 14 per output element moved
    assert float(int8.weight_bytes[0]) == pytest.approx(weights * (1.0 + 23.0 * OUTLIER_SHARE))
    assert float(int8.act_load_bytes[0]) == pytest.approx(13.0 * rows)
    assert float(int8.act_store_bytes[0]) == pytest.approx(14.0 * rows)
    assert float(int8.ops[0]) == pytest.approx(gemm_ops * (1.0 + OUTLIER_SHARE) + 10.0 * rows)


def test_bnb_4bit_at_batch_one_is_the_fused_gemv(tiny: ModelArch, a100: GPU) -> None:
    nf4 = costs(tiny, a100, 1, quantisation="bnb-nf4")["q_proj"]
    assert float(nf4.weight_bytes[0]) == pytest.approx(0.5625 * 256 * 256 * 2)  # packed weights only


def test_decode_bytes_and_kernels_order(tiny: ModelArch, a100: GPU) -> None:
    """At batch > 1 the bnb-nf4 decode step moves more bytes than fp16, awq fewer; bnb-int8 launches more kernels."""
    kinds = [None, "awq", "bnb-nf4", "bnb-int8"]
    items = [(tiny, Request(batch_size=4, prompt_tokens=8, generated_tokens=3, quantisation=q), a100) for q in kinds]
    a = analyze_layers(LayerBatch.from_items(items))
    mem = model_totals(a).totals["decode"]["mem_bytes"]
    fp16, awq, nf4, _ = mem
    assert nf4 > fp16 > awq
    launches = kernel_launches(a, "decode")
    assert launches[0] == launches[1] == 13.0  # one per present DAG slot
    assert launches[2] == 13.0 + 7.0 and launches[3] == 13.0 + 7.0 * EXTRA_KERNELS_INT8
    assert list(host_syncs(a)) == [0.0, 0.0, 0.0, 14.0]


def test_default_rows_keep_their_costs(tiny: ModelArch, a100: GPU) -> None:
    """A batch without bitsandbytes rows is costed by the same arrays as before (no extra work), and
    a bitsandbytes row beside it leaves the others' numbers alone."""
    alone = LayerBatch.from_items([(tiny, Request(batch_size=4, prompt_tokens=8, generated_tokens=3), a100)])
    mixed = LayerBatch.from_items([(tiny, Request(batch_size=4, prompt_tokens=8, generated_tokens=3), a100),
                                   (tiny, Request(batch_size=4, prompt_tokens=8, generated_tokens=3, quantisation="bnb-int8"),
                                    a100)])
    assert float(alone.quant[0]) == 0.0
    for phase in ("prefill", "decode"):
        one, two = layer_costs(alone, phase), layer_costs(mixed, phase)
        for name, c in one.items():
            for f in fields(c):
                assert getattr(c, f.name)[0] == getattr(two[name], f.name)[0], (phase, name, f.name)


# -- predictions ---------------------------------------------------------------------------------
def test_predict_llama_1b_a100(capsys) -> None:
    """Llama-3.2-1B at batch 16 on an A100-PCIe: bnb-nf4 decodes slower than fp16, awq faster; awq is
    exactly the int4 dtype path; no method predicts as before."""
    kw = dict(batch_size=16, prompt_tokens=128, generated_tokens=128)
    fp16 = llmco2.predict("llama3.2-1b", "a100-pcie-40gb", **kw)
    nf4 = llmco2.predict("llama3.2-1b", "a100-pcie-40gb", quantisation="bnb-nf4", **kw)
    awq = llmco2.predict("llama3.2-1b", "a100-pcie-40gb", quantisation="awq", **kw)
    int4 = llmco2.predict("llama3.2-1b", "a100-pcie-40gb", dtype="int4", **kw)
    assert nf4.latency_s["decode"] > fp16.latency_s["decode"] > awq.latency_s["decode"]
    assert awq.energy_j == int4.energy_j and awq.latency_s == int4.latency_s
    same = llmco2.predict("llama3.2-1b", "a100-pcie-40gb", options=RequestOptions(), **kw)
    assert same.energy_j == fp16.energy_j
    with pytest.raises(InvalidInputError) as err:
        llmco2.predict("llama3.2-1b", "a100-pcie-40gb", quantisation="bnb-nf4", dtype="fp16", **kw)
    assert err.value.field == "quantisation"


def test_cli_flag(capsys) -> None:
    code, out, err = run(["predict", *SINGLE, "--quantisation", "bnb-nf4", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    code, out, _ = run(["predict", *SINGLE, "--json"], capsys)
    assert doc["latency_s"]["decode"] > json.loads(out)["latency_s"]["decode"]


@pytest.mark.parametrize("extra, mention", [
    (["--quantisation", "int3"], "awq, gptq, bnb-int8, bnb-nf4"),
    (["--quantisation", "bnb-nf4", "--dtype", "fp16"], "not fp16"),
    (["--quantisation", "awq", "--serving", "--concurrency", "4"], "--serving"),
])
def test_cli_refusals(extra: list[str], mention: str, capsys) -> None:
    code, out, err = run(["predict", *SINGLE, *extra], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--quantisation" in err and mention in err


def test_request_file_column(tmp_path: Path, capsys) -> None:
    """A ``quantisation`` column names each row's method (an empty cell: the --quantisation default, else none);
    a file without the column predicts as before."""
    head = "model,gpu,batch_size,prompt_tokens,generated_tokens"
    rows = ["llama3.2-1b,a100-pcie-40gb,16,128,128"] * 3
    plain, quant = tmp_path / "plain.csv", tmp_path / "quant.csv"
    plain.write_text("\n".join([head, *rows]) + "\n")
    quant.write_text("\n".join([head + ",quantisation", rows[0] + ",", rows[1] + ",bnb-nf4", rows[2] + ",awq"]) + "\n")
    outs = []
    for src in (plain, quant):
        out = tmp_path / f"{src.stem}.pred.csv"
        code, _, err = run(["predict", "--requests", str(src), "--out", str(out)], capsys)
        assert code == 0, err
        outs.append(pd.read_csv(out))
    a, b = outs
    assert np.array_equal(a["total_j"].iloc[:1], b["total_j"].iloc[:1])
    # each row is predicted as the single request with that --quantisation
    for i, method in enumerate(("none", "bnb-nf4", "awq")):
        code, out, err = run(["predict", "--model", "llama3.2-1b", "--gpu", "a100-pcie-40gb", "--batch-size", "16",
                              "--prompt-tokens", "128", "--gen-tokens", "128", "--quantisation", method, "--json"], capsys)
        assert code == 0, err
        assert b["decode_j"][i] == pytest.approx(json.loads(out)["energy_j"]["decode"], rel=1e-6)
    assert b["decode_j"][1] > b["decode_j"][0]  # bitsandbytes dequantises then multiplies: dearer than fp16
    assert len(set(b["decode_j"])) == 3
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([head + ",quantisation", rows[0] + ",bnb-nf4", rows[1] + ",int3"]) + "\n")
    code, _, err = run(["predict", "--requests", str(bad), "--out", str(tmp_path / "bad.pred.csv")], capsys)
    assert code == 2 and "line 3" in err and "int3" in err and len(err.strip().splitlines()) == 1


def test_options_and_fingerprint() -> None:
    with pytest.raises(InvalidInputError) as err:
        RequestOptions(quantisation="int3")
    assert err.value.field == "quantisation"
    plain = FileJob("r.csv", "o.csv").fingerprint_options()
    assert "quantisation" not in plain and plain["dtype"] == "fp16"  # as a run written before the option
    assert FileJob("r.csv", "o.csv", RequestOptions(quantisation="awq")).fingerprint_options()["quantisation"] == "awq"


def test_gguf_types_store_their_files_bits_per_weight() -> None:
    """A GGUF type is llama.cpp's block format: the weight-only path at the bits per weight of its Llama-3-8B file in
    llama.cpp's quantise tool (Q4_K_M 4.58 GiB -> 4.90 bits), named as llama.cpp spells it or with a gguf- prefix; a
    bare gguf names no type and is refused with one line."""
    from llmco2.specs.quantisation import GGUF_BITS_PER_WEIGHT, LLAMA3_8B_PARAMS

    assert GGUF_BITS_PER_WEIGHT["q4-k-m"] == pytest.approx(4.58 * 2**30 * 8 / LLAMA3_8B_PARAMS) == pytest.approx(4.90, abs=0.005)
    assert GGUF_BITS_PER_WEIGHT["q8-0"] == pytest.approx(8.5, abs=0.02)  # Q8_0 blocks: 34 bytes per 32 weights
    for name in ("Q4_K_M", "q4_k_m", "gguf-q4-k-m", "Q4_K"):
        assert canonical_quantisation(name) == "gguf-q4-k-m"
    r = Request(quantisation="Q4_K_M")
    assert r.weight_dtype == "int4" and r.quant_path == "weight-only" and r.weight_bytes == pytest.approx(4.90 / 8, abs=1e-3)
    assert Request(quantisation="q8_0").weight_bytes == pytest.approx(GGUF_BITS_PER_WEIGHT["q8-0"] / 8)
    with pytest.raises(InvalidInputError, match="gguf-q4-k-m") as err:
        Request(quantisation="gguf")
    assert err.value.field == "quantisation" and "\n" not in str(err.value)


def test_gguf_decode_streams_the_files_bytes() -> None:
    """At batch 1 llama.cpp decode streams the weights: Q4_K_M is slower than 4-bit weights by its extra bits and
    faster than fp16, and Q8_0 lies between."""
    t = {q: llmco2.predict("llama3.1-8b", "rtx-4090", batch_size=1, prompt_tokens=1, gen_tokens=129, engine="llama-cpp",
                           **({"quantisation": q} if q.startswith("gguf") else {"dtype": q})).latency_s["decode"]
         for q in ("int4", "gguf-q4-k-m", "gguf-q8-0", "fp16")}
    assert t["int4"] < t["gguf-q4-k-m"] < t["gguf-q8-0"] < t["fp16"]
    assert 1.05 < t["gguf-q4-k-m"] / t["int4"] < 4.90 / 4.0
