"""Isolated batch runs as observations of the step physics (``llmco2.physics.step_isolated``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from llmco2.data.schema import conform
from llmco2.physics.step_fit import fit_step_params
from llmco2.physics.step_isolated import fit_isolated, fit_isolated_rows, isolated_rows, tensor_parallel_engines
from llmco2.physics.step_physics import EngineOverhead, StepParams

TRUTH = StepParams(eta_compute=0.55, eta_memory=0.75, kernel_gap_s=3e-6, collective_s=20e-6, power_base=0.15,
                   power_compute=0.8, memory_pj_per_byte=200.0,
                   engines={"vllm-v0": EngineOverhead(1e-3, 40e-6, 2e-6, True, serving_sequence_s=300e-6)})


def _table() -> pd.DataFrame:
    rows = []
    for i, (batch, length) in enumerate((b, n) for b in (1, 4, 16, 64) for n in (128, 512, 2048)):
        rows.append({"source": "argonne", "source_row": str(i), "device": "h100-sxm", "num_devices": 1, "tensor_parallel": 1,
                     "engine": "vllm-v0", "model": "llama3.1-8b", "batch_size": batch, "prompt_tokens": length,
                     "generated_tokens": length, "phase": "total", "level": "request", "energy_j": 1.0, "latency_s": 1.0})
    return conform(pd.DataFrame(rows))


def test_rows_cost_one_prefill_and_generated_minus_one_decode_steps_offline():
    iso = isolated_rows(_table())
    assert len(iso.rows) == 12
    assert set(iso.decode.engines) == {"vllm-v0"}  # the importer's label: the benchmark's 2024 vLLM is the V0 engine
    np.testing.assert_array_equal(iso.decode_steps, iso.rows["generated_tokens"].astype(float) - 1)
    lat, energy = iso.cost(TRUTH)
    assert np.all(lat > 0) and np.all(energy > 0)
    # an offline batch run has no online front end: its cost does not depend on it
    other = replace(TRUTH, engines={"vllm-v0": replace(TRUTH.engines["vllm-v0"], serving_sequence_s=5e-3)})
    np.testing.assert_allclose(iso.cost(other)[0], lat)
    # longer runs take longer at the same batch
    by_len = pd.Series(lat, index=iso.rows.index).groupby(iso.rows["batch_size"].astype(int)).apply(lambda s: s.is_monotonic_increasing)
    assert by_len.all()


def test_fit_on_isolated_rows_recovers_the_memory_efficiency_and_power():
    table = _table()
    iso = isolated_rows(table)
    lat, energy = iso.cost(TRUTH)
    table["latency_s"], table["energy_j"] = lat, energy
    iso = isolated_rows(table)
    obs = iso.observations()
    assert {o.name for o in obs} == {"argonne h100-sxm latency", "argonne h100-sxm power"}  # one group per source and GPU
    base = StepParams(eta_compute=0.55, kernel_gap_s=3e-6, collective_s=20e-6, power_compute=0.8, engines=TRUTH.engines)
    fitted, report = fit_step_params(obs, [], base=base, names=("eta_memory", "power_base", "memory_pj_per_byte"))
    assert fitted.eta_memory == pytest.approx(0.75, rel=0.05)
    assert fitted.memory_pj_per_byte == pytest.approx(200.0, rel=0.1)
    assert all(v < 1.0 for v in report.values())


def test_isolated_fit_keeps_the_expert_gemms_at_the_dense_rate():
    table = _table()
    table["latency_s"], table["energy_j"] = isolated_rows(table).cost(TRUTH)
    fitted = fit_isolated(table)
    assert fitted is not None
    assert fitted.eta_expert == 1.0  # not a fitted constant here (a fitted one starts inside its bounds)
    assert fitted.power_busy == 0.0  # nor is the busy power
    assert fitted.eta_memory != StepParams().eta_memory  # the others are


def test_a_leave_one_gpu_out_fit_does_not_see_the_held_out_rows():
    h100 = _table()
    h100["latency_s"], h100["energy_j"] = isolated_rows(h100).cost(TRUTH)
    a100 = h100.assign(device="a100-40gb", source_row=[str(100 + i) for i in range(len(h100))])
    iso = isolated_rows(conform(pd.concat([h100, a100], ignore_index=True)))
    without_a100 = (iso.rows["device"] != "a100-40gb").to_numpy()
    fitted = fit_isolated_rows(iso, without_a100)
    # the held-out rows' measurements may be anything: the fit is the same
    rows = iso.rows.copy()
    rows.loc[~without_a100, ["latency_s", "energy_j"]] = 1.0
    assert fit_isolated_rows(replace(iso, rows=rows), without_a100).to_dict() == fitted.to_dict()
    # and without a mask it is the fit of fit_isolated
    whole = fit_isolated(conform(pd.concat([h100, a100], ignore_index=True)))
    assert whole is not None
    assert fit_isolated_rows(iso, source=whole.source).to_dict() == whole.to_dict()


def test_rows_of_two_files_of_one_source_with_the_same_numbers_are_told_apart():
    """Two files of one source number their rows alike: a row is its source, file, row and phase,
    so neither file's rows are dropped as the other's duplicates nor judged by the other's flags."""
    from llmco2.physics.step_isolated import row_key

    a, b = _table(), _table()
    a["source_file"], b["source_file"] = "one.csv", "two.csv"
    b["batch_size"] = b["batch_size"] * 2  # other configurations, the same row numbers
    table = pd.concat([a, b], ignore_index=True)
    assert row_key(table) == ["source", "source_file", "source_row", "phase"]
    assert len(table.drop_duplicates(subset=row_key(table))) == len(table)
    b["flag"] = "power_exceeds_tdp"  # every row of the second file flagged: the first file's rows stay usable
    iso = isolated_rows(conform(pd.concat([a, b], ignore_index=True)))
    files = iso.rows["source_file"].astype(str).to_numpy()
    assert iso.usable_energy[files == "one.csv"].all() and not iso.usable_energy[files == "two.csv"].any()


