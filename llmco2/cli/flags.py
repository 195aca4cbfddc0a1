"""How the command line names the library's parameters: errors raised by the use cases name the
API parameter (``field="intensity"``); the command prints the flag the user typed
(``--intensity-file``). One table, here; a field that is not in it is printed as it is (a column
or a config key, such as ``num_heads``)."""

from __future__ import annotations

from llmco2.errors import InvalidInputError

#: API parameter -> command-line flag.
FLAGS: dict[str, str] = {
    "intensity": "--intensity-file", "timestamp": "--timestamp", "region": "--region", "pue": "--pue",
    "carbon_intensity": "--carbon-intensity", "lifetime_years": "--lifetime-years", "checkpoint": "--checkpoint",
    "requests": "--requests", "out": "--out", "cluster": "--cluster", "workers": "--workers",
    "partition_rows": "--partition-rows", "rate": "--rate", "concurrency": "--concurrency", "gpus": "--gpus",
    "gpu": "--gpu", "model": "--model", "batch_size": "--batch-size", "prompt_tokens": "--prompt-tokens",
    "generated_tokens": "--gen-tokens", "gen_tokens": "--gen-tokens", "serving_requests": "--serving-requests",
    "sweep_gpus": "--sweep-gpus", "requests_count": "--requests-count", "lengths": "--lengths", "trust": "--trust",
    "engine": "--engine", "dtype": "--dtype", "weight_dtype": "--dtype", "quantisation": "--quantisation", "serving": "--serving", "background": "--background",
    "slo_ttft_s": "--slo-ttft", "slo_tpot_s": "--slo-tpot", "slo_percentile": "--slo-percentile", "max_gpus": "--max-gpus",
    "max_batch": "--max-batch", "max_batched_tokens": "--max-batched-tokens", "seed": "--seed",
    "dp": "--dp", "ep": "--ep", "expert_parallel": "--ep", "on_error": "--on-error", "data": "--data", "data_format": "--format", "scope": "--scope", "platform": "--platform",
}


def flag_of(field: str | None) -> str | None:
    """The flag of an API parameter (the field itself where the command line has no flag for it)."""
    return FLAGS.get(field, field) if field else field


def as_command_line(exc: InvalidInputError) -> str:
    """The one-line message of ``exc`` with its field named as the command line's flag."""
    message = exc.args[0] if exc.args else ""
    return str(InvalidInputError(str(message), field=flag_of(exc.field)))
