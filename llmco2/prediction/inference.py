"""Inference without torch: a trained checkpoint as a NumPy forward pass plus its output head.

:class:`InferenceModel` builds the requests' graphs, runs the network
(:class:`llmco2.prediction.numpy_forward.SageForward`) and finishes with the checkpoint's
:class:`llmco2.prediction.head.OutputHead`. Large batches are predicted in steps of
:data:`PIPELINE_ROWS` requests: the network runs on one step in a worker thread while the next
step's graphs and the previous step's head are computed, so two cores are busy.

Weights and metadata come straight from the checkpoint file (safetensors + JSON, read without
torch and without running anything: :mod:`llmco2.prediction.checkpoint_file`).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic.layer import LayerAnalysis, analyze_layers
from llmco2.analytic.model import ModelTotals, model_totals
from llmco2.analytic.table import RequestTable
from llmco2.errors import InvalidInputError
from llmco2.graph.features import FEATURE_SCHEMA_VERSION, GraphArrays, build_graph_arrays
from llmco2.graph.scaling import FeatureScaler
from llmco2.graph.views import view
from llmco2.physics.priors import Item
from llmco2.prediction.checkpoint_file import is_training_state, read_checkpoint
from llmco2.prediction.head import OutputHead, PhasePrediction
from llmco2.prediction.numpy_forward import SageForward, StructureGroups, forward_threads, structure_groups

__all__ = ["PIPELINE_ROWS", "InferenceModel", "SageForward", "StructureGroups", "concat_predictions",
           "load_inference", "structure_groups", "take_prediction", "take_rows"]

log = logging.getLogger(__name__)

#: Requests per step of a pipelined prediction (bounds the graphs and node states held at once).
PIPELINE_ROWS = 4096
#: Requests every checkpoint must predict finitely on loading: (model, GPU, batch, prompt, generated).
CANARY = (("llama3.1-8b", "h100", 1, 512, 64), ("qwen2-0.5b", "jetson-orin", 2, 128, 32))


@dataclass
class InferenceModel:
    """A trained checkpoint, ready to predict without torch: feature scaler, NumPy network and the
    checkpoint's output head (:class:`llmco2.prediction.head.OutputHead`: prior, target, intervals).

    ``meta`` holds the checkpoint's non-network entries (``config``, ``head``, ...).
    """

    net: SageForward
    scaler: FeatureScaler
    head: OutputHead
    meta: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    @property
    def config(self) -> dict[str, Any]:
        return self.meta.get("config", {})

    @property
    def domain(self) -> dict[str, Any]:
        return self.head.domain

    @classmethod
    def from_checkpoint(cls, tensors: dict[str, NDArray], meta: dict[str, Any], source: Path | None = None) -> InferenceModel:
        """The model of a checkpoint's weights ``tensors`` and metadata ``meta``."""
        if meta.get("feature_schema_version") != FEATURE_SCHEMA_VERSION or "head" not in meta:
            raise InvalidInputError(
                f"{source or 'the checkpoint'} was trained with feature schema version {meta.get('feature_schema_version')}, "
                f"this llmco2 computes version {FEATURE_SCHEMA_VERSION}; retrain it", field="checkpoint")
        cfg = meta.get("config", {})
        try:
            weights = {k: v for k, v in tensors.items() if not is_training_state(k)}  # a training run's `last` also loads
            net = SageForward.from_state_dict(weights, int(cfg.get("num_layers", 2)), bool(cfg.get("use_graph", True)))
            model = cls(net, FeatureScaler.from_state_dict(meta["scaler"]), OutputHead.from_state_dict(meta["head"]), meta, source)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as exc:
            raise InvalidInputError(f"{source or 'the checkpoint'} is not a complete llmco2 checkpoint "
                                    f"({type(exc).__name__}: {str(exc)[:80]})", field="checkpoint") from None
        model.check_scaler()
        model.self_check()
        return model

    def check_scaler(self) -> None:
        """The feature scaler's means are finite and its standard deviations finite and positive."""
        sc = self.scaler
        for name in ("node_mean", "node_std", "global_mean", "global_std"):
            a = np.asarray(getattr(sc, name))
            if not (np.issubdtype(a.dtype, np.number) and np.all(np.isfinite(a)) and (not name.endswith("std") or np.all(a > 0))):
                raise InvalidInputError(f"{self.source or 'the checkpoint'} is not usable: its feature scaler's {name} holds "
                                        "values that are not finite" + (" and positive" if name.endswith("std") else ""),
                                        field="checkpoint")

    def self_check(self) -> None:
        """Predict :data:`CANARY` (a data-centre and an edge request) and require finite, positive
        energies and latencies and finite, ordered intervals: a checkpoint whose metadata cannot
        predict is refused on loading, not after a file of NaN."""
        from llmco2.specs import Request, get_gpu, get_model

        items = [(get_model(m), Request(batch_size=b, prompt_tokens=p, generated_tokens=g), get_gpu(d)) for m, d, b, p, g in CANARY]
        where = self.source or "the checkpoint"
        try:
            out = self.predict(items)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError, FloatingPointError) as exc:
            raise InvalidInputError(f"{where} cannot predict ({type(exc).__name__}: {str(exc)[:80]})", field="checkpoint") from None
        arrays = (out.energy_j, out.latency_s, out.energy_low_j, out.energy_high_j)
        if not all(np.all(np.isfinite(a)) for a in arrays) or not np.all(out.energy_j > 0) or not np.all(out.latency_s > 0) \
                or not np.all(out.energy_low_j <= out.energy_high_j):
            raise InvalidInputError(f"{where} is not usable: it predicts energies, latencies or intervals that are not finite "
                                    "and positive for ordinary requests", field="checkpoint")

    # -- prediction -------------------------------------------------------------------------------
    def graphs(self, analysis: LayerAnalysis, totals: ModelTotals, items: Sequence[Item] | RequestTable | None = None) -> GraphArrays:
        """Standardised graph batch of the analysed requests, in the checkpoint's feature view, as the
        network sees them (:meth:`~llmco2.prediction.head.OutputHead.network_inputs`; ``items``: the
        requests, for GPUs presented as a seen sibling)."""
        g = view(build_graph_arrays(*self.head.network_inputs(analysis, totals, items)), self.config.get("feature_view", "full"))
        sc = self.scaler
        if g.x.dtype != np.float32 or g.u.dtype != np.float32:
            return sc.transform(g)
        x, u = g.x.copy() if g.x.base is not None else g.x, g.u.copy()
        x -= sc.node_mean  # in place, the same float32 operations as FeatureScaler.transform
        x /= sc.node_std
        u -= sc.global_mean
        u /= sc.global_std
        return GraphArrays(x=x, edge_index=g.edge_index, batch=g.batch, u=u, num_graphs=g.num_graphs)

    def outputs(self, analysis: LayerAnalysis, totals: ModelTotals,
                items: Sequence[Item] | RequestTable | None = None) -> NDArray[np.float32]:
        """``[n, out_dim]`` standardised network outputs; zeros for the requests whose correction the
        head sets aside (:meth:`~llmco2.prediction.head.OutputHead.correction_unused`: their graphs are
        neither built nor run)."""
        return self._scattered(*self.kept_graphs(analysis, totals, items), len(analysis.batch))

    def kept_graphs(self, analysis: LayerAnalysis, totals: ModelTotals,
                    items: Sequence[Item] | RequestTable | None = None) -> tuple[NDArray[np.int64] | None, GraphArrays | None]:
        """The rows whose network outputs the head reads (``None``: all of them) and their graphs
        (``None`` where there are none): the requests of a GPU the network never saw, with no seen
        sibling die, are predicted by the step physics alone, so their graphs are left out."""
        if items is None:
            return None, self.graphs(analysis, totals, items)
        skip = self.head.correction_unused(items)
        if not skip.any():
            return None, self.graphs(analysis, totals, items)
        keep = np.flatnonzero(~skip)
        if not len(keep):
            return keep, None
        n = len(skip)
        # one run of rows (as :meth:`predict` orders them) is cut as views, not copied
        rows: slice | NDArray[np.int64] = slice(int(keep[0]), int(keep[-1]) + 1) if keep[-1] - keep[0] + 1 == len(keep) else keep
        if isinstance(items, RequestTable):
            kept: RequestTable | list[Item] = items.take(rows)
        else:
            kept = list(items)[rows] if isinstance(rows, slice) else [items[i] for i in rows.tolist()]
        return keep, self.graphs(take_rows(analysis, rows, n), take_rows(totals, rows, n), kept)

    def scatter(self, keep: NDArray[np.int64] | None, z: NDArray[np.float32] | None, n: int) -> NDArray[np.float32]:
        """The network's outputs ``z`` of the rows ``keep`` (:meth:`kept_graphs`) as ``[n, out_dim]``,
        zeros elsewhere."""
        if keep is None:
            assert z is not None
            return z
        out = np.zeros((n, self.net.out_dim), dtype=np.float32)
        if z is not None:
            out[keep] = z
        return out

    def predict(self, requests: RequestTable | Sequence[Item]) -> PhasePrediction:
        """Energy, latency, interval and notes of every request (same as ``GNNPredictor.predict``).

        The analytic model runs on all requests at once; graphs, network and head then follow in
        steps of :data:`PIPELINE_ROWS` requests (bounding the memory held). With two or more
        threads (:func:`llmco2.prediction.numpy_forward.forward_threads`), the network of one step runs
        in a worker thread while the main thread builds the next step's graphs and finishes the
        previous step. Each request's numbers are the same either way. A request on a GPU the network
        never saw (nor its die) is predicted by the step physics alone, so its graph is neither built
        nor run (:meth:`kept_graphs`); such requests are gathered after the others, so that most
        steps hold only one kind, and the results are put back in the requests' order."""
        table = requests if isinstance(requests, RequestTable) else RequestTable.from_items(list(requests))
        n = len(table)
        order = None
        if n > PIPELINE_ROWS:  # the requests whose network outputs the head reads first, so that steps are mostly all or none
            skip = self.head.correction_unused(table)
            if skip.any() and not skip.all():
                order = np.argsort(skip, kind="stable")
                requests = table = table.take(order)
        out = self._predict_table(table, requests)
        return out if order is None else take_prediction(out, np.argsort(order))

    def _predict_table(self, table: RequestTable, requests: RequestTable | Sequence[Item]) -> PhasePrediction:
        """:meth:`predict` of the requests of ``table`` (``requests``: the same, as given), in their order."""
        analysis = analyze_layers(table.layer_batch())
        totals = model_totals(analysis)
        n = len(table)
        if n <= PIPELINE_ROWS:
            return self.head.finish(self.outputs(analysis, totals, requests), requests, analysis, totals)
        steps = [slice(lo, min(lo + PIPELINE_ROWS, n)) for lo in range(0, n, PIPELINE_ROWS)]
        parts: list[PhasePrediction] = []
        if forward_threads() < 2:
            for rows in steps:
                part, part_totals = take_rows(analysis, rows, n), take_rows(totals, rows, n)
                parts.append(self._finish(table, requests, rows, part, part_totals, self.outputs(part, part_totals, table.take(rows))))
            return concat_predictions(parts)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 2e-4))  # the worker waits less for the GIL between NumPy calls
        try:
            with ThreadPoolExecutor(1) as worker:
                pending: tuple[slice, LayerAnalysis, ModelTotals, Future[NDArray[np.float32]]] | None = None
                for rows in steps:
                    part, part_totals = take_rows(analysis, rows, n), take_rows(totals, rows, n)
                    keep, g = self.kept_graphs(part, part_totals, table.take(rows))
                    network = worker.submit(self._scattered, keep, g, rows.stop - rows.start)
                    if pending is not None:
                        parts.append(self._finish(table, requests, *pending[:3], pending[3].result()))
                    pending = (rows, part, part_totals, network)
                assert pending is not None
                parts.append(self._finish(table, requests, *pending[:3], pending[3].result()))
        finally:
            sys.setswitchinterval(switch)
        return concat_predictions(parts)

    def _scattered(self, keep: NDArray[np.int64] | None, g: GraphArrays | None, n: int) -> NDArray[np.float32]:
        """The network on graphs ``g`` of the rows ``keep`` of ``n``, as ``[n, out_dim]`` (:meth:`scatter`)."""
        return self.scatter(keep, self.net(g) if g is not None else None, n)

    def _finish(self, table: RequestTable, requests: RequestTable | Sequence[Item], rows: slice, analysis: LayerAnalysis,
                totals: ModelTotals, z: NDArray[np.float32]) -> PhasePrediction:
        """The head on the requests ``rows`` (``analysis``, ``totals``: theirs; ``z``: the network's outputs)."""
        items = table.take(rows) if isinstance(requests, RequestTable) else list(requests[rows])
        return self.head.finish(z, items, analysis, totals)

    def predict_phases(self, data: Any) -> NDArray[np.float64]:
        """``[n_configs, 2]`` energy (J) of an ``EnergyData`` (same API as the training predictor)."""
        analysis, totals = data.analysis()
        return self.head.finish(self.outputs(analysis, totals, data.items), data.items, analysis, totals).energy_j

    def predict_rows(self, data: Any) -> NDArray[np.float64]:
        """Energy (J) of each row's phase of an ``EnergyData``."""
        per_config = self.predict_phases(data)[data.config]
        out = np.where(data.phase == 0, per_config[:, 0], per_config[:, 1])
        return np.where(data.phase == 2, per_config[:, 0] + per_config[:, 1], out)


