"""Training, prediction and checkpoints of the LLMCO2 GNN.

The network learns the standardised log-ratio of energy to a physics prior
(:mod:`llmco2.physics.priors`, fitted first); everything outside the network lives in a torch-free
:class:`llmco2.prediction.head.OutputHead`, saved under ``"head"`` in the checkpoint.

Loss: L1 between predicted and measured log-energy of each row (a relative-error loss, suited to
MAPE-type metrics); a ``total`` row compares with the log of the summed phases. Adam, early
stopping on a validation set (best weights restored). Everything runs on the CPU in minutes.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray

from llmco2.analytic.table import RequestTable
from llmco2.data.dataset import EnergyData, from_items
from llmco2.errors import InvalidInputError
from llmco2.graph.features import ENGINE_LEVELS, FEATURE_SCHEMA_VERSION, GraphArrays, build_graph_arrays, subset
from llmco2.graph.scaling import FeatureScaler
from llmco2.graph.views import view
from llmco2.physics.prior_fit import fit_physics
from llmco2.physics.priors import row_values
from llmco2.physics.step_isolated import fit_isolated
from llmco2.physics.step_prior import StepPrior, read_step_params
from llmco2.prediction.checkpoint_file import CHECKPOINT_FORMAT, is_training_state, read_checkpoint, write_checkpoint
from llmco2.prediction.head import OutputHead, PhasePrediction, device_group
from llmco2.prediction.intervals import IntervalCalibration
from llmco2.prediction.loading import checkpoint_path
from llmco2.prediction.targets import EnergyTarget, phase_energy
from llmco2.specs import GPU, UNKNOWN_ENGINE, ModelArch, Request
from llmco2.specs.families import architecture_family
from llmco2.training.gnn import LLMCO2Net
from llmco2.training.training_state import load_epoch, run_fingerprint, save_epoch

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Hyper-parameters (paper defaults: two SAGE layers, Adam lr 1e-3, batch 512)."""

    hidden: int = 128
    num_layers: int = 2
    dropout: float = 0.0
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 512
    max_epochs: int = 200
    patience: int = 20
    seed: int = 0
    use_graph: bool = True
    feature_view: str = "full"  # full | no_phase_split | no_roofline | nnlqp | no_hardware (see llmco2.graph.views)
    use_prior: bool = True  # learn log(E / physics prior); False: learn log E directly (NNLQP)
    # physical: launch-aware latency x idle-to-limit power; step: the step physics for data-centre GPUs
    # (fitted on the training rows' isolated runs), physical for edge devices; tdp: roofline time x TDP (earlier)
    prior: str = "physical"
    # prior "step": a step-physics file (llmco2/serving/data/step_physics.json, fitted on serving and isolated
    # rows together) to use instead of a fit on the training rows' isolated runs
    step_file: str = ""
    engine_dropout: float = 0.05  # share of training graphs shown as engine "unknown" per batch
    threads: int = 0  # 0: torch default

    def __post_init__(self) -> None:
        from llmco2.config_checks import TRAIN_SCHEMA, check_mapping

        check_mapping(asdict(self), TRAIN_SCHEMA)


@dataclass
class TrainHistory:
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epoch: int = -1
    seconds: float = 0.0


def _tensors(g: GraphArrays) -> tuple[torch.Tensor, ...]:
    return (torch.from_numpy(g.x), torch.from_numpy(g.edge_index), torch.from_numpy(g.batch), torch.from_numpy(g.u))


