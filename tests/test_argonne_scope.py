"""The Argonne rows' measurement scope: how many accelerators each power reading summed."""

from __future__ import annotations

from pathlib import Path

from llmco2.data.importers import import_file
from llmco2.data.importers.argonne import NODE_DEVICES, probe_devices

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
    assert list(table["num_devices"]) == [1, 2, 2, 4, 2, 2]  # the rows themselves stay as published
    assert list(table["energy_j"]) == [800.0, 1800.0, 1400.0, 3000.0, 2000.0, 800.0]
