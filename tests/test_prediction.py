"""The prediction stage: per-phase energy and latency of many requests (:func:`predict_phases`),
the same numbers the footprint and the serving grid are built from."""

from __future__ import annotations

import numpy as np
import pytest

from llmco2.carbon.footprint import predict_footprint
from llmco2.errors import InvalidInputError
from llmco2.prediction import predict_phases
from llmco2.serving.costs import DECODE_PROBE, GridCostModel
from llmco2.specs import Request, get_gpu, get_model


def _items():
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100-sxm")
    return [(arch, Request(batch_size=b, prompt_tokens=p, generated_tokens=g), gpu)
            for b in (1, 4) for p in (128, 2048) for g in (1, 64)]


def test_phases_are_the_footprints_energy_and_latency() -> None:
    items = _items()
    ph, fp = predict_phases(items), predict_footprint(items, carbon_intensity=100.0)
    np.testing.assert_array_equal(ph.energy_j, np.stack([fp.prefill_j, fp.decode_j], axis=1))
    np.testing.assert_array_equal(ph.latency_s, np.stack([fp.prefill_latency_s, fp.decode_latency_s], axis=1))
    np.testing.assert_array_equal(ph.energy_low_j, fp.energy_low_j)
    np.testing.assert_array_equal(ph.extrapolated, fp.extrapolated)
    assert ph.levels == fp.levels and ph.energy_j.shape == (len(items), 2)
    assert np.all(ph.energy_j[[i for i, (_, r, _) in enumerate(items) if r.generated_tokens == 1], 1] == 0)


def test_chunks_give_the_same_numbers_to_float32_rounding() -> None:
    items = _items()
    done: list[int] = []
    whole, chunked = predict_phases(items), predict_phases(items, chunk=3, progress=done.append)
    assert done == [3, 3, 2]
    for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j"):
        np.testing.assert_allclose(getattr(whole, name), getattr(chunked, name), rtol=1e-6)  # the network runs in float32
    assert whole.notes == chunked.notes


def test_no_requests_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="no requests"):
        predict_phases([])


def test_serving_grid_is_the_phase_predictions() -> None:
    arch, gpu = get_model("llama3.1-8b"), get_gpu("h100-sxm")
    req = Request(batch_size=1, prompt_tokens=1, generated_tokens=1)
    grid = GridCostModel.from_predictor(arch, gpu, req)
    b, c = 1, int(grid.contexts[3])
    ph = predict_phases([(arch, req.replace(batch_size=b, prompt_tokens=c, generated_tokens=DECODE_PROBE + 1), gpu)])
    assert grid.prefill_j[0, 3] == pytest.approx(ph.energy_j[0, 0], rel=1e-6)
    assert grid.decode_s[0, 3] == pytest.approx(ph.latency_s[0, 1] / DECODE_PROBE, rel=1e-6)
