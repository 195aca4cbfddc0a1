"""Every result names its scope (issue 34): ``--scope gpu`` reproduces the GPU-only computation exactly (single JSON,
request files, served requests); scope ``server`` adds the host share (positive), its carbon is larger, a platform
override changes it, and unknown scopes or platforms are refused in one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmco2
from llmco2.api.options import Assumptions
from llmco2.carbon.assumptions import resolve_assumptions
from llmco2.carbon.footprint import predict_footprint
from llmco2.carbon.server_scope import server_arrays, server_share
from llmco2.errors import InvalidInputError
from llmco2.prediction.loading import load_predictor
from llmco2.specs import Request, get_gpu, get_model
from llmco2.specs.platforms import get_platform
from tests.helpers import run_cli as run

REQUEST = ["--model", "llama3.1-8b", "--gpu", "a100-80gb", "--batch-size", "1", "--prompt-tokens", "1024",
           "--gen-tokens", "128", "--region", "usa"]
SERVED = ["--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "8", "--dtype", "bf16", "--prompt-tokens", "1000",
          "--gen-tokens", "200", "--serving", "--concurrency", "32", "--serving-requests", "150"]


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run(args, capsys)
    assert code == 0, err
    return json.loads(out)


def test_server_arrays_match_server_share() -> None:
    energy, seconds, used = np.array([48_000.0, 123.4, 0.0, 5e6]), np.array([10.0, 0.37, 5.0, 900.0]), np.array([8, 1, 2, 4])
    plat = get_platform("hgx-h100-8")
    a = server_arrays(energy, seconds, "h100", used, plat, 5.0)
    for i in range(len(energy)):
        one = server_share(float(energy[i]), float(seconds[i]), "h100", int(used[i]), plat, lifetime_years=5.0)
        assert a.server_j[i] == pytest.approx(one.server_energy_j, rel=1e-12)
        assert a.host_j[i] == pytest.approx(one.host_energy_j, rel=1e-12)
        assert a.embodied_non_gpu_g[i] == pytest.approx(one.embodied_non_gpu_g, rel=1e-12)


def test_scope_gpu_json_is_the_gpu_only_computation(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(["predict", *REQUEST, "--scope", "gpu", "--json"], capsys)
    arch, dev = get_model("llama3.1-8b"), get_gpu("a100-80gb")
    req = Request(batch_size=1, prompt_tokens=1024, generated_tokens=128, num_gpus=1, weight_dtype="fp16", engine="vllm")
    fp = predict_footprint([(arch, req, dev)], load_predictor(None),
                           assumptions=resolve_assumptions([dev], region_id="usa", engine="vllm"))
    legacy = fp.record(0)  # no scope: the computation before platforms existed
    assert fp.server is None and "scope" not in legacy["assumptions"]
    for key in ("energy_j", "energy_j_interval", "latency_s", "carbon_g", "extrapolated"):
        assert doc[key] == legacy[key], key  # exact
    assert {k: v for k, v in doc["assumptions"].items() if k != "scope"} == legacy["assumptions"]
    assert doc["assumptions"]["scope"]["scope"] == "gpu"
    assert doc["server_energy_j"]["total"] > doc["energy_j"]["total"]  # reported on both scopes


def test_server_scope_single(capsys: pytest.CaptureFixture[str]) -> None:
    gpu = _json(["predict", *REQUEST, "--scope", "gpu", "--json"], capsys)
    server = _json(["predict", *REQUEST, "--json"], capsys)  # the default scope
    scope = server["assumptions"]["scope"]
    assert scope["scope"] == "server" and scope["platform"] == "hgx-a100-8" and scope["gpu_slot_share"] == 1 / 8
    assert scope["host_energy_j"] > 0 and scope["psu_loss_j"] > 0 and "host_idle_power_w" in scope["sources"]
    assert server["energy_j"] == gpu["energy_j"]  # GPU figures unchanged
    total = server["server_energy_j"]["total"]
    assert total == pytest.approx(server["energy_j"]["total"] + scope["host_energy_j"] + scope["psu_loss_j"])
    grid, pue = server["assumptions"]["grid"]["g_co2eq_per_kwh"], server["assumptions"]["pue"]["value"]
    assert server["carbon_g"]["operational"] == pytest.approx(total / 3.6e6 * pue * grid)
    assert server["carbon_g"]["embodied"] == pytest.approx(gpu["carbon_g"]["embodied"] + scope["embodied_non_gpu_g"])
    assert server["carbon_g"]["total"] > gpu["carbon_g"]["total"]
    other = _json(["predict", *REQUEST, "--platform", "pcie-2s-4gpu", "--json"], capsys)
    assert other["assumptions"]["scope"]["platform"] == "pcie-2s-4gpu"
    assert other["server_energy_j"]["total"] != pytest.approx(total)
    assert other["carbon_g"]["total"] != pytest.approx(server["carbon_g"]["total"])


@pytest.mark.parametrize("extra, flag", [(["--platform", "atlantis-9"], "--platform"), (["--scope", "room"], "--scope")])
def test_unknown_scope_or_platform_is_one_line(extra: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["predict", *REQUEST, *extra], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1 and flag in err


def test_api_scope_and_errors() -> None:
    with pytest.raises(InvalidInputError) as exc:
        Assumptions(scope="rack")
    assert exc.value.field == "scope"
    with pytest.raises(InvalidInputError) as exc:
        llmco2.predict("llama3.1-8b", "h100", prompt_tokens=100, generated_tokens=10, platform="nope")
    assert exc.value.field == "platform"
    gpu = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=100, generated_tokens=10, scope="gpu")
    server = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=100, generated_tokens=10)
    assert (gpu.scope, server.scope) == ("gpu", "server")
    assert server.energy_j == gpu.energy_j and server.server_energy_j["total"] > server.energy_j["total"]
    assert server.to_frame()["server_j"][0] == server.server_energy_j["total"]


def test_request_file_scopes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "req.csv"
    src.write_text("model,gpu,num_gpus,batch_size,prompt_tokens,generated_tokens\n"
                   "llama3.1-8b,h100,1,1,512,64\nllama3.1-8b,a100-80gb,2,4,1024,128\nqwen2-1.5b,l4,1,1,256,32\n")
    frames = {}
    for scope in ("gpu", "server"):
        out = tmp_path / f"{scope}.csv"
        code, _, err = run(["predict", "--requests", str(src), "--out", str(out), "--scope", scope], capsys)
        assert code == 0, err
        assert f"{scope} scope" in err
        frames[scope] = pd.read_csv(out)
        totals = json.loads((tmp_path / f"{scope}.csv.totals.json").read_text())
        assert totals["scope"] == scope and totals["assumptions"]["scope"]["scope"] == scope
        assert totals["server_energy_kwh"] > totals["energy_kwh"]
    gpu, server = frames["gpu"], frames["server"]
    assert (server["server_j"] > server["total_j"]).all()
    assert (server["total_g"] > gpu["total_g"]).all()
    pd.testing.assert_frame_equal(gpu.drop(columns=["operational_g", "embodied_g", "total_g"]),
                                  server.drop(columns=["operational_g", "embodied_g", "total_g"]))
    # --scope gpu: the carbon columns are the GPU-only computation's
    table = pd.read_csv(src)
    items = [(get_model(r.model), Request(batch_size=r.batch_size, prompt_tokens=r.prompt_tokens,
                                          generated_tokens=r.generated_tokens, num_gpus=r.num_gpus, engine="vllm"),
              get_gpu(r.gpu)) for r in table.itertuples()]
    fp = predict_footprint(items, load_predictor(None))
    np.testing.assert_allclose(gpu["total_j"], fp.total_j, rtol=1e-15)
    np.testing.assert_allclose(gpu["operational_g"], fp.operational_g, rtol=1e-15)
    np.testing.assert_allclose(gpu["total_g"], fp.total_g, rtol=1e-15)


def test_served_request_names_its_host_share(capsys: pytest.CaptureFixture[str]) -> None:
    server = _json(["predict", *SERVED, "--json"], capsys)
    gpu = _json(["predict", *SERVED, "--scope", "gpu", "--json"], capsys)
    scope = server["assumptions"]["scope"]
    assert scope["scope"] == "server" and scope["platform"] == "hgx-h100-8" and scope["gpu_slot_share"] == 1.0
    assert scope["host_energy_j"] > 0 and "EcoLogits" in scope["sources"]["host_idle_power_w"]
    assert server["energy_j"] == gpu["energy_j"] and server["server_energy_j"] == gpu["server_energy_j"]
    assert server["carbon_g"]["total"] > gpu["carbon_g"]["total"]
    grid, pue = gpu["assumptions"]["grid"]["g_co2eq_per_kwh"], gpu["assumptions"]["pue"]["value"]
    assert gpu["carbon_g"]["operational"] == pytest.approx(gpu["energy_j"]["total"] / 3.6e6 * pue * grid)
    assert server["serving"]["server_average_power_w"] > server["serving"]["average_power_w"]
    code, text, _ = run(["predict", *SERVED], capsys)
    assert code == 0 and "server energy" in text and "platform: hgx-h100-8" in text and "(server scope)" in text


def test_serve_default_scope_is_gpu() -> None:
    from llmco2.serving.workload import Workload

    w = Workload(np.full(20, 200), np.full(20, 50), None, 4, "fixed")
    old = llmco2.serve("llama3.1-8b", "h100", w)
    new = llmco2.serve("llama3.1-8b", "h100", w, scope="server", platform="dgx-h100")
    assert old.summary["scope"] == "gpu" and new.summary["scope"] == "server"
    np.testing.assert_array_equal(old.requests["energy_j"], new.requests["energy_j"])
    assert old.requests["operational_g"].sum() < new.requests["operational_g"].sum()
    assert new.requests["gpu_s"].sum() == pytest.approx(new.summary["makespan_s"])
