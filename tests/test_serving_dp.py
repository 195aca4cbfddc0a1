"""Data-parallel replicas of a served request (``--dp``): the replicas share the load evenly, so a
request on one of ``dp`` replicas at rate ``R`` costs what it costs on one server at ``R / dp``,
and the server's power counts every replica."""

from __future__ import annotations

import json

import pytest

from llmco2.api.server import ServedRequest, ServerLoad, serve_request
from llmco2.errors import InvalidInputError
from tests.helpers import run_cli

REQ = dict(prompt_tokens=500, generated_tokens=100)


def test_a_replica_serves_its_share_of_the_load() -> None:
    two = serve_request(ServedRequest("llama3.1-8b", "h100", gpus=2, dp=2, **REQ), ServerLoad(rate=8.0, serving_requests=200))
    one = serve_request(ServedRequest("llama3.1-8b", "h100", gpus=1, **REQ), ServerLoad(rate=4.0, serving_requests=200))
    assert two["energy_j"] == one["energy_j"] and two["latency_s"] == one["latency_s"]
    assert two["num_gpus"] == 2 and two["serving"]["replicas"] == 2
    assert two["serving"]["average_power_w"] == pytest.approx(2 * one["serving"]["average_power_w"], rel=1e-12)
    closed = serve_request(ServedRequest("llama3.1-8b", "h100", gpus=4, tp=2, dp=2, **REQ),
                           ServerLoad(concurrency=9, serving_requests=100))
    assert "closed loop of 5 (one of 2 replicas)" in closed["serving"]["workload"]


@pytest.mark.parametrize("request_, load, field", [
    (ServedRequest("llama3.1-8b", "h100", gpus=3, dp=2, **REQ), ServerLoad(rate=1.0), "dp"),
    (ServedRequest("llama3.1-8b", "h100", gpus=4, dp=4, **REQ), ServerLoad(concurrency=2), "concurrency"),
])
def test_replicas_that_cannot_share_are_refused(request_: ServedRequest, load: ServerLoad, field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        serve_request(request_, load)
    assert caught.value.field == field


def test_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--prompt-tokens", "500", "--gen-tokens", "100",
                              "--serving", "--rate", "8", "--dp", "2", "--serving-requests", "200", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["num_gpus"] == 2
    code, _, err = run_cli(["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "5",
                            "--gen-tokens", "5", "--dp", "2"], capsys)
    assert code == 2 and "--dp only applies with --serving" in err
