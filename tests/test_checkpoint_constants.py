"""The physics constants a checkpoint holds are checked on loading: the step prior's against the
step fit's own bounds (widened by ``STEP_SLACK``), the per-device prior's against ``PRIOR_RANGES``.
Every value a fit can produce loads (so a refit within the bounds keeps loading), and values far
outside are refused with one line naming the entry."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from llmco2.errors import InvalidInputError
from llmco2.physics import step_fit
from llmco2.physics.priors import (
    PRIOR_RANGES,
    STEP_ENGINE_BOUNDS,
    STEP_FIT_BOUNDS,
    STEP_SLACK,
    PhysicsPrior,
    check_step_params,
    step_range,
)
from llmco2.physics.step_physics import GLOBAL_PARAMS, StepParams
from llmco2.physics.step_prior import StepPrior, read_step_params
from llmco2.prediction.checkpoint_file import read_checkpoint
from llmco2.prediction.loading import default_checkpoint_path

META = read_checkpoint(default_checkpoint_path())[1]
STEP_FILE = default_checkpoint_path().parents[2] / "serving" / "data" / "step_physics.json"


def test_the_bounds_checked_on_loading_enclose_the_fits() -> None:
    """The ranges checked on loading hold every value the step fit may return (its BOUNDS and
    ENGINE_BOUNDS, as llmco2/physics/step_fit.py sees them), and every constant has one."""
    assert set(GLOBAL_PARAMS) <= set(STEP_FIT_BOUNDS)
    assert set(step_fit.FIXED) <= set(STEP_FIT_BOUNDS)
    for name, (lo, hi) in step_fit.BOUNDS.items():
        low, high = step_range(name, STEP_FIT_BOUNDS[name])
        assert low <= lo and high >= hi, name
    for name, (lo, hi) in step_fit.ENGINE_BOUNDS.items():
        low, high = step_range(name, STEP_ENGINE_BOUNDS[name], engine=True)
        assert low <= lo and high >= hi, name


def test_the_shipped_constants_load() -> None:
    prior = StepPrior.from_state_dict(META["head"]["step"])
    assert prior is not None and prior.params.to_dict() == StepParams.from_dict(META["head"]["step"]["params"]).to_dict()
    check_step_params(read_step_params(STEP_FILE))
    physics = PhysicsPrior.from_state_dict(META["head"]["physics"])
    for name in ("launch_us", "step_ms", "sequence_us"):
        assert {k: getattr(physics, name)[k] for k in META["head"]["physics"][name]} == META["head"]["physics"][name]


def _step_state(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    state = copy.deepcopy(META["head"]["step"])
    parent = state["params"]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return state


@pytest.mark.parametrize("where", ["lo", "hi", "mid"])
def test_every_value_within_the_fit_bounds_loads(where: str) -> None:
    """A refit may put any constant anywhere inside the fit's bounds (both ends included)."""
    def at(lo: float, hi: float) -> float:
        return {"lo": lo, "hi": hi, "mid": math.sqrt(lo * hi) if lo > 0 else hi / 2}[where]

    for name, (lo, hi) in step_fit.BOUNDS.items():
        StepPrior.from_state_dict(_step_state((name,), at(lo, hi)))
    for engine in META["head"]["step"]["params"]["engines"]:
        for name, (lo, hi) in step_fit.ENGINE_BOUNDS.items():
            StepPrior.from_state_dict(_step_state(("engines", engine, name), at(lo, hi)))


@pytest.mark.parametrize("name", sorted(STEP_FIT_BOUNDS))
def test_a_global_constant_far_outside_is_refused(name: str) -> None:
    lo, hi = STEP_FIT_BOUNDS[name]
    for value in (hi * STEP_SLACK * 1.01, -1.0, math.nan, math.inf, 1e300):
        with pytest.raises(InvalidInputError) as caught:
            StepPrior.from_state_dict(_step_state((name,), value))
        assert caught.value.field == "checkpoint" and f"head.step.params.{name} = " in str(caught.value)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", sorted(STEP_ENGINE_BOUNDS))
def test_an_engine_overhead_far_outside_is_refused(name: str) -> None:
    hi = STEP_ENGINE_BOUNDS[name][1]
    for value in (hi * STEP_SLACK * 1.01, -1e-9, math.nan):
        with pytest.raises(InvalidInputError, match=f"head.step.params.engines.vllm.{name} = "):
            StepPrior.from_state_dict(_step_state(("engines", "vllm", name), value))
    StepPrior.from_state_dict(_step_state(("engines", "vllm", name), 0.0))  # an overhead the engine does not have


@pytest.mark.parametrize("name", ["launch_us", "step_ms", "sequence_us"])
@pytest.mark.parametrize("value", [[0.0], "2", None, True, -1.0, math.nan, 1e30])
def test_a_prior_overhead_not_a_number_in_range_is_refused(name: str, value: Any) -> None:
    state = copy.deepcopy(META["head"]["physics"])
    state[name]["vllm"] = value
    with pytest.raises(InvalidInputError, match=f"head.physics.{name}.vllm = ") as caught:
        PhysicsPrior.from_state_dict(state)
    assert caught.value.field == "checkpoint"


def test_prior_ranges_hold_the_shipped_prior() -> None:
    physics = META["head"]["physics"]
    for name in ("launch_us", "step_ms", "sequence_us"):
        low, high = PRIOR_RANGES[name]
        assert all(low <= v <= high for v in physics[name].values()), name
    assert all(0 < v <= 1 for pair in physics["efficiency"].values() for v in pair)
    for entry, value in (("efficiency", {"h100-sxm": [0.0, 0.5]}), ("efficiency", {"h100-sxm": [0.5]}), ("activity", [1.0]),
                         ("activity", "x"), ("collective_us", "10"), ("launch_us", [1.0])):
        state = {**physics, entry: value}
        with pytest.raises(InvalidInputError, match=f"head.physics.{entry}"):
            PhysicsPrior.from_state_dict(state)