class GNNPredictor:
    """The LLMCO2 predictor: feature scaler + :class:`LLMCO2Net` + :class:`OutputHead` (target
    standardisation, physics prior, intervals, training domain)."""

    def __init__(self, config: TrainConfig | None = None) -> None:
        self.config = config or TrainConfig()
        self.net: LLMCO2Net | None = None
        self.scaler: FeatureScaler | None = None
        self.head: OutputHead | None = None
        self.history = TrainHistory()

    @property
    def target(self) -> EnergyTarget | None:
        return self.head.target if self.head is not None else None

    @property
    def domain(self) -> dict[str, Any]:
        return self.head.domain if self.head is not None else {}

    # -- helpers ----------------------------------------------------------------------------------
    def _graphs(self, data: EnergyData) -> GraphArrays:
        if self.head is not None:
            analysis, totals = data.analysis()
            seen, seen_totals = self.head.network_inputs(analysis, totals, data.items)
            if seen is not analysis:  # unseen engines as "unknown", unseen GPUs as their seen sibling
                return view(build_graph_arrays(seen, seen_totals), self.config.feature_view)
        return view(data.graphs(), self.config.feature_view)

    def _prior(self, data: EnergyData) -> NDArray[np.float64]:
        assert self.head is not None
        return self.head.prior(data.items, *data.analysis())[0]

    def _prepared(self, data: EnergyData) -> tuple[GraphArrays, NDArray[np.float64]]:
        assert self.scaler is not None
        return self.scaler.transform(self._graphs(data)), self._prior(data)

    def _row_log_energy(self, z: torch.Tensor, prior: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """Predicted log-energy of rows, from per-config standardised outputs ``z`` ``[rows, 2]``."""
        assert self.target is not None
        mean = torch.as_tensor(self.target.mean, dtype=z.dtype)
        std = torch.as_tensor(self.target.std, dtype=z.dtype)
        log_e = z * std + mean + torch.log(prior)
        total = torch.logsumexp(log_e, dim=1)
        per_phase = torch.where(phase == 0, log_e[:, 0], log_e[:, 1])
        return torch.where(phase == 2, total, per_phase)

    def _engine_dropout(self, u: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """Relabel a random share of graphs as engine ``unknown`` (so that level learns the
        average behaviour of the engines it stands for)."""
        share = self.config.engine_dropout
        if share <= 0:
            return u
        k = len(ENGINE_LEVELS)
        drop = torch.as_tensor(rng.random(u.shape[0]) < share)
        if not bool(drop.any()):
            return u
        u = u.clone()
        start = u.shape[1] - k
        u[drop, start:] = 0.0
        u[drop, start + ENGINE_LEVELS.index(UNKNOWN_ENGINE)] = 1.0
        return u

    # -- training -----------------------------------------------------------------------------------
    def fit(self, train: EnergyData, val: EnergyData | None = None, progress: bool = False,
            latency_data: EnergyData | None = None, checkpoint_dir: str | Path | None = None,
            resume: bool = False) -> TrainHistory:
        """Fit the physics prior (on ``latency_data``'s latencies, default: the training rows'),
        then the network on ``train`` with early stopping on ``val``; calibrate the intervals on
        ``val``. With ``checkpoint_dir``, ``last`` and ``best`` checkpoints are written there after
        every epoch (:mod:`llmco2.training.training_state`); ``resume`` continues from ``last`` to the
        same result as an uninterrupted run."""
        cfg = self.config
        if not len(train.energy_j):
            raise InvalidInputError("no training rows with positive energy", field="data")
        torch.manual_seed(cfg.seed)
        rng = np.random.default_rng(cfg.seed)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        timed = latency_data if latency_data is not None else train
        physics = fit_physics(timed, train, "physical" if cfg.prior == "step" else cfg.prior, cfg.seed)
        step = None
        if cfg.prior == "step":
            params = (read_step_params(cfg.step_file) if cfg.step_file
                      else fit_isolated(pd.concat([timed.table, train.table], ignore_index=True)))
            step = StepPrior(params) if params is not None else None
        self.head = OutputHead(EnergyTarget(np.zeros(2), np.ones(2)), physics, domain=training_domain(train),
                               use_prior=cfg.use_prior, step=step)
        self.scaler = FeatureScaler.fit(self._graphs(train))
        g, prior = self._prepared(train)
        log_ratio = np.log(np.maximum(train.energy_j, 1e-12))[:, None] - np.log(prior[train.config])
        mask = np.zeros((len(train.energy_j), 2), dtype=bool)
        mask[train.phase == 0, 0] = True
        mask[train.phase == 1, 1] = True
        self.head.target = EnergyTarget.fit(log_ratio, mask)
        if cfg.use_prior:  # corrections an unseen GPU may get: the range its group's training GPUs needed
            whole = row_values(prior, train.config, train.phase)
            self.head.target.group_bounds = EnergyTarget.group_log_ratio_bounds(
                np.log(np.maximum(train.energy_j, 1e-12)) - np.log(np.maximum(whole, 1e-12)),
                [device_group(train.items[c]) for c in train.config])
        self.net = LLMCO2Net(g.x.shape[1], g.u.shape[1], cfg.hidden, cfg.num_layers, 2, cfg.dropout, cfg.use_graph)
        opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        y = torch.log(torch.as_tensor(train.energy_j))
        prior_t = torch.as_tensor(prior)
        phase_t = torch.as_tensor(train.phase)
        val_parts = self._prepared(val) if val is not None and len(val.energy_j) else None
        best, best_loss, stale = None, float("inf"), 0
        start = time.perf_counter()
        n = len(train.energy_j)
        folder = Path(checkpoint_dir) if checkpoint_dir is not None else None
        fingerprint = run_fingerprint(self, n, len(val.energy_j) if val is not None else 0)
        first_epoch = 0
        if resume:
            if folder is None:
                raise InvalidInputError("resume=true needs the folder of the interrupted run's checkpoints", field="resume")
            first_epoch, best, best_loss, stale = load_epoch(folder, self, opt, rng, fingerprint)
        for epoch in range(first_epoch, cfg.max_epochs):
            improved = False
            if val_parts is not None and stale >= cfg.patience:
                break  # the interrupted run had already stopped early
            self.net.train()
            order = rng.permutation(n)
            total = 0.0
            for lo in range(0, n, cfg.batch_size):
                rows = order[lo:lo + cfg.batch_size]
                configs, local = np.unique(train.config[rows], return_inverse=True)
                x, ei, b, u = _tensors(subset(g, configs))
                z = self.net(x, ei, b, self._engine_dropout(u, rng))[torch.as_tensor(local)]
                pred = self._row_log_energy(z, prior_t[configs][torch.as_tensor(local)], phase_t[rows])
                loss = torch.nn.functional.l1_loss(pred, y[rows])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(rows)
            self.history.train_loss.append(total / n)
            if val_parts is not None:
                assert val is not None
                val_pred = phase_energy(self._quick_energy(val_parts)[val.config], val.phase)
                vloss = float(np.mean(np.abs(np.log(val_pred) - np.log(val.energy_j))))
                self.history.val_loss.append(vloss)
                improved = vloss < best_loss - 1e-5
                if improved:
                    best, best_loss, stale = copy.deepcopy(self.net.state_dict()), vloss, 0
                    self.history.best_epoch = epoch
                else:
                    stale += 1
                if progress and epoch % 10 == 0:
                    log.info("epoch %d train %.4f val %.4f", epoch, self.history.train_loss[-1], vloss)
            if folder is not None:
                save_epoch(folder, self, opt, rng, epoch, best, best_loss, stale, fingerprint,
                           improved=val_parts is not None and improved)
            if val_parts is not None and stale >= cfg.patience:
                break
        if best is not None:
            self.net.load_state_dict(best)
        if val is not None and len(val.energy_j):
            self.calibrate(val)
        self.history.seconds = time.perf_counter() - start
        return self.history

    def calibrate(self, held_out: EnergyData) -> None:
        """Calibrate the prediction intervals on held-out rows (split conformal, log space)."""
        assert self.head is not None
        pred = self.predict_rows(held_out)
        groups = [device_group(held_out.items[c]) for c in held_out.config]
        resid = np.log(held_out.energy_j) - np.log(np.maximum(pred, 1e-12))
        out_of_domain = self.head.intervals
        self.head.intervals = IntervalCalibration.fit(resid, held_out.phase, groups, out_of_domain.levels)
        if out_of_domain.out_of_domain:  # keep residuals supplied from out-of-domain runs
            self.head.intervals.out_of_domain = out_of_domain.out_of_domain
            self.head.intervals.out_of_domain_source = out_of_domain.out_of_domain_source

    # -- prediction ---------------------------------------------------------------------------------
    @torch.no_grad()
    def network_outputs(self, g: GraphArrays, chunk: int = 4096) -> NDArray[np.float64]:
        """``[n, 2]`` standardised outputs of the network for scaled graphs ``g``."""
        if self.net is None:
            raise InvalidInputError("the predictor is not trained", field="checkpoint")
        self.net.eval()
        outs = []
        for lo in range(0, g.num_graphs, chunk):
            part = subset(g, np.arange(lo, min(lo + chunk, g.num_graphs)))
            outs.append(self.net(*_tensors(part)).numpy())
        return np.concatenate(outs).astype(np.float64) if outs else np.zeros((0, 2))

    def _quick_energy(self, parts: tuple[GraphArrays, NDArray[np.float64]]) -> NDArray[np.float64]:
        assert self.target is not None
        g, prior = parts
        return self.target.energy_j(self.network_outputs(g), prior)

    def predict(self, items_or_data: EnergyData | RequestTable | list[tuple[ModelArch, Request, GPU]]) -> PhasePrediction:
        """Energy, latency, interval and notes of every configuration (see :class:`PhasePrediction`)."""
        if self.net is None or self.head is None or self.scaler is None:
            raise InvalidInputError("the predictor is not trained", field="checkpoint")
        if isinstance(items_or_data, RequestTable):
            items_or_data = items_or_data.items()
        data = items_or_data if isinstance(items_or_data, EnergyData) else from_items(list(items_or_data))
        z = self.network_outputs(self.scaler.transform(self._graphs(data)))
        return self.head.finish(z, data.items, *data.analysis())

    def predict_phases(self, data: EnergyData) -> NDArray[np.float64]:
        """``[n_configs, 2]`` predicted prefill and decode energy (J) of every configuration."""
        return self.predict(data).energy_j

    def predict_rows(self, data: EnergyData) -> NDArray[np.float64]:
        """Predicted energy (J) of each row's phase."""
        return phase_energy(self.predict_phases(data)[data.config], data.phase)

    def predict_row_intervals(self, data: EnergyData) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Per row of ``data``: predicted energy, interval low and high (J) of the row's phase (a
        whole-request row sums the phases' bounds)."""
        out = self.predict(data)
        return tuple(phase_energy(a[data.config], data.phase)  # type: ignore[return-value]
                     for a in (out.energy_j, out.energy_low_j, out.energy_high_j))

    def predict_row_latency(self, data: EnergyData) -> NDArray[np.float64]:
        """Predicted time (s) of each row's phase (a whole-request row sums the phases)."""
        return phase_energy(self.predict(data).latency_s[data.config], data.phase)

    # -- checkpoints ---------------------------------------------------------------------------------
    def save(self, path: str | Path, extra_tensors: dict[str, Any] | None = None,
             extra_meta: dict[str, Any] | None = None) -> Path:
        """Write the checkpoint (safetensors weights + JSON metadata, :mod:`llmco2.prediction.checkpoint_file`);
        ``extra_*``: training state stored beside the predictor (:mod:`llmco2.training.training_state`)."""
        if self.net is None or self.scaler is None or self.head is None:
            raise InvalidInputError("the predictor is not trained", field="checkpoint")
        tensors = {k: v.detach().cpu().numpy() for k, v in self.net.state_dict().items()}
        tensors.update(extra_tensors or {})
        return write_checkpoint(path, tensors, {**(extra_meta or {}),
            "format": CHECKPOINT_FORMAT, "kind": "llmco2-gnn", "feature_schema_version": FEATURE_SCHEMA_VERSION,
            "config": asdict(self.config), "scaler": self.scaler.state_dict(),
            "head": self.head.state_dict(), "target": self.head.target.state_dict(), "domain": self.head.domain,
            "history": asdict(self.history),
        })

    @classmethod
    def load(cls, path: str | Path) -> GNNPredictor:
        p = Path(path)
        tensors, state = read_checkpoint(p)
        if state.get("feature_schema_version") != FEATURE_SCHEMA_VERSION or "head" not in state:
            raise InvalidInputError(
                f"{p} was trained with feature schema version {state.get('feature_schema_version')}, this llmco2 computes "
                f"version {FEATURE_SCHEMA_VERSION}; retrain it", field="checkpoint")
        known = {f.name for f in fields(TrainConfig)}
        model = cls(TrainConfig(**{k: v for k, v in state["config"].items() if k in known}))
        model.scaler = FeatureScaler.from_state_dict(state["scaler"])
        model.head = OutputHead.from_state_dict(state["head"])
        cfg = model.config
        model.net = LLMCO2Net(len(model.scaler.node_mean), len(model.scaler.global_mean), cfg.hidden, cfg.num_layers, 2,
                              cfg.dropout, cfg.use_graph)
        try:
            model.net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items() if not is_training_state(k)})
        except RuntimeError as exc:
            raise InvalidInputError(f"{p}: its weights do not match its configuration ({str(exc).splitlines()[0][:120]})",
                                    field="checkpoint") from None
        return model


