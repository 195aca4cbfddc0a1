"""Expert parallelism (``Request.expert_parallel``, ``--ep``): golden kernels of a tiny MoE at EP 2
against TP 2 and one GPU, the checks of the layout, and the flag through the command line, request
files, the API and a served request."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmco2.analytic.layer import analyze_layer
from llmco2.analytic.model import model_totals
from llmco2.errors import InvalidInputError
from llmco2.specs import ModelArch, Request, get_gpu, get_model, validate_request
from tests.helpers import run_cli

# 4 experts, 2 per token, 2 layers: expert matrices of 64 x 32 (fp16: 4096 bytes each)
TINY = ModelArch(id="tiny-moe", hidden_size=64, intermediate_size=32, num_layers=2, num_heads=4, num_kv_heads=4,
                 head_dim=16, vocab_size=256, num_experts=4, experts_per_token=2, max_context=1024)
H100 = get_gpu("h100")
MATRIX = 64 * 32 * 2  # bytes of one expert's up (or gate, or down) matrix


def run(batch: int = 2, **layout: int) -> tuple:
    req = Request(batch_size=batch, prompt_tokens=8, generated_tokens=5, **layout)
    a = analyze_layer(TINY, req, H100)
    return req, a, model_totals(a)


def test_layout_of_the_group() -> None:
    assert Request().expert_parallel == 1 and Request().attention_dp == 1
    r = Request(num_gpus=8, tensor_parallel=2, expert_parallel=8)
    assert (r.attention_dp, r.pipeline_parallel) == (4, 1)
    r = Request(num_gpus=8, expert_parallel=4, tensor_parallel=4)
    assert (r.attention_dp, r.pipeline_parallel) == (1, 2)


@pytest.mark.parametrize(("layout", "text"), [
    (dict(num_gpus=4, tensor_parallel=4, expert_parallel=2), "must be a multiple of tensor_parallel 4"),
    (dict(num_gpus=3, tensor_parallel=1, expert_parallel=2), "must divide num_gpus 3"),
    (dict(num_gpus=2, tensor_parallel=1, expert_parallel=0), "expert_parallel"),
])
def test_request_refuses_a_layout_that_does_not_add_up(layout: dict, text: str) -> None:
    with pytest.raises(InvalidInputError, match=text) as err:
        Request(**layout)
    assert err.value.field == "expert_parallel"


def test_model_checks() -> None:
    with pytest.raises(InvalidInputError, match="dense model") as err:
        validate_request(Request(num_gpus=2, expert_parallel=2), get_model("llama3.1-8b"), H100)
    assert err.value.field == "expert_parallel"
    with pytest.raises(InvalidInputError, match="must divide the 8 experts of mixtral-8x7b"):
        validate_request(Request(num_gpus=3, tensor_parallel=1, expert_parallel=3), get_model("mixtral-8x7b"), H100)
    validate_request(Request(num_gpus=8, tensor_parallel=1, expert_parallel=8), get_model("mixtral-8x7b"), H100)


def test_expert_weights_per_gpu_halve_at_ep2() -> None:
    routed = 2 * 4 * 3 * 64 * 32  # layers x experts x (gate, up, down) x hidden x intermediate
    _, _, one = run(num_gpus=1)
    _, _, ep2 = run(num_gpus=2, tensor_parallel=1, expert_parallel=2)
    _, _, tp2 = run(num_gpus=2)
    others = TINY.param_count() - routed
    assert one.weight_bytes_per_gpu[0] == TINY.param_count() * 2
    assert ep2.weight_bytes_per_gpu[0] == pytest.approx((others + routed / 2) * 2)  # attention replicated, experts halved
    assert tp2.weight_bytes_per_gpu[0] == pytest.approx(TINY.param_count())  # everything halved


def test_decode_reads_the_touched_experts_among_its_own() -> None:
    # batch 2 decode: 2 tokens per step touch E (1 - (1 - k/E)^2) = 3 of the 4 experts
    steps = 4
    _, one, _ = run(num_gpus=1)
    _, ep2, _ = run(num_gpus=2, tensor_parallel=1, expert_parallel=2)  # one sequence per GPU, the step's 2 tokens
    _, tp2, _ = run(num_gpus=2)
    assert one.costs["decode"]["up_proj"].weight_bytes[0] == pytest.approx(3 * MATRIX * steps)
    assert ep2.costs["decode"]["up_proj"].weight_bytes[0] == pytest.approx(1.5 * MATRIX * steps)  # half of them, whole
    assert tp2.costs["decode"]["up_proj"].weight_bytes[0] == pytest.approx(3 * MATRIX / 2 * steps)  # all of them, halved
    # ops: each GPU runs half of the (token, expert) pairs, whole matrices
    pairs = 2 * steps * 2 / 2
    assert ep2.costs["decode"]["up_proj"].ops[0] == pytest.approx(2 * pairs * 64 * 32)
    assert ep2.costs["decode"]["up_proj"].act_load_bytes[0] == pytest.approx(pairs * 64 * 2)


def test_network_bytes_are_the_all_to_all() -> None:
    # prefill of 2 x 8 tokens: at EP 2 with TP 1 each GPU holds one sequence (8 tokens) and sends half of
    # its tokens' 2 expert copies away and back: 2 x 8 x 2 x 64 x 2 bytes x 1/2
    _, ep2, t_ep2 = run(num_gpus=2, tensor_parallel=1, expert_parallel=2)
    _, tp2, _ = run(num_gpus=2)
    _, ep_tp2, _ = run(num_gpus=2, tensor_parallel=2, expert_parallel=2)
    a2a = 2 * 8 * 2 * 64 * 2 * 0.5
    assert ep2.present["all_reduce_mlp"][0] and not ep2.present["all_reduce_attn"][0]
    assert ep2.costs["prefill"]["all_reduce_mlp"].net_bytes[0] == pytest.approx(a2a)
    assert ep2.costs["prefill"]["all_reduce_attn"].net_bytes[0] == 0
    assert t_ep2.totals["prefill"]["net_bytes"][0] == pytest.approx(a2a * 2 * 2)  # x layers x GPUs
    all_reduce = 16 / 2 * 64 * 1 * 2  # tokens / tp x hidden x (tp - 1) x bytes
    assert tp2.costs["prefill"]["all_reduce_mlp"].net_bytes[0] == pytest.approx(all_reduce)
    # EP over the tensor-parallel group (vLLM without data parallelism): the tokens are already on every
    # GPU, nothing is dispatched, the experts' outputs are summed in the TP all-reduce
    assert ep_tp2.costs["prefill"]["all_reduce_mlp"].net_bytes[0] == pytest.approx(all_reduce)
    for q in ("ops", "weight_bytes"):
        assert getattr(ep_tp2.costs["decode"]["up_proj"], q)[0] == pytest.approx(getattr(tp2.costs["decode"]["up_proj"], q)[0])


def test_attention_runs_on_the_group_share_of_the_batch() -> None:
    _, one, _ = run(batch=4, num_gpus=1)
    _, ep2, _ = run(batch=4, num_gpus=2, tensor_parallel=1, expert_parallel=2)
    for name in ("q_proj", "fuse_attn", "norm_attn"):
        assert ep2.costs["prefill"][name].ops[0] == pytest.approx(one.costs["prefill"][name].ops[0] / 2)
    # an odd batch: the busiest group holds ceil(3 / 2) = 2 sequences
    _, odd, _ = run(batch=3, num_gpus=2, tensor_parallel=1, expert_parallel=2)
    assert odd.costs["prefill"]["q_proj"].ops[0] == pytest.approx(ep2.costs["prefill"]["q_proj"].ops[0])


def test_without_ep_nothing_changes() -> None:
    base = Request(batch_size=3, prompt_tokens=100, generated_tokens=20, num_gpus=2)
    assert base == base.replace(expert_parallel=1)
    arch = get_model("mixtral-8x7b")
    a, b = analyze_layer(arch, base, H100), analyze_layer(arch, base.replace(expert_parallel=None), H100)
    for phase in ("prefill", "decode"):
        for name, cost in a.costs[phase].items():
            assert np.array_equal(cost.net_bytes, b.costs[phase][name].net_bytes)
            assert np.array_equal(cost.weight_bytes, b.costs[phase][name].weight_bytes)


def test_a_layer_mix_replaces_only_its_moe_share() -> None:
    arch = get_model("deepseek-v3")  # 3 dense layers of 61
    assert arch.num_dense_layers > 0 and arch.num_experts % 8 == 0
    tp8 = analyze_layer(arch, Request(batch_size=8, prompt_tokens=64, generated_tokens=8, num_gpus=8), H100)
    ep8 = analyze_layer(arch, Request(batch_size=8, prompt_tokens=64, generated_tokens=8, num_gpus=8, tensor_parallel=1,
                                      expert_parallel=8), H100)
    share = arch.num_moe_layers / arch.num_layers
    net = ep8.costs["prefill"]["all_reduce_mlp"].net_bytes[0]
    expected = 2 * 64 * arch.experts_per_token * arch.hidden_size * 2 * 7 / 8 * share  # one sequence per GPU
    assert net == pytest.approx(expected)
    assert tp8.costs["prefill"]["all_reduce_mlp"].net_bytes[0] > 0


# -- the flag --------------------------------------------------------------------------------------
def test_cli_predict_with_ep(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "mixtral-8x7b", "--gpu", "h100", "--batch-size", "4", "--prompt-tokens", "256",
            "--gen-tokens", "32", "--json"]
    code, out, _ = run_cli([*args, "--ep", "2", "--tp", "1"], capsys)
    ep = json.loads(out)
    assert code == 0 and (ep["num_gpus"], ep["tensor_parallel"], ep["expert_parallel"]) == (2, 1, 2)
    code, out, _ = run_cli([*args, "--gpus", "2"], capsys)
    tp = json.loads(out)
    assert "expert_parallel" not in tp and ep["energy_j"]["total"] != tp["energy_j"]["total"]


@pytest.mark.parametrize(("extra", "text"), [
    (["--model", "llama3.1-8b", "--ep", "2"], "--ep: llama3.1-8b is a dense model"),
    (["--ep", "3"], "--ep: expert parallel degree 3 must divide the 8 experts"),
    (["--ep", "2", "--tp", "4", "--gpus", "4"], "--ep: expert_parallel 2 must be a multiple of tensor_parallel 4"),
])
def test_cli_refuses_with_one_line(extra: list[str], text: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "mixtral-8x7b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "64",
            "--gen-tokens", "8", *extra]
    code, _, err = run_cli(args, capsys)
    err = err.strip()
    assert code == 2 and text in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_api_and_request_file(tmp_path: Path) -> None:
    import pandas as pd

    from llmco2.api.files import predict_file
    from llmco2.api.options import FileJob
    from llmco2.api.single import predict

    p = predict("mixtral-8x7b", "h100", batch_size=4, prompt_tokens=256, generated_tokens=32, gpus=2, tp=1, ep=2)
    assert p.record["expert_parallel"] == 2
    frame = pd.DataFrame({"model": ["mixtral-8x7b"] * 2, "gpu": ["h100"] * 2, "batch_size": [4, 4], "prompt_tokens": [256, 256],
                          "generated_tokens": [32, 32], "num_gpus": [2, 2], "tensor_parallel": [1, ""],
                          "expert_parallel": [2, ""]})
    path = tmp_path / "req.csv"
    frame.to_csv(path, index=False)
    assert predict_file(FileJob(str(path), str(tmp_path / "out.csv"))) == 0
    rows = pd.read_csv(tmp_path / "out.csv")
    assert rows["total_j"].iloc[0] == pytest.approx(p.energy_j["total"], rel=1e-6)
    assert rows["total_j"].iloc[1] != pytest.approx(rows["total_j"].iloc[0])
    bad = frame.assign(expert_parallel=[3, 1])
    bad.to_csv(path, index=False)
    with pytest.raises(InvalidInputError, match="line 2: expert_parallel: expert_parallel 3 must divide num_gpus 2"):
        predict_file(FileJob(str(path), str(tmp_path / "bad.csv")))
    frame.assign(model=["mixtral-8x7b", "llama3.1-8b"], expert_parallel=[2, 2]).to_csv(path, index=False)
    with pytest.raises(InvalidInputError, match="line 3: expert_parallel: llama3.1-8b is a dense model"):
        predict_file(FileJob(str(path), str(tmp_path / "dense.csv")))


def test_served_request_with_ep() -> None:
    from llmco2.api.server import ServedRequest, ServerLoad, serve_request

    r = serve_request(ServedRequest("mixtral-8x7b", "h100", prompt_tokens=200, generated_tokens=20, gpus=2, tp=1, ep=2),
                      ServerLoad(concurrency=4, serving_requests=30, background="fixed"))
    assert (r["num_gpus"], r["tensor_parallel"], r["expert_parallel"]) == (2, 1, 2) and r["energy_j"]["total"] > 0
    with pytest.raises(InvalidInputError, match="dense model"):
        serve_request(ServedRequest("llama3.1-8b", "h100", prompt_tokens=200, generated_tokens=20, gpus=2, ep=2),
                      ServerLoad(concurrency=4, serving_requests=30))