def test_a_batch_whose_kv_cache_does_not_fit_runs_in_waves_of_the_sequences_that_do():
    """Llama-2-7B (512 KiB of KV per token) with 1,024 + 1,024 tokens: about 1.07 GB per sequence; an A100-40GB keeps
    (0.9 x 40 GB - 13.5 GB of weights) / 1.07 GB = 20 of them. Batch 64 under vLLM runs as 64 / 20 = 3.2 waves of 20, and
    costs 3.2 times a batch of 20; under HF generate (a static batch) nothing changes; an H100 fits all of batch 16."""
    rows = []
    for i, (device, engine, batch) in enumerate([("a100-40gb", "vllm-v0", 64), ("a100-40gb", "vllm-v0", 20),
                                                  ("a100-40gb", "hf", 64), ("h100-sxm", "vllm-v0", 16)]):
        rows.append({"source": "argonne", "source_row": str(i), "device": device, "num_devices": 1, "tensor_parallel": 1,
                     "engine": engine, "model": "llama2-7b", "batch_size": batch, "prompt_tokens": 1024,
                     "generated_tokens": 1024, "phase": "total", "level": "request", "energy_j": 1.0, "latency_s": 1.0})
    iso = isolated_rows(conform(pd.DataFrame(rows)))
    np.testing.assert_allclose(iso.waves, [3.2, 1.0, 1.0, 1.0])
    lat, energy = iso.cost(TRUTH)
    assert lat[0] == pytest.approx(3.2 * lat[1]) and energy[0] == pytest.approx(3.2 * energy[1])
    assert lat[2] < lat[0]  # the static batch of 64 is costed as if it all ran at once


def test_an_engines_latency_per_all_reduce_is_its_own_where_its_isolated_runs_were_tensor_parallel():
    """Tensor-parallel runs of one engine (2 and 4 H100s under TensorRT-LLM, 0.3 ms per all-reduce) beside
    single-GPU runs of another (vLLM): the isolated fit sets TensorRT-LLM's own latency per all-reduce and keeps
    the global one, which no other row could tell, at its base value; vLLM's is not fitted."""
    truth = replace(TRUTH, collective_s=StepParams().collective_s,
                    engines={**TRUTH.engines, "tensorrt-llm": EngineOverhead(1e-3, 40e-6, 2e-6, True, collective_s=300e-6)})
    single = _table()
    tp = pd.concat([_table().assign(num_devices=n, tensor_parallel=n, engine="tensorrt-llm", model=m)
                    for n in (2, 4) for m in ("llama3.1-8b", "llama2-13b")], ignore_index=True)  # 32 and 40 layers
    table = conform(pd.concat([single, tp], ignore_index=True).assign(source_row=[str(i) for i in range(len(single) + len(tp))]))
    iso = isolated_rows(table)
    table["latency_s"], table["energy_j"] = iso.cost(truth)
    iso = isolated_rows(table)
    assert tensor_parallel_engines(iso, np.ones(len(iso.rows), dtype=bool)) == ["tensorrt-llm"]
    fitted = fit_isolated_rows(iso)
    assert fitted.collective_s == StepParams().collective_s
    assert fitted.engine("tensorrt-llm").collective_s == pytest.approx(300e-6, rel=0.2)
    assert fitted.engine("vllm-v0").collective_s == TRUTH.engines["vllm-v0"].collective_s
