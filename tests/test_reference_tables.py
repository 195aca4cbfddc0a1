"""Seed 000's per-layer table and seed 004's intensity / roofline, checked against hand-computed numbers."""

from __future__ import annotations

import pytest

from llmco2.analytic.reference_tables import (
    SEED000_FIXES,
    TableRow,
    layer_table,
    model_table_totals,
    seed004_bound,
    seed004_bytes,
    seed004_flops,
    seed004_intensity,
    table_totals,
)
from llmco2.errors import InvalidInputError
from llmco2.specs.gpus import GPU
from llmco2.specs.models import ModelArch

A100_80GB = GPU(
    id="a100-sxm4-80gb", name="NVIDIA A100 80GB SXM", vendor="nvidia", architecture="ampere", form_factor="sxm4",
    memory_type="HBM2e", memory_size_gb=80.0, memory_bandwidth_gb_s=2039.0, interconnect="nvlink3",
    interconnect_bandwidth_gb_s=600.0, tdp_w=400.0, process_node_nm=7, gpus_per_node=8, release_year=2020,
    peak_dense_tops={"fp16": 312.0, "bf16": 312.0}, sources={},
)

LLAMA2_7B = ModelArch(
    id="llama-2-7b", hidden_size=4096, intermediate_size=11008, num_layers=32, num_heads=32, num_kv_heads=32,
    head_dim=128, vocab_size=32000,
)

# H=8, I=16, 2 heads of d=4 (heads*d = H), n=1 KV head, v=10, 3 layers
TINY = ModelArch(id="tiny", hidden_size=8, intermediate_size=16, num_layers=3, num_heads=2, num_kv_heads=1,
                 head_dim=4, vocab_size=10)


def _cm(rows: list[TableRow]) -> dict[int, tuple[int, int]]:
    return {r.index: (r.compute, r.memory) for r in rows}


# -- seed 004 --------------------------------------------------------------------------------------------
def test_a100_ridge_point_is_153() -> None:
    ridge = A100_80GB.ridge_point("fp16")  # 312e12 / 2039e9 = 153.016...
    assert round(ridge) == 153
    assert ridge == pytest.approx(312e12 / 2039e9)


def test_llama2_7b_prefill_is_compute_bound() -> None:
    # N(24BSH^2 + 4BS^2H) = 32 * (24*1024*4096^2 + 4*1024^2*4096)
    #                     = 32 * (412_316_860_416 + 17_179_869_184) = 32 * 429_496_729_600
    flops = seed004_flops(LLAMA2_7B, 1, 1024, "prefill")
    assert flops == 32 * (24 * 1 * 1024 * 4096**2 + 4 * 1 * 1024**2 * 4096) == 13_743_895_347_200
    # 2Z*1e9 + 4NBSH = 13.48e9 + 4*32*1024*4096 = 13_480_000_000 + 536_870_912
    nbytes = seed004_bytes(LLAMA2_7B, 1, 1024, "prefill", params=6.74e9)
    assert nbytes == pytest.approx(14_016_870_912)
    intensity = seed004_intensity(LLAMA2_7B, 1, 1024, "prefill", params=6.74e9)
    assert intensity == pytest.approx(13_743_895_347_200 / 14_016_870_912)  # ~980.5 FLOPs/byte
    assert intensity == pytest.approx(980.5, abs=0.1)
    assert seed004_bound(intensity, A100_80GB.ridge_point("fp16")) == "compute"


