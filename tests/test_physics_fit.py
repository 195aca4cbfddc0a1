"""Fitting the physics prior, and the rows it is allowed to learn energy from."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmco2.data.dataset import energy_data
from llmco2.data.usable import usable_rows
from llmco2.physics.prior_fit import fit_physics
from llmco2.physics.priors import PhaseInputs, PhysicsPrior


def _rows(engine: str, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt, gen, batch = int(rng.integers(16, 2048)), int(rng.integers(2, 256)), int(rng.choice([1, 2, 4, 8, 32]))
        for phase in ("prefill", "decode"):
            out.append(dict(source="test", source_row=i, device="h100-sxm", engine=engine, num_devices=1,
                            model="llama3.1-8b", batch_size=batch, prompt_tokens=prompt,
                            generated_tokens=gen if phase == "decode" else 1, phase=phase, level="request",
                            energy_j=1.0, weight_bits=16))
    return out


def test_fit_recovers_the_overheads_that_generated_the_latencies() -> None:
    """Latencies made by a known prior (two engines, one GPU) give back its launch overheads and
    roofline efficiency, and engines without rows keep the catalog priors."""
    table = pd.DataFrame(_rows("hf", 80, 0) + _rows("vllm", 80, 1))
    data = energy_data(table)
    truth = PhysicsPrior(efficiency={"h100-sxm": [0.45, 0.7]}, launch_us={"hf": 40.0, "vllm": 3.0},
                         step_ms={"hf": 2.5, "vllm": 0.8})
    x = PhaseInputs.build(data.items, *data.analysis())
    lat, _ = truth.latency_s(x)
    rows = lat[data.config]
    table["latency_s"] = np.where(data.phase == 0, rows[:, 0], rows[:, 1])
    fit = fit_physics(energy_data(table))
    assert fit.launch_us["hf"] == pytest.approx(40.0, rel=0.15)
    assert fit.efficiency["h100-sxm"][1] == pytest.approx(0.7, rel=0.15)
    assert fit.efficiency["h100-sxm"][0] == pytest.approx(0.45, rel=0.15)
    assert set(fit.fitted_engines) == {"hf", "vllm"}
    assert fit.launch_us["tensorrt-llm"] == PhysicsPrior().launch_us["tensorrt-llm"]  # no rows: the prior
    assert fit.fit_report["latency_median_ape_per_engine"]["hf"]["median_ape"] < 0.1


def test_usable_rows_drop_quantised_counter_readings() -> None:
    """An NVML reading over a window shorter than the counter's update period, a 0 J repeat
    (std > mean) or the importer's counter_quantised flag keeps a row out of training."""
    table = pd.DataFrame({
        "source": ["h100_hf"] * 4, "level": ["request"] * 4, "measurement": ["nvml_energy"] * 4,
        "flag": ["", "", "", "counter_quantised"], "latency_s": [0.04, 1.2, 1.3, 2.0],
        "energy_j": [20.0, 300.0, 10.0, 400.0], "energy_std_j": [1.0, 10.0, 14.0, 5.0],
    })
    kept, left = usable_rows(table)
    assert kept["energy_j"].tolist() == [300.0]
    assert sum(left.values()) == 3 and left["flag counter_quantised"] == 1


def test_usable_rows_judge_an_amortised_pass_by_its_window() -> None:
    """A 27 ms prefill measured as 114 passes in one 3 s window (``llmco2 measure``'s amortised
    method) is usable; the same pass read in a window of its own is not."""
    table = pd.DataFrame({
        "source": ["llmco2"] * 2, "level": ["request"] * 2, "measurement": ["nvml_energy"] * 2,
        "flag": ["", ""], "latency_s": [0.027, 0.027], "window_s": [3.11, np.nan],
        "energy_j": [9.0, 9.0], "energy_std_j": [1.2, 1.2],
    })
    kept, left = usable_rows(table)
    assert kept["window_s"].tolist() == [3.11]
    assert sum(left.values()) == 1


def test_fit_recovers_all_reduce_latency_and_per_sequence_overhead() -> None:
    """Latencies made by a known prior on one, two and four GPUs at batch 1-32 give back, from the
    rows alone (``prior_weight=0``), the all-reduce latency (which only multi-GPU rows inform), the
    per-step and per-sequence overheads and the efficiencies; the activity pair of the power model
    is fitted from energies the same prior made. With the default pull towards the catalog
    priors the fitted latencies still match the rows."""
    rows = []
    for n, seed in ((1, 2), (2, 3), (4, 4)):
        for r in _rows("vllm", 40, seed):
            rows.append({**r, "num_devices": n, "tensor_parallel": n})
    table = pd.DataFrame(rows)
    data = energy_data(table)
    truth = PhysicsPrior(efficiency={"h100-sxm": [0.5, 0.7]}, launch_us={"vllm": 2.0}, step_ms={"vllm": 1.0},
                         sequence_us={"vllm": 40.0}, collective_us=25.0, activity=np.array([0.8, 0.6]))
    x = PhaseInputs.build(data.items, *data.analysis())
    assert set(np.unique(x.collectives)) == {0.0, 64.0}  # llama3.1-8b: 32 layers x 2 all-reduces
    energy, lat = truth.energy_j(x)
    pick = lambda v: np.where(data.phase == 0, v[data.config][:, 0], v[data.config][:, 1])  # noqa: E731
    table["latency_s"], table["energy_j"] = pick(lat), pick(energy)
    fitted = energy_data(table)
    fit = fit_physics(fitted, fitted, prior_weight=0.0)
    assert fit.collective_us == pytest.approx(25.0, rel=0.02)
    assert fit.sequence_us["vllm"] == pytest.approx(40.0, rel=0.02)
    assert fit.step_ms["vllm"] == pytest.approx(1.0, rel=0.02)
    assert fit.efficiency["h100-sxm"] == pytest.approx([0.5, 0.7], rel=0.02)
    assert fit.fit_report["collective_rows"] > 0
    assert fit.activity.tolist() == pytest.approx([0.8, 0.6], abs=0.03)
    pulled = fit_physics(fitted, fitted)
    assert pulled.fit_report["latency_median_ape_per_engine"]["vllm"]["median_ape"] < 0.02
