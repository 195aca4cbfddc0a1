"""Options that a command would ignore are refused: serving options without --serving, the
isolated-request analysis options with it, --no-calibration without a checkpoint."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli as run

BASE = ["predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1", "--prompt-tokens", "100", "--gen-tokens", "10"]


@pytest.mark.parametrize(("extra", "mention"), [
    (["--concurrency", "8"], "--concurrency only applies with --serving"),
    (["--rate", "2", "--seed", "3"], "--rate, --seed only apply with --serving"),
    (["--max-batch", "64"], "--max-batch only applies"),
    (["--background", "code"], "--background only applies"),
    (["--serving-requests", "100"], "--serving-requests only applies"),
    (["--no-chunked-prefill"], "--chunked-prefill only applies"),
    (["--serving", "--concurrency", "8", "--causal"], "--causal does not apply with --serving"),
    (["--serving", "--concurrency", "8", "--no-flash-attention", "--kv-dtype", "fp8"], "--flash-attention, --kv-dtype do not apply"),
    (["--serving", "--concurrency", "8", "--no-calibration"], "--no-calibration only applies with --serving --checkpoint"),
])
def test_an_option_that_would_be_ignored_is_refused(extra: list[str], mention: str, capsys) -> None:
    code, out, err = run([*BASE, *extra], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert mention in err, err


def test_the_same_options_where_they_apply_are_accepted(capsys) -> None:
    code, _, err = run([*BASE, "--serving", "--concurrency", "4", "--serving-requests", "50", "--max-batch", "16", "--json"],
                       capsys)
    assert code == 0, err


@pytest.mark.parametrize(("kw", "field"), [
    ({"flash_attention": "no"}, "flash_attention"), ({"causal": "no"}, "causal"), ({"ignore_context": 1}, "ignore_context"),
    ({"region": ""}, "region"), ({"checkpoint": " "}, "checkpoint"),
])
def test_the_api_refuses_flags_that_are_not_booleans_and_empty_texts(kw: dict, field: str) -> None:
    import llmco2

    with pytest.raises(llmco2.InvalidInputError, match=field):
        llmco2.predict("llama3.1-8b", "h100", prompt_tokens=10, generated_tokens=10, **kw)


def test_a_rate_near_zero_is_refused_rather_than_charged_years_of_idling(capsys) -> None:
    code, _, err = run([*BASE, "--serving", "--rate", "1e-300"], capsys)
    assert code == 2 and "below" in err and "one request a day" in err


def test_more_local_workers_than_memory_allows_are_refused_up_front(tmp_path, capsys, monkeypatch) -> None:
    import llmco2.api.cluster as pc

    monkeypatch.setattr(pc, "machine_memory_bytes", lambda: 4e9)  # a 4 GB machine: at most 8 workers of 400 MB
    src = tmp_path / "r.csv"
    src.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens\nllama3.1-8b,h100,1,100,10\n")
    code, _, err = run(["predict", "--requests", str(src), "--out", str(tmp_path / "parts"), "--cluster", "local",
                        "--workers", "9"], capsys)
    assert code == 2 and "use at most 8" in err and not (tmp_path / "parts").exists()
