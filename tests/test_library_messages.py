"""Library errors name API parameters, never command-line flags: a Python user calling
``llmco2.predict(...)`` reads ``intensity`` where the command line prints ``--intensity-file``.

The library writes the parameters its text names between backticks (``give either `intensity` or
`carbon_intensity`, not both``) and sets ``field``; :mod:`llmco2.cli.flags` turns both into the
flags the user typed. Two checks: bad inputs to the library raise messages without a flag that the
command line maps back, and no message written in the library's source names a flag (a static scan,
so that a message on a path these calls do not reach is caught too).
"""

from __future__ import annotations

import ast
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import llmco2
from llmco2.cli.flags import FLAGS, as_command_line, command_line_text
from llmco2.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[1] / "llmco2"
#: A flag in a text: ``--word`` not inside a longer word or another flag.
FLAG = re.compile(r"(?<![\w-])--[a-z]")
REQUEST = {"prompt_tokens": 64, "generated_tokens": 8}


def _hours(tmp: Path) -> Path:
    path = tmp / "hours.csv"
    path.write_text("timestamp,g_co2eq_per_kwh\n2024-01-01T00:00:00Z,100\n2024-01-01T01:00:00Z,120\n")
    return path


def _requests(tmp: Path) -> Path:
    path = tmp / "requests.csv"
    path.write_text("model,gpu,batch_size,prompt_tokens,generated_tokens\nqwen2-0.5b,h100,1,64,8\n")
    return path


def _predict(**extra: Any) -> Callable[[Path], Any]:
    return lambda tmp: llmco2.predict("qwen2-0.5b", "h100", **REQUEST, **extra)


def _file_job(out: str | None = "OUT", **cluster: Any) -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        on_error = cluster.pop("on_error", "raise")
        intensity = _hours(tmp) if cluster.pop("intensity", False) else None
        requests = str(tmp if cluster.pop("folder", False) else _requests(tmp))
        target = None if out is None else str(tmp / out) if out != "OUT" else str(tmp / "parts")
        return llmco2.predict_file(llmco2.FileJob(requests=requests, out=target, on_error=on_error,
                                                  assumptions=llmco2.Assumptions(intensity=intensity),
                                                  cluster=llmco2.ClusterOptions(**cluster)))
    return run


def _served(tmp: Path) -> Any:
    from llmco2.api.server import ServedRequest, ServerLoad, serve_request

    return serve_request(ServedRequest("qwen2-0.5b", "h100", prompt_tokens=64, generated_tokens=8),
                         ServerLoad(concurrency=2, rate=1.0))


def _unmodelled_config(tmp: Path) -> Any:
    path = tmp / "config.json"
    path.write_text('{"model_type": "t5", "d_model": 512, "num_layers": 2, "num_heads": 8, "d_ff": 1024, "vocab_size": 1000}')
    return llmco2.predict(str(path), "h100", **REQUEST)


def _not_an_input(tmp: Path) -> Any:
    from llmco2.file_checks import check_not_an_input

    src = _requests(tmp)
    return check_not_an_input(src, {"checkpoint": src})


def _form(tmp: Path) -> Any:
    from llmco2.ui.form import read_compare_form

    return read_compare_form({"model": "qwen2-0.5b", "rate": "2", "prompt_tokens": "100"})


def _platform_without_scope(tmp: Path) -> Any:
    from llmco2.carbon.assumptions import resolve_assumptions

    return resolve_assumptions([], scope=None, platform="hgx-h100-8")


def _weights_do_not_fit(tmp: Path) -> Any:
    return llmco2.serve("llama3.1-70b", "l4", llmco2.make_workload("fixed", n=2, rate=1.0, prompt_tokens=8, output_tokens=8))


def _served_weights_do_not_fit(tmp: Path) -> Any:
    from llmco2.api.server import ServedRequest, ServerLoad, serve_request

    return serve_request(ServedRequest("llama3.1-70b", "l4", prompt_tokens=8, generated_tokens=8), ServerLoad(rate=1.0))


