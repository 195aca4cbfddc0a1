"""`RequestTable.all_valid` (the column check that lets `validate` skip its per-combination loop)
agrees with `validate_request` row by row, and `validate` still names the first failing row."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmco2.analytic.table import RequestTable
from llmco2.errors import InvalidInputError
from llmco2.specs.requests import validate_request
from tests.fast_predict_support import mixed_items


def varied_table(seed: int, copies: int = 20) -> RequestTable:
    """The mixed requests with random parallelism, GPU count, GPU, kind and prompt length: many
    rows fail one check or another, many pass."""
    table = RequestTable.from_items(mixed_items() * copies)
    rng = np.random.default_rng(seed)
    n = len(table)
    return replace(table, tensor_parallel=rng.choice([1, 2, 3, 4, 8, 16], n), expert_parallel=rng.choice([1, 1, 2, 4, 8], n),
                   num_gpus=rng.choice([1, 2, 4, 8, 16, 64], n), gpu=rng.integers(0, len(table.gpus), n),
                   kind=rng.integers(0, len(table.kinds), n), prompt_tokens=rng.integers(1, 40_000, n))


@pytest.mark.parametrize("check_context", [True, False])
def test_all_valid_agrees_with_validate_request(check_context: bool) -> None:
    table = varied_table(0)
    max_ctx = np.array([a.max_context for a in table.archs])[table.arch]
    fits = (table.prompt_tokens + table.generated_tokens <= max_ctx) | (not check_context)
    outcomes = []
    for i, (arch, req, gpu) in enumerate(table.items()):
        try:
            validate_request(req, arch, gpu, check_context=check_context)
            ok = True
        except InvalidInputError:
            ok = False
        outcomes.append(ok)
        one = np.array([i])
        assert table.take(one).all_valid(fits[one]) == ok, i
    assert any(outcomes) and not all(outcomes)
    passing = np.flatnonzero(outcomes)
    assert table.take(passing).all_valid(fits[passing])
    table.take(passing).validate(check_context=check_context)  # no error


def test_validate_names_the_first_failing_row() -> None:
    table = varied_table(1)
    first = None
    for i, (arch, req, gpu) in enumerate(table.items()):
        try:
            validate_request(req, arch, gpu)
        except InvalidInputError as exc:
            first = (i, str(exc))
            break
    assert first is not None
    with pytest.raises(InvalidInputError) as err:
        table.validate()
    assert str(err.value) == f"row {first[0]}: {first[1]}"
