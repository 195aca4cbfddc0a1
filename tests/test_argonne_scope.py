"""The Argonne rows' measurement scope: how many accelerators each power reading summed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmco2.data.dataset import energy_data
from llmco2.data.importers import import_file
from llmco2.data.importers.argonne import NODE_DEVICES, probe_devices
from llmco2.data.scope import NODE_WIDE_REASON, node_wide, unused_idle_w
from llmco2.physics.step_isolated import isolated_rows
from llmco2.specs.gpu_power import unused_power_w

HEADER = ("source,hardware,num_devices,framework,model,input_len,output_len,batch_size,latency_s,"
          "throughput_tok_s_in_plus_out,avg_power_W,power_unit_in_file,energy_J_est,energy_per_output_token_J")


def line(commit: str, hw: str, n: int, power: float, unit: str, fw: str = "vLLM",
         model: str = "meta-llama/Meta-Llama-3-8B") -> str:
    """One Argonne results line (256 + 256 tokens, batch 8, 2 s); ``power`` in W."""
    return f"\"{commit}\",{hw},{n},{fw},{model},256,256,8,2.0,1000,{power},{unit},{power * 2.0:.2f},0.5"


def test_superseded_watt_rows_read_the_whole_node(tmp_path: Path) -> None:
    """The superseded commit's W readings sum the node (8 Gaudi2, 4 H100); its mW rows and later files the
    devices the run used."""
    old, gaudi = "943daf64 (superseded)", ("Habana Gaudi2", "Deepspeed", "mistralai/Mistral-7B-v0.1")
    path = tmp_path / "argonne.csv"
    path.write_text("\n".join([
        HEADER,
        line("1411ecc8 (latest)", "Nvidia H100 GPU", 1, 400.0, "mW"),
        line(old, "Nvidia H100 GPU", 2, 900.0, "W"),
        line(old, "Nvidia H100 GPU", 2, 700.0, "mW"),
        line(old, "Nvidia H100 GPU", 4, 1500.0, "W"),
        line(old, gaudi[0], 2, 1000.0, "W", fw=gaudi[1], model=gaudi[2]),
        line("1411ecc8 (latest)", gaudi[0], 2, 400.0, "W", fw=gaudi[1], model=gaudi[2]),
    ]) + "\n", encoding="utf-8")
    table = import_file("argonne", path).table
    assert list(probe_devices(table, path)) == [1, NODE_DEVICES["h100-sxm"], 2, 4, NODE_DEVICES["gaudi2"], 2]
    assert list(table["metered_devices"]) == list(probe_devices(table, path))  # the importer writes the scope
    assert list(table["num_devices"]) == [1, 2, 2, 4, 2, 2]  # the rows themselves stay as published
    assert list(table["energy_j"]) == [800.0, 1800.0, 1400.0, 3000.0, 2000.0, 800.0]


def test_a_node_wide_reading_keeps_its_latency_but_not_its_energy(tmp_path: Path) -> None:
    """Two H100s read over four: the row stays in the canonical table as published, its time enters the isolated
    rows but its energy is neither a fit's power nor a training target; the four-card row read over its own four is
    both. The unused cards' idle (for comparisons at the reading's scope) is two cards' catalog bare idle: no process
    holds a context on them (H100 SXM 71.8 W, not the 120 W of a card holding a model)."""
    old = "943daf64 (superseded)"
    path = tmp_path / "argonne.csv"
    path.write_text("\n".join([HEADER, line(old, "Nvidia H100 GPU", 2, 900.0, "W"), line(old, "Nvidia H100 GPU", 4, 1500.0, "W")])
                    + "\n", encoding="utf-8")
    table = import_file("argonne", path).table
    assert list(node_wide(table)) == [True, False] and list(table["energy_j"]) == [1800.0, 3000.0]
    np.testing.assert_allclose(unused_idle_w(table), [2 * 71.8, 0.0])
    assert unused_power_w("h100-sxm")[0] == 71.8
    data = energy_data(table)
    assert list(data.table["num_devices"]) == [4] and data.excluded == {NODE_WIDE_REASON: 1}
    iso = isolated_rows(table)
    assert list(iso.rows["num_devices"]) == [2, 4] and list(iso.usable_energy) == [False, True]


def test_argonne_gaudi2_readings_sum_the_node(shared_data: Path) -> None:
    """The real file: every Gaudi2 row reads the node's eight cards, so no Gaudi2 energy is a target; read as the
    used cards' energy they would draw 1.7x more per card on two cards than on four (median 433 W against 257 W),
    the node's idle cards shared over fewer used ones."""
    path = next(shared_data.rglob("argonne_llm_inference_bench.csv"), None)
    if path is None:
        pytest.skip("argonne_llm_inference_bench.csv not in the shared data")
    table = import_file("argonne", path).table
    gaudi = table[table["device"] == "gaudi2"]
    assert (gaudi["metered_devices"] == NODE_DEVICES["gaudi2"]).all() and node_wide(gaudi).all()

    def per_card(n: int) -> float:
        sel = gaudi["num_devices"] == n
        return float((gaudi["energy_j"][sel].astype(float) / gaudi["latency_s"][sel].astype(float) / n).median())

    assert per_card(2) / per_card(4) > 1.6


class _Fixed:
    """A predictor of 1,000 J, 800-1,300 J interval (and, timed, 3 s) per row."""

    def predict_row_intervals(self, data):
        n = len(data.config)
        return np.full(n, 1000.0), np.full(n, 800.0), np.full(n, 1300.0)


class _Timed(_Fixed):
    def predict_row_latency(self, data):
        return np.full(len(data.config), 3.0)


def test_a_node_wide_test_reading_is_compared_at_its_scope(tmp_path: Path) -> None:
    """In a held-out test part a node-wide reading is kept and compared with the prediction plus the unused cards'
    bare idle power over the predicted time (the measured time for a predictor that predicts none)."""
    from llmco2.training.experiment import predictions_frame

    old = "943daf64 (superseded)"
    path = tmp_path / "argonne.csv"
    path.write_text("\n".join([HEADER, line(old, "Nvidia H100 GPU", 2, 900.0, "W"), line(old, "Nvidia H100 GPU", 4, 1500.0, "W")])
                    + "\n", encoding="utf-8")
    data = energy_data(import_file("argonne", path).table, node_wide_readings=True)
    assert len(data.config) == 2
    idle = 2 * unused_power_w("h100-sxm")[0]
    frame = predictions_frame(_Timed(), data)
    np.testing.assert_allclose(frame["predicted_j"], [1000.0 + idle * 3.0, 1000.0])  # over its predicted 3 s
    np.testing.assert_allclose(frame["low_j"], [800.0 + idle * 3.0, 800.0])
    np.testing.assert_allclose(frame["ape"], np.abs(frame["predicted_j"] / np.array([1800.0, 3000.0]) - 1.0))
    np.testing.assert_allclose(predictions_frame(_Fixed(), data)["predicted_j"], [1000.0 + idle * 2.0, 1000.0])  # the measured 2 s