def test_llama2_7b_decode_is_memory_bound() -> None:
    # N(24B S_i H^2 + 4B S_i S_c H) = 32 * (24*4096^2 + 4*1024*4096) = 32 * (402_653_184 + 16_777_216)
    flops = seed004_flops(LLAMA2_7B, 1, 1, "decode", cached_len=1024)
    assert flops == 32 * 419_430_400 == 13_421_772_800
    # 2Z*1e9 + 8NBS_iH + 2NBS_cH = 13_480_000_000 + 8*32*4096 + 2*32*1024*4096
    #                            = 13_480_000_000 + 1_048_576 + 268_435_456 = 13_749_484_032
    nbytes = seed004_bytes(LLAMA2_7B, 1, 1, "decode", cached_len=1024, params=6.74e9)
    assert nbytes == pytest.approx(13_749_484_032)
    intensity = seed004_intensity(LLAMA2_7B, 1, 1, "decode", cached_len=1024, params=6.74e9)
    assert intensity == pytest.approx(13_421_772_800 / 13_749_484_032)  # ~0.976 FLOPs/byte
    assert intensity == pytest.approx(0.976, abs=0.001)
    assert seed004_bound(intensity, 312e12 / 2039e9) == "memory"


def test_seed004_default_params_is_param_count() -> None:
    assert seed004_bytes(LLAMA2_7B, 1, 8, "prefill") == 2 * LLAMA2_7B.param_count() + 4 * 32 * 8 * 4096