def take_rows(value: Any, rows: slice | NDArray[np.int64], n: int) -> Any:
    """``value`` (a `LayerAnalysis`, `ModelTotals` or any nesting of dataclasses, dicts and
    arrays) with every array of ``n`` rows cut to ``rows``; anything else is kept as it is."""
    if isinstance(value, np.ndarray):
        return value[rows] if value.ndim and value.shape[0] == n else value
    if isinstance(value, dict):
        return {k: take_rows(v, rows, n) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: take_rows(getattr(value, f.name), rows, n) for f in fields(value) if f.init})
    return value


def take_prediction(pred: PhasePrediction, idx: NDArray[np.int64]) -> PhasePrediction:
    """The predictions of the requests ``idx`` of ``pred``, in that order."""
    arrays = {name: getattr(pred, name)[idx] for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j")}
    return PhasePrediction(**arrays, notes=[pred.notes[i] for i in idx.tolist()], levels=pred.levels,
                           memory_bytes=None if pred.memory_bytes is None else pred.memory_bytes[idx],
                           fits_in_memory=None if pred.fits_in_memory is None else pred.fits_in_memory[idx])


def concat_predictions(parts: Sequence[PhasePrediction]) -> PhasePrediction:
    """One prediction of the requests of ``parts``, in order."""
    arrays = {name: np.concatenate([getattr(q, name) for q in parts])
              for name in ("energy_j", "latency_s", "energy_low_j", "energy_high_j", "prior_j")}
    memory_parts = [q.memory_bytes for q in parts if q.memory_bytes is not None]
    fits_parts = [q.fits_in_memory for q in parts if q.fits_in_memory is not None]
    known = len(memory_parts) == len(fits_parts) == len(parts)  # else the memory is not known for every request
    memory = np.concatenate(memory_parts) if known else None
    fits = np.concatenate(fits_parts) if known else None
    return PhasePrediction(**arrays, notes=[note for q in parts for note in q.notes], levels=parts[0].levels,
                           memory_bytes=memory, fits_in_memory=fits)


@functools.lru_cache(maxsize=4)
def load_inference(checkpoint: str | Path) -> InferenceModel:
    """The torch-free model of ``checkpoint`` (a ``.safetensors`` file), digests checked."""
    src = Path(checkpoint)
    tensors, meta = read_checkpoint(src)
    return InferenceModel.from_checkpoint(tensors, meta, src)
