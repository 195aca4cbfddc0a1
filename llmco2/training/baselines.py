"""Baseline predictors, all behind the interface of :class:`llmco2.training.train.GNNPredictor`
(``fit(train, val)``, ``predict_rows(data)``, ``save``/``load``):

* ``llmcarbon`` — equation-based, as LLMCarbon does: ``E = FLOPs / (peak x efficiency) x power``
  per phase, with one efficiency fitted on the training rows (its most favourable setting).
* ``gbt`` — gradient-boosted trees on the global analytic features plus the phase: the strong
  tabular reference.
* ``deepen`` — DeepEn-style random forest on per-kernel features (operations and memory bytes of
  each kernel type of the row's phase).
* ``roofline_tdp`` — a plain roofline latency x TDP estimate, as llm-analysis and LLM-Viewer give
  with efficiencies of 1: every kernel at the catalog peak that binds it, no overheads, every GPU
  at its power limit. Nothing is fitted.
* ``nnlqp`` lives in the GNN with ``feature_view="nnlqp", use_prior=False``: one phase-merged
  feature set per node and no hardware features.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor

from llmco2.analytic.layer import KERNEL_NAMES
from llmco2.data.dataset import EnergyData
from llmco2.errors import InvalidInputError
from llmco2.graph.features import global_feature_matrix

PHASES3 = ("prefill", "decode", "total")


def _phase_onehot(phase: NDArray[np.int64]) -> NDArray[np.float64]:
    return np.eye(3)[phase]


class _SklearnPredictor:
    """Shared plumbing: features per row, a log-energy regressor, checkpoints in skops format
    (no pickle: only the types in :attr:`trusted_types` are rebuilt on load)."""

    kind = "baseline"
    #: scikit-learn types beyond skops' defaults that a checkpoint of this kind may contain
    trusted_types: tuple[str, ...] = ()

    def __init__(self, **params: Any) -> None:
        self.params = params
        self.model: Any = None

    def row_features(self, data: EnergyData) -> NDArray[np.float64]:
        raise NotImplementedError

    def make_model(self) -> Any:
        raise NotImplementedError

    def fit(self, train: EnergyData, val: EnergyData | None = None, progress: bool = False) -> None:
        self.model = self.make_model()
        self.model.fit(self.row_features(train), np.log(train.energy_j))

    def predict_rows(self, data: EnergyData) -> NDArray[np.float64]:
        if self.model is None:
            raise InvalidInputError("the predictor is not trained", field="checkpoint")
        return np.exp(self.model.predict(self.row_features(data)))

    def save(self, path: str | Path) -> Path:
        """Write a ``.skops`` checkpoint (a zip of JSON and arrays, no pickle)."""
        import skops.io as sio

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        sio.dump({"kind": self.kind, "params": self.params, "model": self.model}, p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> _SklearnPredictor:
        """Read a checkpoint written by :meth:`save`; anything but the allowed types is refused."""
        import skops.io as sio

        p = Path(path)
        if not p.is_file():
            raise InvalidInputError(f"no such checkpoint {str(p)!r}", field="checkpoint")
        try:
            untrusted = sio.get_untrusted_types(file=p)
        except Exception:  # noqa: BLE001 - skops raises many types on a foreign file; all are the user's input error
            raise InvalidInputError(f"{p} is not a {cls.kind} checkpoint (expected a .skops file)", field="checkpoint") from None
        unexpected = sorted(set(untrusted) - set(cls.trusted_types))
        if unexpected:
            raise InvalidInputError(f"{p} holds types a {cls.kind} checkpoint never contains ({', '.join(unexpected[:3])}); "
                                    "it is not loaded", field="checkpoint")
        try:
            state = sio.load(p, trusted=list(untrusted))
        except Exception:  # noqa: BLE001
            raise InvalidInputError(f"{p} is not a {cls.kind} checkpoint (unreadable)", field="checkpoint") from None
        if not isinstance(state, dict) or state.get("kind") != cls.kind:
            raise InvalidInputError(f"{path} is not a {cls.kind} checkpoint", field="checkpoint")
        obj = cls(**state["params"])
        obj.model = state["model"]
        return obj


class GBTPredictor(_SklearnPredictor):
    """Gradient-boosted trees on the global analytic features (architecture, request, hardware,
    phase totals) and the phase."""

    kind = "gbt"
    trusted_types = ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",)

    def make_model(self) -> Any:
        p = {"max_iter": 500, "learning_rate": 0.05, "max_leaf_nodes": 31, "random_state": 0, **self.params}
        return HistGradientBoostingRegressor(**p)

    def row_features(self, data: EnergyData) -> NDArray[np.float64]:
        u = global_feature_matrix(*data.analysis())
        return np.concatenate([u[data.config], _phase_onehot(data.phase)], axis=1)


class DeepEnPredictor(_SklearnPredictor):
    """Random forest on per-kernel operations and memory bytes of the row's phase (summed over
    phases for ``total`` rows), one column pair per kernel type, plus batch/prompt/generated and
    the GPU's peak, bandwidth and TDP (DeepEn fits one device at a time; pooled over devices it
    needs them)."""

    kind = "deepen"
    trusted_types = ("sklearn.tree._tree.Tree",)

    def make_model(self) -> Any:
        p = {"n_estimators": 200, "min_samples_leaf": 2, "n_jobs": -1, "random_state": 0, **self.params}
        return RandomForestRegressor(**p)

    def row_features(self, data: EnergyData) -> NDArray[np.float64]:
        analysis, _ = data.analysis()
        per_phase = {}
        for phase in ("prefill", "decode"):
            cols = []
            for k in KERNEL_NAMES:
                c = analysis.costs[phase][k]
                cols += [c.ops, c.mem_bytes]
            per_phase[phase] = np.stack(cols, axis=1)
        pre, dec = per_phase["prefill"][data.config], per_phase["decode"][data.config]
        chosen = np.where((data.phase == 0)[:, None], pre, np.where((data.phase == 1)[:, None], dec, pre + dec))
        b = analysis.batch
        # DeepEn models one device at a time; on mixed devices it needs the hardware's numbers
        extra = np.stack([b.batch, b.prompt, b.generated, b.num_gpus, b.peak_ops_per_s, b.mem_bw_bytes_per_s, b.tdp_w],
                         axis=1)[data.config]
        return np.concatenate([np.log1p(chosen), np.log1p(extra), _phase_onehot(data.phase)], axis=1)


class LLMCarbonPredictor(_SklearnPredictor):
    """``E = ops / (peak x efficiency) x TDP x GPUs`` per phase; ``efficiency`` is one constant
    fitted on the training rows (the geometric-mean ratio), as LLMCarbon assumes a fixed hardware
    efficiency."""

    kind = "llmcarbon"

    def _flops_energy(self, data: EnergyData) -> NDArray[np.float64]:
        analysis, totals = data.analysis()
        b = analysis.batch
        per = [totals.totals[p]["ops"] / (b.peak_ops_per_s * b.num_gpus) * b.tdp_w * b.num_gpus for p in ("prefill", "decode")]
        e = np.stack(per, axis=1)[data.config]
        out = np.where(data.phase == 0, e[:, 0], e[:, 1])
        return np.where(data.phase == 2, e[:, 0] + e[:, 1], out)

    def fit(self, train: EnergyData, val: EnergyData | None = None, progress: bool = False) -> None:
        ideal = self._flops_energy(train)
        ok = ideal > 0
        # E = ideal / efficiency  ->  log efficiency = mean(log ideal - log E)
        self.model = {"efficiency": float(np.exp(np.mean(np.log(ideal[ok]) - np.log(train.energy_j[ok]))))}

    def predict_rows(self, data: EnergyData) -> NDArray[np.float64]:
        if self.model is None:
            raise InvalidInputError("the predictor is not trained", field="checkpoint")
        return self._flops_energy(data) / self.model["efficiency"]


class RooflineTDPPredictor(_SklearnPredictor):
    """``E = roofline time x TDP x GPUs`` per phase (the roofline time: each kernel at the peak
    that binds it, compute or memory bandwidth, from the catalog). Nothing is fitted: ``fit``
    only marks the predictor ready, so a held-out device is predicted exactly as a seen one."""

    kind = "roofline_tdp"

    def fit(self, train: EnergyData, val: EnergyData | None = None, progress: bool = False) -> None:
        self.model = {"efficiency": 1.0}

    def predict_rows(self, data: EnergyData) -> NDArray[np.float64]:
        from llmco2.physics.priors import PhaseInputs, PhysicsPrior, row_values

        if self.model is None:
            raise InvalidInputError("the predictor is not trained", field="checkpoint")
        energy, _ = PhysicsPrior(mode="tdp").energy_j(PhaseInputs.build(data.items, *data.analysis()))
        return row_values(energy, data.config, data.phase)


BASELINES = {"gbt": GBTPredictor, "deepen": DeepEnPredictor, "llmcarbon": LLMCarbonPredictor, "roofline_tdp": RooflineTDPPredictor}