def test_seed004_bound_edges() -> None:
    assert seed004_bound(153.0, 153.0) == "compute"
    assert seed004_bound(152.9, 153.0) == "memory"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: seed004_flops(LLAMA2_7B, 0, 8, "prefill"), "batch"),
        (lambda: seed004_flops(LLAMA2_7B, 1, 8, "prefill", cached_len=4), "cached_len"),
        (lambda: seed004_flops(LLAMA2_7B, 1, 1, "decode", cached_len=-1), "cached_len"),
        (lambda: seed004_bytes(LLAMA2_7B, 1, 8, "prefill", params=0), "params"),
        (lambda: seed004_bound(1.0, 0.0), "ridge"),
        (lambda: layer_table(TINY, 2, 3, "training"), "phase"),
        (lambda: layer_table(TINY, 2, 3, "decode", tp=0), "tp"),
        (lambda: layer_table(TINY, 2, 0, "decode"), "seq_len"),
    ],
)
def test_bad_input_names_field(call, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        call()
    assert err.value.field == field


# -- seed 000: tiny arch B=2, S=3, H=8, I=16, n=1, d=4, v=10 --------------------------------------------------
def test_seed000_prefill_rows_hand_computed() -> None:
    rows = layer_table(TINY, 2, 3, "prefill")
    assert [r.index for r in rows] == list(range(1, 16))
    assert _cm(rows) == {
        1: (960, 80),      # 2BSvH = 2*2*3*10*8 = 960; vH = 80 (fixed from SvH = 240)
        2: (192, 192),     # 4BSH = 4*2*3*8 = 192
        3: (1536, 128),    # 2BSHH + 4BHSnd = 768 + 768; HH + 2Hnd = 64 + 64
        4: (576, 0),       # 4BSSH = 4*2*3*3*8
        5: (0, 48),        # 2BSnd = 2*2*3*1*4
        6: (0, 0),
        7: (768, 64),      # 2BSHH = 2*2*3*64; HH
        8: (0, 0),
        9: (192, 192),     # 4BSH
        10: (3072, 256),   # gated: 4BSHI = 4*2*3*8*16 = 3072; 2HI = 256
        11: (96, 0),       # BSI = 2*3*16
        12: (0, 192),      # 2BSI = 2*2*3*16
        13: (1536, 128),   # 2BSHI = 2*2*3*8*16; HI
        14: (0, 0),
        15: (960, 80),     # LM head, as row 1
    }
    comm = {r.index: r.communication for r in rows if r.communication}
    assert comm == {6: 192.0, 8: 96.0, 14: 96.0}  # 4BSH/tp, 2BSH, 2BSH (tp=1, as printed)


def test_seed000_decode_rows_hand_computed() -> None:
    rows = layer_table(TINY, 2, 3, "decode")
    assert _cm(rows) == {
        1: (320, 80),      # 2BvH = 2*2*10*8 = 320; vH = 80
        2: (64, 64),       # 4BH = 4*2*8 (fixed from printed 4BSH = 192)
        3: (512, 128),     # 2BHH + 4BHnd = 256 + 256; HH + 2Hnd = 128
        4: (192, 0),       # 4BSH = 4*2*3*8
        5: (0, 16),        # 2Bnd = 2*2*1*4
        6: (0, 0),
        7: (256, 64),      # 2BHH = 2*2*64
        8: (0, 0),
        9: (64, 64),       # 4BH (compute fixed from printed 4BSH)
        10: (1024, 256),   # 4BHI = 4*2*8*16; 2HI
        11: (32, 0),       # BI = 2*16
        12: (0, 64),       # 2BI = 2*2*16
        13: (512, 128),    # 2BHI = 2*2*8*16; HI
        14: (0, 0),
        15: (320, 80),
    }
    comm = {r.index: r.communication for r in rows}
    assert comm[6] == 64.0 and comm[8] == 0.0 and comm[14] == 0.0  # 4BH/tp; (tp-1) terms vanish at tp=1


def test_seed000_tp_communication_rows() -> None:
    dec = {r.index: r.communication for r in layer_table(TINY, 2, 3, "decode", tp=4)}
    assert dec[6] == pytest.approx(4 * 2 * 8 / 4)            # 4BH/tp = 16
    assert dec[8] == pytest.approx(2 * 8 * (4 - 1) / 4)      # BH(tp-1)/tp = 12
    assert dec[14] == pytest.approx(2 * 2 * 8 * 3 / 4**2)    # 2BH(tp-1)/tp^2 = 6
    pre = {r.index: r.communication for r in layer_table(TINY, 2, 3, "prefill", tp=4)}
    assert pre[6] == pytest.approx(4 * 2 * 3 * 8 / 4)        # 4BSH/tp = 48
    assert pre[8] == pre[14] == 96.0                         # 2BSH, independent of tp as printed
    # compute and memory do not depend on tp
    assert _cm(layer_table(TINY, 2, 3, "decode", tp=4)) == _cm(layer_table(TINY, 2, 3, "decode"))


def test_seed000_ungated_mlp() -> None:
    plain = TINY.with_overrides(mlp_gated=False)
    rows = {r.index: r for r in layer_table(plain, 2, 3, "decode")}
    assert 11 not in rows and len(rows) == 14
    assert (rows[10].compute, rows[10].memory) == (512, 128)  # 2BHI = 2*2*8*16; HI


def test_table_and_model_totals() -> None:
    rows = layer_table(TINY, 2, 3, "prefill", tp=2)
    tot = table_totals(rows)
    # compute: 960+192+1536+576+768+192+3072+96+1536+960 = 9888
    # memory: 80+192+128+48+64+192+256+192+128+80 = 1360
    assert tot["compute"] == 9888 and tot["memory"] == 1360
    assert tot["communication"] == pytest.approx(96 + 96 + 96)  # 4BSH/2 + 2BSH + 2BSH
    model = model_table_totals(TINY, 2, 3, "prefill", tp=2)
    # 3 layers x rows 2-14 + rows 1 and 15 once: compute 3*(9888-1920) + 1920 = 25_824
    assert model["compute"] == 3 * (9888 - 2 * 960) + 2 * 960 == 25_824
    assert model["memory"] == 3 * (1360 - 2 * 80) + 2 * 80 == 3760
    assert model["communication"] == pytest.approx(3 * 288)
    dec = model_table_totals(TINY, 2, 3, "decode")
    middle = table_totals(r for r in layer_table(TINY, 2, 3, "decode") if 2 <= r.index <= 14)
    assert dec["compute"] == 3 * middle["compute"] + 2 * 320
    assert dec["memory"] == 3 * middle["memory"] + 2 * 80


def test_fixes_are_listed() -> None:
    rows = " ".join(f[0] for f in SEED000_FIXES)
    for needle in ("decode 2", "decode 9", "10", "11"):
        assert needle in rows
    assert all(len(f) == 3 for f in SEED000_FIXES)
