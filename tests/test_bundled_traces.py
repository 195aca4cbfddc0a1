"""The Azure trace lengths shipped with the package are the shared data's, to the token and the
microsecond, so a serving simulation gives the same numbers with or without the shared folder."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.data.paths import find_shared_data
from llmco2.errors import InvalidInputError
from llmco2.serving.workload import bundled_traces, trace_lengths


@pytest.mark.parametrize("which, rows", [("conv", 19_366), ("code", 8_819)])
def test_bundled_trace_is_whole_and_in_arrival_order(which: str, rows: int) -> None:
    prompt, output, offsets = trace_lengths(which)
    assert len(prompt) == len(output) == len(offsets) == rows
    assert (prompt >= 1).all() and (output >= 1).all()
    assert offsets[0] == 0.0 and (np.diff(offsets) >= 0).all()


@pytest.mark.parametrize("which", ["conv", "code"])
def test_bundled_trace_equals_the_shared_csv(which: str) -> None:
    if find_shared_data() is None:
        pytest.skip("the shared data folder is not here (set LLMCO2_SHARED_DATA)")
    from llmco2.data.azure import load_trace

    df = load_trace(which)
    ts = df["timestamp"].to_numpy()
    offsets = (ts - ts.min()) / np.timedelta64(1, "s")
    order = np.argsort(offsets, kind="stable")
    z = bundled_traces()
    assert np.array_equal(z[f"{which}_prompt"], np.maximum(df["prompt_tokens"].to_numpy()[order], 1))
    assert np.array_equal(z[f"{which}_output"], np.maximum(df["generated_tokens"].to_numpy()[order], 1))
    assert np.array_equal(z[f"{which}_offsets"], offsets[order])


def test_draws_are_seeded_and_an_unknown_trace_is_refused() -> None:
    a, b = trace_lengths("conv", 50, seed=3), trace_lengths("conv", 50, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(InvalidInputError, match="unknown trace 'chat'"):
        trace_lengths("chat", 5)
