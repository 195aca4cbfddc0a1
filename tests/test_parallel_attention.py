"""Seed 003 golden cases (Tests 1, 2, 3, CP-1, CP-2) through the API and the CLI."""

from __future__ import annotations

import json

import pytest

from llmco2.analytic.parallel import RESULT_KEYS, attention_cost
from llmco2.cli import main
from llmco2.errors import InvalidInputError

BASE = dict(hidden_size=1024, num_heads=16, batch_size=2, seq_len=128)

GOLDEN = {
    "test1_prefill_single_chip": (
        {},
        dict(flops_per_chip=2281701376, weight_memory_per_chip=8388608, activation_memory_per_chip=2621440,
             kv_cache_per_chip=1048576, flops_total=2281701376, weight_memory_total=8388608,
             activation_memory_total=2621440, kv_cache_total=1048576, communication_bytes=0),
    ),
    "test2_prefill_tp4": (
        dict(tp=4),
        dict(flops_per_chip=570425344, weight_memory_per_chip=2097152, activation_memory_per_chip=1441792,
             kv_cache_per_chip=262144, flops_total=2281701376, weight_memory_total=8388608,
             activation_memory_total=5767168, kv_cache_total=1048576, communication_bytes=524288),
    ),
    "test3_decode_tp4": (
        dict(phase="decode", tp=4, new_tokens=1),
        dict(flops_per_chip=4458496, weight_memory_per_chip=2097152, activation_memory_per_chip=11264,
             kv_cache_per_chip=264192, flops_total=17833984, weight_memory_total=8388608,
             activation_memory_total=45056, kv_cache_total=1056768, communication_bytes=4096),
    ),
    "cp2_prefill_allgather": (
        dict(cp=4, cp_mode="kv-allgather"),
        dict(flops_per_chip=570425344, weight_memory_per_chip=8388608, activation_memory_per_chip=655360,
             kv_cache_per_chip=262144, flops_total=2281701376, weight_memory_total=33554432,
             activation_memory_total=2621440, kv_cache_total=1048576, communication_bytes=1048576),
    ),
    "cp1_prefill_kv_sharded": (
        dict(cp=4, cp_mode="kv-sharded"),
        dict(flops_per_chip=570425344, weight_memory_per_chip=8388608, activation_memory_per_chip=655360,
             kv_cache_per_chip=262144, flops_total=2281701376, weight_memory_total=33554432,
             activation_memory_total=2621440, kv_cache_total=1048576, communication_bytes=139264),
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_golden_api(case: str) -> None:
    options, expected = GOLDEN[case]
    assert attention_cost(**BASE, **options).to_dict() == expected


def _cli_args(options: dict) -> list[str]:
    args = ["analyze", "attention", "--hidden-size", "1024", "--num-heads", "16", "--batch-size", "2", "--seq-len", "128"]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args + ["--json"]


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_golden_cli(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    options, expected = GOLDEN[case]
    assert main(_cli_args(options)) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == list(RESULT_KEYS)
    assert all(type(v) is int for v in out.values())
    assert out == expected


def test_decode_kv_len_past_matches_seed_alternative() -> None:
    # Test 3's note: excluding the new token gives KV cache 1,048,576 total and 262,144 per chip.
    cost = attention_cost(**BASE, phase="decode", tp=4, kv_len="past")
    assert (cost.kv_cache_total, cost.kv_cache_per_chip) == (1048576, 262144)


def test_decode_cp_attention_core_rules() -> None:
    # Seed 003 "decode, KV-sharded CP, attention core only" rules written out by hand:
    # d=1024, h=16, dh=64, B=2, T=1, S_k=128 past, cp=4 -> S_local=32.
    c = attention_cost(**BASE, phase="decode", cp=4, decode_projections="none", kv_len="past")
    scores = 2 * 2 * 16 * 1 * 32 * 64
    assert c.flops_per_chip == 2 * scores + 2 * 2 * 1024 * 1024
    assert c.activation_memory_per_chip == (2 * 1024 + 2 * 1024) * 2
    assert c.weight_memory_per_chip == 4 * 1024 * 1024 * 2
    assert c.kv_cache_per_chip == 2 * 2 * 32 * 1024 * 2
    assert c.communication_bytes == 2 * 1 * 16 * 2 * 4 + 2 * 1024 * 2
    assert c.flops_total == 4 * c.flops_per_chip


def test_hybrid_tp_cp_prefill_rules() -> None:
    c = attention_cost(**BASE, tp=4, cp=4)
    m_local, d_local = 2 * 32, 256
    assert c.flops_per_chip == 3 * 2 * m_local * 1024 * d_local + 2 * (2 * 2 * 4 * 32 * 128 * 64) + 2 * m_local * d_local * 1024
    assert c.weight_memory_per_chip == 4 * 1024 * d_local * 2
    assert c.activation_memory_per_chip == (m_local * 1024 + 3 * m_local * d_local + m_local * 1024) * 2
    assert c.kv_cache_per_chip == 2 * 2 * 32 * d_local * 2
    assert c.communication_bytes == 2 * 32 * 4 * 2 * 4 + m_local * d_local * 2 + m_local * 1024 * 2
    assert c.flops_total == 16 * c.flops_per_chip
    no_tp = attention_cost(**BASE, tp=4, cp=4, materialize_hidden=False)
    assert no_tp.communication_bytes == c.communication_bytes - m_local * 1024 * 2
    assert no_tp.activation_memory_per_chip == c.activation_memory_per_chip - m_local * (1024 - d_local) * 2


def test_hybrid_tp_cp_decode_rules() -> None:
    c = attention_cost(**BASE, phase="decode", tp=4, cp=4, decode_projections="q", kv_len="past")
    d_local = 256
    assert c.flops_per_chip == 2 * 2 * 1024 * d_local + 2 * (2 * 2 * 4 * 1 * 32 * 64) + 2 * 2 * d_local * 1024
    assert c.activation_memory_per_chip == (2 * 1024 + 2 * d_local + 2 * 1024) * 2
    assert c.communication_bytes == 2 * 1 * 4 * 2 * 4 + 2 * d_local * 2 + 2 * 1024 * 2


@pytest.mark.parametrize(
    "options, field",
    [
        (dict(num_heads=15), "num_heads"),
        (dict(tp=3), "tp"),
        (dict(cp=3), "cp"),
        (dict(seq_len=0), "seq_len"),
        (dict(batch_size=-1), "batch_size"),
    ],
)
def test_invalid_inputs_name_the_field(options: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        attention_cost(**{**BASE, **options})
    assert err.value.field == field
