"""How the command line names the library's parameters: errors raised by the use cases name the
API parameter (``field="intensity"``), and their text names other parameters between backticks
(``give either `intensity` or `carbon_intensity`, not both``; with a value: ``use `gpus=1```).
The command prints the flag the user typed (``--intensity-file``, ``--gpus 1``). One table, here;
a field that is not in it is printed as it is (a column or a config key, such as ``num_heads``).

Example:
    >>> command_line_text("give either `intensity` or `carbon_intensity`, not both")
    'give either --intensity-file or --carbon-intensity, not both'
    >>> command_line_text("use `gpus=1`, or pass `approximate=True`; `on_error='skip'`")
    'use --gpus 1, or pass --approximate; --on-error skip'

A call a message suggests (``convert it once: `llmco2.prediction.checkpoint_file.convert_legacy('old.pt',
trust=True)```) is printed as the command that does the same (:data:`COMMANDS`):

    >>> command_line_text("convert it once: `llmco2.prediction.checkpoint_file.convert_legacy('old.pt', trust=True)`")
    'convert it once: llmco2 checkpoint convert old.pt --trust'
"""

from __future__ import annotations

import ast
import re

from llmco2.errors import InvalidInputError

#: API parameter -> command-line flag.
FLAGS: dict[str, str] = {
    "intensity": "--intensity-file", "timestamp": "--timestamp", "region": "--region", "pue": "--pue",
    "carbon_intensity": "--carbon-intensity", "lifetime_years": "--lifetime-years", "checkpoint": "--checkpoint",
    "requests": "--requests", "out": "--out", "cluster": "--cluster", "address": "--cluster", "workers": "--workers",
    "partition_rows": "--partition-rows", "rate": "--rate", "concurrency": "--concurrency", "gpus": "--gpus",
    "num_gpus": "--gpus",
    "gpu": "--gpu", "model": "--model", "batch_size": "--batch-size", "prompt_tokens": "--prompt-tokens",
    "generated_tokens": "--gen-tokens", "gen_tokens": "--gen-tokens", "serving_requests": "--serving-requests",
    "sweep_gpus": "--sweep-gpus", "lengths": "--lengths", "trust": "--trust",
    "engine": "--engine", "dtype": "--dtype", "weight_dtype": "--dtype", "quantisation": "--quantisation", "serving": "--serving", "background": "--background",
    "slo_ttft_s": "--slo-ttft", "slo_tpot_s": "--slo-tpot", "slo_percentile": "--slo-percentile", "max_gpus": "--max-gpus",
    "max_batch": "--max-batch", "max_batched_tokens": "--max-batched-tokens", "seed": "--seed",
    "dp": "--dp", "ep": "--ep", "expert_parallel": "--ep", "on_error": "--on-error", "data": "--data", "data_format": "--format", "scope": "--scope", "platform": "--platform",
    "approximate": "--approximate", "ignore_context": "--ignore-context", "act_dtype": "--act-dtype", "kv_dtype": "--kv-dtype",
    "tp": "--tp", "model_path": "--model-path", "device": "--device", "no_calibration": "--no-calibration",
    "causal": "--causal", "flash_attention": "--flash-attention", "chunked_prefill": "--chunked-prefill",
    "dry_run": "--dry-run", "dest": "--out", "configs": "--configs",
    "new_tokens": "--new-tokens", "decode_projections": "--decode-projections", "kv_len": "--kv-len", "phase": "--phase",
    "elapsed_s": "--elapsed-s",
}
#: A library function a message suggests calling -> the command that does the same (its positional
#: arguments as ``{0}``, ``{1}``, ...; its keyword arguments by name).
COMMANDS: dict[str, str] = {
    "convert_legacy": "llmco2 checkpoint convert {0} --trust",
}

#: A call named in a message's text: `module.function(arguments)`.
_CALL = re.compile(r"`(?:[a-z][a-z0-9_]*\.)*([a-z_][a-z0-9_]*)\(([^`]*)\)`")
#: A parameter named in a message's text: `name` or `name=value`.
_MENTION = re.compile(r"(?<!`)`([a-z][a-z0-9_]*)(?:=([^`]*))?`(?!`)")


#: API parameters that a command takes as a positional argument -> its name in the command's usage.
POSITIONALS: dict[str, str] = {"src": "path"}


def flag_of(field: str | None) -> str | None:
    """The flag of an API parameter, or the positional argument that stands for it (the field itself
    where the command line has neither)."""
    return FLAGS.get(field, POSITIONALS.get(field, field)) if field else field


def command_line_text(text: str) -> str:
    """``text`` with each parameter it names between backticks written as the command line's flag:
    `name` -> ``--flag``, `name=True` -> ``--flag`` (a switch), `name='value'` -> ``--flag value``.
    A name the command line has no flag for is printed as it is, without the backticks. A call of
    :data:`COMMANDS` (`module.function('arg', key=True)`) is written as its command."""

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if name not in FLAGS:
            return name if value is None else f"{name}={value}"
        if value is None or value == "True":
            return FLAGS[name]
        return f"{FLAGS[name]} {value.strip().strip(chr(39) + chr(34))}"

    return _MENTION.sub(flag, _CALL.sub(_command, text))


def _command(match: re.Match[str]) -> str:
    """The command of a call in :data:`COMMANDS` whose arguments are literals (the call as it is
    otherwise)."""
    template = COMMANDS.get(match.group(1))
    if template is None:
        return match.group(0)
    try:
        call = ast.parse(f"f({match.group(2)})", mode="eval").body
        if not isinstance(call, ast.Call):
            return match.group(0)
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        return template.format(*args, **kwargs)
    except (SyntaxError, ValueError, TypeError, IndexError, KeyError, MemoryError, RecursionError):
        return match.group(0)


def as_command_line(exc: InvalidInputError) -> str:
    """The one-line message of ``exc`` with its field, and the parameters its text names, written as
    the command line's flags."""
    message = exc.args[0] if exc.args else ""
    return str(InvalidInputError(command_line_text(str(message)), field=flag_of(exc.field)))