def training_domain(data: EnergyData) -> dict[str, Any]:
    """What the training data covered (to say when a prediction extrapolates)."""
    archs = [a for a, _, _ in data.items]
    reqs = [r for _, r, _ in data.items]
    return {
        "devices": sorted({g.id for _, _, g in data.items}),
        "engines": sorted({r.engine for _, r, _ in data.items}),
        "device_engines": {g: sorted({r.engine for _, r, d in data.items if d.id == g}) for g in sorted({d.id for _, _, d in data.items})},
        "models": sorted({a.id for a in archs}),
        "families": sorted({architecture_family(a) for a in archs}),
        "params": [min(a.param_count() for a in archs), max(a.param_count() for a in archs)],
        "prompt_tokens": [min(r.prompt_tokens for r in reqs), max(r.prompt_tokens for r in reqs)],
        "generated_tokens": [min(r.generated_tokens for r in reqs), max(r.generated_tokens for r in reqs)],
        "batch_size": [min(r.batch_size for r in reqs), max(r.batch_size for r in reqs)],
        "num_gpus": [min(r.num_gpus for r in reqs), max(r.num_gpus for r in reqs)],
    }


@functools.lru_cache(maxsize=4)
def load_reference_predictor(path: str | None = None) -> GNNPredictor:
    """The training-side predictor (PyTorch + PyG) of ``path`` (default: the shipped checkpoint):
    the reference the torch-free fast path (:func:`llmco2.prediction.loading.load_predictor`) is
    tested against."""
    return GNNPredictor.load(checkpoint_path(path))