def _pickle_checkpoint(tmp: Path) -> Path:
    path = tmp / "old.pt"
    path.write_bytes(pickle.dumps({"kind": "llmco2-gnn"}))
    return path


def _convert(trust: bool, dest: str | None = None) -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        from llmco2.prediction.checkpoint_file import convert_legacy

        src = _pickle_checkpoint(tmp)
        return convert_legacy(src, None if dest is None else tmp / dest, trust=trust)
    return run


def _requests_named(name: str, out: str | None) -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        src = _requests(tmp).rename(tmp / name)
        target = None if out is None else str(src if out == "SRC" else tmp / out)
        return llmco2.predict_file(llmco2.FileJob(requests=str(src), out=target))
    return run


def _workload(**args: Any) -> Callable[[Path], Any]:
    return lambda tmp: llmco2.make_workload(**{"lengths": "fixed", "n": 2, "prompt_tokens": 8, "output_tokens": 8, **args})


def _measure(call: str) -> Callable[[Path], Any]:
    def run(tmp: Path) -> Any:
        from llmco2.measure import sweep, sweep_args

        return {"gpus": lambda: sweep_args.parse_gpus("a,b"), "model_path": lambda: sweep_args.parse_model_paths(["x"]),
                "device": lambda: sweep.detect_device(["NVIDIA Quadro 9000"])}[call]()
    return run


