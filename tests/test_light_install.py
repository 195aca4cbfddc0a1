"""The core install predicts without the extras: a wheel of the package, installed alone (no
dependencies of its own, the extras' modules made unimportable), answers ``llmco2.predict``,
``llmco2 predict`` and ``llmco2 predict --serving``, and never imports torch; a command that needs an
extra says which one in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Modules of the extras (train, measure, cluster, plots) that the core install does not have.
EXTRAS = ("torch", "torch_geometric", "hydra", "omegaconf", "sklearn", "skops", "matplotlib", "dask", "distributed",
          "transformers", "accelerate", "pynvml")

BLOCKER = f"""
import importlib.abc, sys
BLOCKED = {EXTRAS!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp),
                            str(ROOT)], capture_output=True, text=True, cwd=tmp)
    if build.returncode:
        pytest.skip(f"no wheel could be built here: {build.stderr.strip().splitlines()[-1:]}")
    wheel = next(tmp.glob("llmco2-*.whl"))
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, cwd=tmp)
    blocker = tmp / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(site)]), "PYTHONNOUSERSITE": "1"}
    return {"cwd": str(tmp), "site": str(site), **{f"env_{k}": v for k, v in env.items()}}


def _run(installed: dict[str, str], args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k[4:]: v for k, v in installed.items() if k.startswith("env_") and k != "env_LLMCO2_SHARED_DATA"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=installed["cwd"], env=env, timeout=300)


def test_the_wheel_holds_the_data_the_core_needs(installed: dict[str, str]) -> None:
    site = Path(installed["site"])
    assert (site / "llmco2" / "prediction" / "checkpoints" / "default.safetensors").is_file()
    assert (site / "llmco2" / "specs" / "data" / "gpus.toml").is_file()
    assert (site / "llmco2" / "serving" / "data" / "step_physics.json").is_file()
    assert (site / "llmco2" / "serving" / "data" / "azure_lengths.npz").is_file()


def test_predict_without_the_extras_never_imports_torch(installed: dict[str, str]) -> None:
    code = textwrap.dedent("""
        import sys, llmco2
        assert llmco2.__file__.startswith(sys.argv[1]), llmco2.__file__
        p = llmco2.predict("llama3.1-8b", "h100", prompt_tokens=500, generated_tokens=100, region="FR")
        assert p.energy_j["total"] > 0 and p.carbon_g["total"] > 0
        import pandas as pd
        f = llmco2.predict_frame(pd.DataFrame([{"model": "qwen2-7b", "gpu": "a100-80gb", "batch_size": 2,
                                                "prompt_tokens": 100, "generated_tokens": 20}]))
        assert f["total_j"][0] > 0
        print(sorted(m for m in sys.modules if m.split(".")[0] in EXTRAS))
    """).replace("EXTRAS", repr(EXTRAS))
    done = _run(installed, ["-c", code, installed["site"]])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_command_line_predicts_and_serves_without_the_extras_or_the_shared_data(installed: dict[str, str]) -> None:
    single = _run(installed, ["-m", "llmco2.cli", "predict", "--model", "llama3.1-8b", "--gpu", "h100", "--batch-size", "1",
                              "--prompt-tokens", "500", "--gen-tokens", "100", "--json"])
    assert single.returncode == 0, single.stderr
    served = _run(installed, ["-m", "llmco2.cli", "predict", "--model", "llama3.1-8b", "--gpu", "h100", "--prompt-tokens", "500",
                              "--gen-tokens", "100", "--serving", "--concurrency", "4", "--serving-requests", "40", "--json"])
    assert served.returncode == 0, served.stderr
    assert '"energy_j"' in single.stdout and '"serving"' in served.stdout


def test_a_command_that_needs_an_extra_names_it(installed: dict[str, str], tmp_path: Path) -> None:
    done = _run(installed, ["-m", "llmco2.cli", "report", "compare", "--model", "llama3.1-8b", "--batch-size", "1",
                            "--prompt-tokens", "100", "--gen-tokens", "20", "--gpus", "h100,a100-80gb", "-o", str(tmp_path / "c.png")])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "llmco2: error: report needs the plots extra (matplotlib is not installed): pip install 'llmco2[plots]'"]
