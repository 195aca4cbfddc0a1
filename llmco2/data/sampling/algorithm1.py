"""Algorithm 1 of the paper, focused energy data sampling: :func:`fine_grained_sample` (the
paper's ``FineGraindSampling``: configurations within ±C of a point) and :func:`focused_loop`
(measure, fit, expand around the worst-predicted test points, repeat), around any regressor
and any measurement. MAPE and APE are in percent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.sampling.common import INT_COLUMNS, SAMPLE_COLUMNS, TARGET, check_fraction, round_to
from llmco2.data.sampling.frames import check_samples, config_frame
from llmco2.data.sampling.hardware import placeable_as_is
from llmco2.errors import InvalidInputError
from llmco2.specs import get_model

log = logging.getLogger(__name__)

#: Algorithm 1's ±C per field (the paper gives 10 prompt tokens, 1 generated token, 1 layer).
DEFAULT_RANGES: dict[str, int] = {"prompt_tokens": 10, "generated_tokens": 1, "num_layers": 1, "batch_size": 0,
                                  "num_gpus": 0, "hidden_size": 0, "intermediate_size": 0, "num_heads": 0}


def fine_grained_sample(points: pd.DataFrame, b: int = 100, ranges: Mapping[str, int] | None = None, seed: int = 0, *,
                        max_gpus: int = 4, memory_fraction: float = 0.9) -> pd.DataFrame:
    """Algorithm 1's ``FineGraindSampling``: ``b`` configurations within ±C of each point.

    ``ranges`` maps a field to its C (merged over :data:`DEFAULT_RANGES`: prompt 10, generated 1,
    layers 1, others 0). Each field moves by an integer drawn uniformly in ``[-C, C]``, then the
    row is clipped to valid values: counts >= 1, GPU count <= ``max_gpus``, prompt + generated
    within the model's context (generated first, prompt then); a head change keeps the
    query-per-KV-head group (multi-query keeps one KV head) and carries the hidden size with it
    when hidden = heads x head_dim. The GPU kind, dtype and trace are the point's. Rows that can no
    longer be placed on their GPUs (tensor-parallel split, weights + KV cache over
    ``memory_fraction`` of memory) are dropped; ``df.attrs["dropped"]`` counts them.
    """
    pts = check_samples(points)[list(SAMPLE_COLUMNS)]
    if isinstance(b, bool) or int(b) != b or b < 1:
        raise InvalidInputError(f"must be a positive integer, got {b!r}", field="b")
    r = dict(DEFAULT_RANGES)
    for key, value in dict(ranges or {}).items():
        if key not in DEFAULT_RANGES:
            raise InvalidInputError(f"cannot perturb {key!r}; fields: {', '.join(DEFAULT_RANGES)}", field="ranges")
        if int(value) != value or value < 0:
            raise InvalidInputError(f"C of {key} must be a non-negative integer, got {value!r}", field="ranges")
        r[key] = int(value)
    memory_fraction = check_fraction(memory_fraction, "memory_fraction")
    rng = np.random.default_rng(seed)
    n = len(pts) * int(b)
    base = pts.iloc[np.repeat(np.arange(len(pts)), int(b))].reset_index(drop=True)
    delta = {k: rng.integers(-c, c + 1, n) for k, c in r.items()}  # fixed order: same seed, same rows
    v = {c: base[c].to_numpy(dtype=np.int64) for c in INT_COLUMNS}
    context = base["model"].map({m: get_model(m).max_context for m in base["model"].unique()}).to_numpy(dtype=np.int64)
    gen = np.clip(v["generated_tokens"] + delta["generated_tokens"], 1, np.maximum(context - 1, 1))
    prompt = np.clip(v["prompt_tokens"] + delta["prompt_tokens"], 1, np.maximum(context - gen, 1))
    heads, kv = v["num_heads"], v["num_kv_heads"]
    group = heads // kv
    moved = heads + delta["num_heads"]
    new_heads = np.where(kv == 1, np.maximum(moved, 1), round_to(moved.astype(np.float64), group))
    new_kv = np.where(kv == 1, 1, new_heads // group)
    implicit = v["hidden_size"] == heads * v["head_dim"]
    hidden = np.where(implicit, new_heads * v["head_dim"], v["hidden_size"]) + delta["hidden_size"]
    out = {c: base[c].to_numpy() for c in ("model", "gpu", "dtype", "trace", "head_dim")}
    out.update(prompt_tokens=prompt, generated_tokens=gen,
               batch_size=np.maximum(v["batch_size"] + delta["batch_size"], 1),
               num_layers=np.maximum(v["num_layers"] + delta["num_layers"], 1),
               num_gpus=np.clip(v["num_gpus"] + delta["num_gpus"], 1, max(int(max_gpus), 1)),
               hidden_size=np.maximum(hidden, 1), intermediate_size=np.maximum(v["intermediate_size"] + delta["intermediate_size"], 1),
               num_heads=new_heads, num_kv_heads=new_kv)
    df = config_frame(out)
    ok = placeable_as_is(df, memory_fraction)
    dropped = int((~ok).sum())
    if dropped:
        log.info("fine_grained_sample: dropped %d of %d configurations that no longer fit their GPUs", dropped, n)
    result = df[ok].reset_index(drop=True)
    result.attrs["dropped"] = dropped
    return result


@dataclass
class LoopResult:
    """Outcome of :func:`focused_loop`.

    ``train`` / ``test`` are sample frames with the measured ``target`` column (``test`` is the
    growing test pool TD); ``mape_history[0]`` is the MAPE (percent) on TD after the first fit,
    then one value per round; ``added`` counts the configurations measured in each round.
    """

    train: pd.DataFrame
    test: pd.DataFrame
    mape_history: list[float]
    rounds: int
    converged: bool
    model: Any
    added: list[int] = field(default_factory=list)
    unmeasured: int = 0

    @property
    def final_mape(self) -> float:
        return self.mape_history[-1]

    def metrics(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "converged": self.converged, "mape_history": [round(m, 4) for m in self.mape_history],
                "final_mape": round(self.final_mape, 4), "train_rows": len(self.train), "test_rows": len(self.test),
                "added_per_round": list(self.added), "unmeasured": self.unmeasured}


def _measure(measure: Callable[[pd.DataFrame], Any], X: pd.DataFrame) -> tuple[pd.DataFrame, NDArray[np.float64], int]:
    """Measure ``X``; rows whose value is missing, not finite or not positive are left out."""
    y = np.asarray(measure(X), dtype=np.float64).ravel()
    if y.shape != (len(X),):
        raise InvalidInputError(f"measure returned {y.shape[0]} values for {len(X)} configurations", field="measure")
    ok = np.isfinite(y) & (y > 0)
    bad = int((~ok).sum())
    if bad:
        log.warning("focused_loop: %d of %d configurations have no usable measurement and are left out", bad, len(X))
    return X[ok].reset_index(drop=True), y[ok], bad


def _ape(pred: Any, y: NDArray[np.float64]) -> NDArray[np.float64]:
    p = np.asarray(pred, dtype=np.float64).ravel()
    if p.shape != y.shape:
        raise InvalidInputError(f"predict returned {p.shape[0]} values for {y.shape[0]} configurations", field="predict")
    return np.abs(p - y) / np.abs(y) * 100.0


def focused_loop(initial: pd.DataFrame, fit: Callable[[pd.DataFrame, np.ndarray], Any],
                 predict: Callable[[Any, pd.DataFrame], np.ndarray], measure: Callable[[pd.DataFrame], np.ndarray], *,
                 test_fraction: float = 0.2, top_k: int = 10, b: int = 100, ranges: Mapping[str, int] | None = None,
                 error_threshold: float = 5.0, max_rounds: int = 5, seed: int = 0, memory_fraction: float = 0.9,
                 ) -> LoopResult:
    """Algorithm 1, focused energy data sampling, around any regressor and any measurement.

    1. ``measure`` the ``initial`` configurations (e.g. a :class:`FocusedSampler` draw); split
       them at random into train and the test pool TD (``test_fraction``).
    2. ``model = fit(train_frame, y)``; per-point APE of ``predict(model, TD_frame)`` on TD.
    3. While the MAPE on TD (percent) exceeds ``error_threshold`` and fewer than ``max_rounds``
       rounds ran: take the ``top_k`` TD points with the largest APE (each point is expanded at
       most once), :func:`fine_grained_sample` ``b`` configurations within ``ranges`` (±C) of
       each, measure them, add ``test_fraction`` of them to TD and the rest to train, refit and
       re-test on the whole TD.

    ``fit``/``predict`` see frames of :data:`SAMPLE_COLUMNS`; ``measure`` returns one positive
    value per row (NaN for a failed measurement, which is left out and counted).
    """
    if not 0 < test_fraction < 1:
        raise InvalidInputError(f"must be in (0, 1), got {test_fraction}", field="test_fraction")
    if int(top_k) < 1 or int(max_rounds) < 0:
        raise InvalidInputError("top_k must be >= 1 and max_rounds >= 0", field="top_k")
    rng = np.random.default_rng(seed)
    X, y, unmeasured = _measure(measure, check_samples(initial)[list(SAMPLE_COLUMNS)])
    if len(X) < 2:
        raise InvalidInputError(f"need at least 2 measured initial configurations, got {len(X)}", field="initial")
    perm = rng.permutation(len(X))
    n_test = min(max(1, int(round(test_fraction * len(X)))), len(X) - 1)
    test_x, test_y = X.iloc[perm[:n_test]].reset_index(drop=True), y[perm[:n_test]]
    train_x, train_y = X.iloc[perm[n_test:]].reset_index(drop=True), y[perm[n_test:]]
    model = fit(train_x, train_y)
    ape = _ape(predict(model, test_x), test_y)
    history = [float(ape.mean())]
    expanded = np.zeros(len(test_x), dtype=bool)
    added: list[int] = []
    rounds = 0
    log.info("focused_loop: %d train / %d test, MAPE %.2f%%", len(train_x), len(test_x), history[-1])
    while history[-1] > error_threshold and rounds < int(max_rounds):
        order = np.argsort(-ape, kind="stable")
        worst = order[~expanded[order]][: int(top_k)]
        if not len(worst):
            break
        rounds += 1
        expanded[worst] = True
        new = fine_grained_sample(test_x.iloc[worst], b, ranges, seed=int(rng.integers(2**31)), memory_fraction=memory_fraction)
        new_x, new_y, bad = _measure(measure, new) if len(new) else (new, np.zeros(0), 0)
        unmeasured += bad
        p = rng.permutation(len(new_x))
        k = int(round(test_fraction * len(new_x)))
        test_x = pd.concat([test_x, new_x.iloc[p[:k]]], ignore_index=True)
        test_y = np.concatenate([test_y, new_y[p[:k]]])
        train_x = pd.concat([train_x, new_x.iloc[p[k:]]], ignore_index=True)
        train_y = np.concatenate([train_y, new_y[p[k:]]])
        expanded = np.concatenate([expanded, np.zeros(k, dtype=bool)])
        added.append(len(new_x))
        model = fit(train_x, train_y)
        ape = _ape(predict(model, test_x), test_y)
        history.append(float(ape.mean()))
        log.info("focused_loop round %d: +%d configurations, %d train / %d test, MAPE %.2f%%", rounds, len(new_x),
                 len(train_x), len(test_x), history[-1])
    return LoopResult(train=train_x.assign(**{TARGET: train_y}), test=test_x.assign(**{TARGET: test_y}),
                      mape_history=history, rounds=rounds, converged=history[-1] <= error_threshold, model=model,
                      added=added, unmeasured=unmeasured)