#: name -> (the bad call, the error's field, what the command line prints for it).
CASES: dict[str, tuple[Callable[[Path], Any], str, str]] = {
    "timestamp without intensity": (_predict(timestamp="2024-01-01T00:00:00Z"), "timestamp",
                                    "--timestamp: only applies with --intensity-file"),
    "intensity and carbon_intensity": (lambda tmp: llmco2.predict("qwen2-0.5b", "h100", **REQUEST, intensity=_hours(tmp),
                                                                  carbon_intensity=100.0, timestamp="2024-01-01T00:30:00Z"),
                                       "intensity", "give either --intensity-file or --carbon-intensity, not both"),
    "intensity without timestamp": (lambda tmp: llmco2.predict("qwen2-0.5b", "h100", **REQUEST, intensity=_hours(tmp)),
                                    "timestamp", "--intensity-file needs the request's time: --timestamp"),
    "timestamp not a time": (lambda tmp: llmco2.predict("qwen2-0.5b", "h100", **REQUEST, intensity=_hours(tmp),
                                                        timestamp="yesterday"), "timestamp", "--timestamp: 'yesterday'"),
    "region and carbon_intensity": (_predict(region="FR", carbon_intensity=100.0), "region",
                                    "give either --region or --carbon-intensity, not both"),
    "carbon_intensity out of range": (_predict(carbon_intensity=1e9), "carbon_intensity", "--carbon-intensity: must be"),
    "pue out of range": (_predict(pue=20.0), "pue", "--pue: must be a number from 1 to 10"),
    "lifetime out of range": (_predict(lifetime_years=1e6), "lifetime_years", "--lifetime-years: must be"),
    "flag not a boolean": (_predict(flash_attention="no"), "flash_attention", "--flash-attention: must be True or False"),
    "unmodelled config.json": (_unmodelled_config, "model_type", "pass --approximate to predict it"),
    "two loads": (_served, "serving", "--concurrency N or --rate R"),
    "weights do not fit (serve)": (_weights_do_not_fit, "num_gpus",
                                   "--gpus: the weights of llama3.1-70b take 141.1 GB per GPU, more than the 21.6 GB usable on "
                                   "1 x l4; use more GPUs (--gpus) or a smaller dtype (--dtype)"),
    "weights do not fit (served request)": (_served_weights_do_not_fit, "num_gpus",
                                            "use more GPUs (--gpus) or a smaller dtype (--dtype)"),
    "workload of two loads": (_workload(rate=1.0, concurrency=2), "load",
                              "give exactly one load: --rate R, --concurrency N or trace timestamps"),
    "workload without a load": (_workload(), "load", "give exactly one load: --rate R, --concurrency N"),
    "fixed lengths without tokens": (_workload(rate=1.0, output_tokens=None), "lengths", "fixed lengths need --prompt-tokens"),
    "compare fixed without tokens": (lambda tmp: llmco2.compare("qwen2-0.5b", "h100", rate=1.0, background="fixed"), "background",
                                     "--background: fixed lengths need --prompt-tokens and --gen-tokens"),
    "compare serving_requests not a count": (lambda tmp: llmco2.compare("qwen2-0.5b", "h100", rate=1.0, serving_requests=4.5),
                                             "serving_requests", "--serving-requests: must be a whole number from 1 to 1,000,000"),
    "folder without a cluster": (_file_job(folder=True), "requests", "give one file, or predict many with --cluster local"),
    "workers without a cluster": (_file_job(workers=2), "workers", "--workers only apply with --cluster"),
    "cluster with skip": (_file_job(address="local", on_error="skip"), "on_error", "(--on-error skip) by single-process"),
    "cluster with intensity": (_file_job(address="local", intensity=True), "intensity",
                               "drop --intensity-file to use the annual average of --region"),
    "workers of a remote cluster": (_file_job(address="tcp://127.0.0.1:1", workers=2), "workers",
                                    "only applies with --cluster local"),
    "cluster without out": (_file_job(out=None, address="local"), "out", "--cluster needs --out FOLDER"),
    "cluster out a csv": (_file_job(out="o.csv", address="local"), "out", "with --cluster, --out is a folder"),
    "output is an input": (_not_an_input, "out", "it is the --checkpoint input, which this command reads; give another --out"),
    "lengths without fixed": (_form, "background", "--prompt-tokens and --gen-tokens apply with --background fixed"),
    "platform without scope": (_platform_without_scope, "platform", "(--scope server or --scope gpu)"),
    "pickle checkpoint": (lambda tmp: llmco2.predict("qwen2-0.5b", "h100", **REQUEST, checkpoint=str(_pickle_checkpoint(tmp))),
                          "checkpoint", "/old.pt --trust"),
    "convert without trust": (_convert(trust=False), "trust", "unpickles it, which can run code; pass --trust if you trust"),
    "convert onto itself": (_convert(trust=True, dest="old.pt"), "dest", "would overwrite"),
    "requests without out": (_requests_named("requests.csv", None), "out", "--requests needs --out FILE.csv for the predictions"),
    "out a gzipped parquet": (_requests_named("requests.csv", "o.parquet.gz"), "out",
                              "Parquet compresses its own columns; give --out "),
    "out is the requests file": (_requests_named("requests.csv", "SRC"), "out", ": it is the --requests file; give another --out"),
    "measure gpus": (_measure("gpus"), "gpus", "--gpus: must be comma-separated"),
    "measure model path": (_measure("model_path"), "model_path", "--model-path: must be MODEL=PATH"),
    "measure device": (_measure("device"), "device", "pass its catalog id as --device"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_library_messages_name_parameters_and_the_cli_prints_flags(name: str, tmp_path: Path) -> None:
    call, field, cli_text = CASES[name]
    with pytest.raises(InvalidInputError) as caught:
        call(tmp_path)
    err = caught.value
    assert not FLAG.search(str(err)), str(err)
    assert "\n" not in str(err) and err.field == field, (str(err), err.field)
    assert cli_text in as_command_line(err), as_command_line(err)
    assert "`" not in as_command_line(err), as_command_line(err)


def test_command_line_text_maps_every_form() -> None:
    assert command_line_text("give either `intensity` or `carbon_intensity`") == \
        "give either --intensity-file or --carbon-intensity"
    assert command_line_text("use `gpus=1`; pass `approximate=True`; `on_error='skip'`; `cluster=\"local\"`") == \
        "use --gpus 1; pass --approximate; --on-error skip; --cluster local"
    assert command_line_text("the `source` input, `not_a_flag=3`") == "the source input, not_a_flag=3"
    assert command_line_text("no mention, a `` pair and a ``literal``") == "no mention, a `` pair and a ``literal``"
    assert all(f.startswith("--") for f in FLAGS.values())
    call = "`llmco2.prediction.checkpoint_file.convert_legacy('/a b/old.pt', trust=True)`"
    assert command_line_text(f"convert it once: {call}") == "convert it once: llmco2 checkpoint convert /a b/old.pt --trust"
    assert command_line_text("`os.path.join('a')` and `convert_legacy(x)`") == "`os.path.join('a')` and `convert_legacy(x)`"


def test_the_command_line_prints_the_conversion_command(tmp_path: Path) -> None:
    from llmco2.prediction.checkpoint_file import CONVERT_HINT, convert_legacy

    old = _pickle_checkpoint(tmp_path)
    hint = CONVERT_HINT.format(path=str(old))
    assert "convert_legacy(" in hint and "--" not in hint  # the library names the Python call
    assert command_line_text(hint) == f"llmco2 checkpoint convert {old} --trust"
    with pytest.raises(InvalidInputError) as caught:
        llmco2.predict("qwen2-0.5b", "h100", **REQUEST, checkpoint=str(old))
    assert f"convert it once: {hint}" in str(caught.value)
    assert as_command_line(caught.value).endswith(f"convert it once: llmco2 checkpoint convert {old} --trust")
    with pytest.raises(InvalidInputError, match="would overwrite"):
        convert_legacy(old, old, trust=True)


def test_a_missing_default_checkpoint_names_the_parameter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from llmco2.prediction import loading

    monkeypatch.setattr(loading, "default_checkpoint_path", lambda: tmp_path / "missing.safetensors")
    with pytest.raises(InvalidInputError) as caught:
        loading.checkpoint_path(None)
    assert caught.value.field == "checkpoint" and "pass `checkpoint`" in str(caught.value)
    assert as_command_line(caught.value).endswith("missing from this installation; pass --checkpoint")


# -- static scan ------------------------------------------------------------------------------------
#: Messages that still name a flag, in modules being edited elsewhere (path -> the texts); remove an
#: entry once its message names the parameter. ``hydra_app.py`` is a command line of its own (Hydra's
#: ``--multirun``) and ``measure/plan.py``'s is its ``__main__`` (argparse's ``--out``).
KNOWN: dict[str, tuple[str, ...]] = {
    "hydra_app.py": (": a sweep runs with --multirun (-m); for a list write ",),
    "measure/plan.py": ("--out",),
}
#: Calls whose text arguments end up in a message.
MESSAGE_CALLS = ("check_float", "check_int", "check_input_file", "check_output_path", "check_output_folder",
                 "check_not_an_input", "parse_seconds", "lookup")


def _message_texts(tree: ast.AST) -> list[tuple[int, str]]:
    """The text constants of raised errors, of error constructors, of the checks that put a name in
    their message, and of module constants named like a message part (``*_HINT``)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            roots.append(node.exc)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            if name.endswith("Error") or name in MESSAGE_CALLS:
                roots.extend([*node.args, *(k.value for k in node.keywords)])
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "").endswith("HINT") for t in node.targets):
            roots.append(node.value)
    return [(c.lineno, c.value) for r in roots for c in ast.walk(r) if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def test_no_library_message_names_a_flag() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("cli/"):
            continue
        for line, text in _message_texts(ast.parse(path.read_text(encoding="utf-8"))):
            if FLAG.search(text) and text not in KNOWN.get(rel, ()):
                found.append(f"llmco2/{rel}:{line}: {text!r}")
    assert not found, "library messages naming a command-line flag (name the parameter between backticks):\n" + "\n".join(found)
