"""The paper's focused sampling strategy (Section 4.2): configurations drawn from the priors
A (architectures, :mod:`.architectures`) x I (inference configs, :mod:`.inference`) x H
(hardware, :mod:`.hardware`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.sampling.architectures import EDGE_MODELS, PAPER_MODELS, perturb_architectures, sampler_models
from llmco2.data.sampling.common import (
    ARCH_COLUMNS,
    DTYPE_WEIGHTS,
    DTYPES,
    IntArray,
    as_list,
    check_dtypes,
    check_fraction,
    choice_weights,
    pick,
)
from llmco2.data.sampling.frames import config_frame
from llmco2.data.sampling.hardware import GPU_COUNTS, PAPER_GPUS, sampler_gpus
from llmco2.data.sampling.inference import draw_batch_sizes, trace_pairs
from llmco2.data.sampling.samplers import Sampler, SampleReport, check_seed
from llmco2.errors import InvalidInputError


class FocusedSampler(Sampler):
    """The paper's focused sampling priors (Section 4.2): A x I x H.

    **A, architectures**: the catalog models ``models`` (default: the paper's 17) +
    ``edge_models`` + ``extra_models``. With probability ``perturb_probability`` a row uses a
    perturbed variant of its model instead: one of ``variants_per_model`` variants drawn once per
    :meth:`sample` call (0: a fresh variant per row). A variant changes each of layer count, head
    count, hidden size and MLP width with probability ``perturb_field_probability`` (at least one)
    by a relative factor in ``1 ± *_range``, keeping the architecture valid: the query-per-KV-head
    group size is kept (MHA stays MHA, multi-query stays multi-query, GQA keeps its ratio), even KV
    heads stay even, ``head_dim`` is kept and hidden = heads x head_dim for models built that way
    (their hidden size changes through the head count); models with an explicit head_dim and
    all MLP widths move in steps of ``size_multiple``. The weight dtype (the paper's bitwidth) is
    drawn per row from ``dtypes`` with ``dtype_weights`` (default :data:`DTYPE_WEIGHTS`).

    **I, inference configs**: (prompt, generated) pairs resampled jointly from the rows of the
    Azure ``traces`` (code, conv; chosen per row by ``trace_weights``), so both marginals and their
    dependence follow the traces; batch size 1, 2, ... with ``batch_size_probs`` and the rest of
    the probability spread uniformly over the tail up to ``max_batch_size``. The model is drawn
    among those whose context holds prompt + generated tokens (the pair is drawn first, so the
    token distributions are not distorted by short-context models).

    **H, hardware**: a GPU from ``gpus`` (``gpu_weights``) among those that can hold the row, and a
    GPU count from ``gpu_counts``: uniform from the minimum that holds weights + KV cache (within
    ``memory_fraction`` of memory) up to the largest count (``num_gpus_policy: uniform``), or the
    minimum (``minimum``); counts must split heads, KV heads and MLP width (tensor parallelism).
    Rows that fit no model context or no allowed GPU count are dropped and counted.
    """

    def __init__(self, models: Sequence[str] = PAPER_MODELS, edge_models: Sequence[str] = EDGE_MODELS,
                 extra_models: Sequence[str] = (), model_weights: Sequence[float] | None = None,
                 traces: Sequence[str] = ("code", "conv"), trace_weights: Sequence[float] | None = None,
                 trace_paths: Mapping[str, str] | None = None,
                 batch_size_probs: Sequence[float] = (0.65, 0.25), max_batch_size: int = 8,
                 dtypes: Sequence[str] = DTYPES, dtype_weights: Sequence[float] | None = None,
                 gpus: Sequence[str] = PAPER_GPUS, gpu_weights: Sequence[float] | None = None,
                 gpu_counts: Sequence[int] = GPU_COUNTS, num_gpus_policy: str = "uniform",
                 memory_fraction: float = 0.9, perturb_probability: float = 0.5,
                 perturb_field_probability: float = 0.5, variants_per_model: int = 16,
                 layers_range: float = 0.5, heads_range: float = 0.5, hidden_range: float = 0.5,
                 intermediate_range: float = 0.5, size_multiple: int = 64, max_rounds: int = 20) -> None:
        names = as_list(models, "models") + as_list(edge_models, "edge_models") + as_list(extra_models, "extra_models")
        self.models = sampler_models(names)
        self.model_weights = choice_weights(model_weights, len(self.models.archs), "model_weights")
        self.traces = [str(t) for t in as_list(traces, "traces")]
        bad = [t for t in self.traces if t not in ("code", "conv")]
        if bad or not self.traces:
            raise InvalidInputError(f"traces must be among code, conv, got {self.traces}", field="traces")
        self.trace_weights = choice_weights(trace_weights, len(self.traces), "trace_weights")
        self.trace_paths = {str(k): str(v) for k, v in dict(trace_paths or {}).items() if v is not None}
        probs = np.asarray(as_list(batch_size_probs, "batch_size_probs"), dtype=np.float64)
        self.max_batch_size = int(max_batch_size)
        if (not len(probs) or np.any(probs < 0) or probs.sum() > 1 + 1e-9 or len(probs) > self.max_batch_size
                or (probs.sum() < 1 - 1e-9 and len(probs) == self.max_batch_size)):
            raise InvalidInputError(f"batch_size_probs must be probabilities of sizes 1..k (k <= max_batch_size) summing to at "
                                    f"most 1, the rest going to k+1..max_batch_size; got {list(probs)}", field="batch_size_probs")
        self.batch_size_probs = probs
        self.dtypes = check_dtypes(as_list(dtypes, "dtypes"))
        if dtype_weights is None:
            dtype_weights = [DTYPE_WEIGHTS[d] for d in self.dtypes]
        self.dtype_weights = choice_weights(dtype_weights, len(self.dtypes), "dtype_weights")
        self.gpus = sampler_gpus(as_list(gpus, "gpus"), as_list(gpu_counts, "gpu_counts"))
        self.gpu_weights = choice_weights(gpu_weights, len(self.gpus.gpus), "gpu_weights")
        if num_gpus_policy not in ("uniform", "minimum"):
            raise InvalidInputError(f"must be uniform or minimum, got {num_gpus_policy!r}", field="num_gpus_policy")
        self.num_gpus_policy = num_gpus_policy
        self.memory_fraction = check_fraction(memory_fraction, "memory_fraction")
        self.perturb_probability = check_fraction(perturb_probability, "perturb_probability", allow_zero=True)
        self.perturb_field_probability = check_fraction(perturb_field_probability, "perturb_field_probability", allow_zero=True)
        self.variants_per_model = int(variants_per_model)
        if self.variants_per_model < 0:
            raise InvalidInputError(f"must be >= 0, got {variants_per_model}", field="variants_per_model")
        self.ranges = {}
        for name, value in (("layers_range", layers_range), ("heads_range", heads_range), ("hidden_range", hidden_range),
                            ("intermediate_range", intermediate_range)):
            if not 0 <= float(value) < 1:
                raise InvalidInputError(f"must be in [0, 1) (a relative change), got {value}", field=name)
            self.ranges[name] = float(value)
        self.size_multiple = int(size_multiple)
        if self.size_multiple < 1:
            raise InvalidInputError(f"must be >= 1, got {size_multiple}", field="size_multiple")
        self.max_rounds = int(max_rounds)
        self.last_report = SampleReport()
        self._pool: dict[str, IntArray] | None = None

    # -- priors ---------------------------------------------------------------------------------
    def trace_prior(self, which: str) -> IntArray:
        """(prompt, generated) pairs of one trace (read once per process)."""
        return trace_pairs(which, self.trace_paths.get(which))

    def perturb(self, rng: np.random.Generator, base_idx: IntArray) -> dict[str, IntArray]:
        """Perturbed architectures of the models ``base_idx`` (vectorised; see the class doc)."""
        return perturb_architectures(self.models, rng, base_idx, self.ranges, self.perturb_field_probability,
                                     self.size_multiple)

    def _draw_batch(self, u: NDArray[np.float64], u_tail: NDArray[np.float64]) -> IntArray:
        return draw_batch_sizes(self.batch_size_probs, self.max_batch_size, u, u_tail)

    def _draw(self, rng: np.random.Generator, m: int) -> tuple[pd.DataFrame, dict[str, int]]:
        mdl = self.models
        # every random array is drawn in a fixed order whose sizes depend on m only
        t_idx = rng.choice(len(self.traces), size=m, p=self.trace_weights)
        u_row, u_batch, u_tail, u_model = rng.random(m), rng.random(m), rng.random(m), rng.random(m)
        dtype_idx = rng.choice(len(self.dtypes), size=m, p=self.dtype_weights)
        perturbed = rng.random(m) < self.perturb_probability
        variant_idx = rng.integers(0, max(self.variants_per_model, 1), m)
        u_gpu, u_count = rng.random(m), rng.random(m)
        # I: (prompt, generated) rows of the traces
        prompt = np.empty(m, dtype=np.int64)
        gen = np.empty(m, dtype=np.int64)
        for t, name in enumerate(self.traces):
            sel = t_idx == t
            pairs = self.trace_prior(name)
            rows = np.minimum((u_row[sel] * len(pairs)).astype(np.int64), len(pairs) - 1)
            prompt[sel], gen[sel] = pairs[rows, 0], pairs[rows, 1]
        batch = self._draw_batch(u_batch, u_tail)
        # A: a model whose context holds the request, then (maybe) one of its variants
        eligible = (prompt + gen)[:, None] <= mdl.max_context[None, :]
        base_idx, model_ok = pick(eligible * self.model_weights[None, :], u_model)
        arch = {c: mdl.col(c)[base_idx] for c in ARCH_COLUMNS}
        if self.perturb_probability > 0:
            if self.variants_per_model == 0:
                variant = self.perturb(rng, base_idx)
            else:
                assert self._pool is not None
                at = base_idx * self.variants_per_model + variant_idx
                variant = {c: self._pool[c][at] for c in ARCH_COLUMNS}
            for c in ARCH_COLUMNS:
                arch[c] = np.where(perturbed, variant[c], arch[c])
        cols: dict[str, Any] = {"model": mdl.ids[base_idx], "gpu": self.gpus.ids[0], "num_gpus": 1, "batch_size": batch,
                                "prompt_tokens": prompt, "generated_tokens": gen,
                                "dtype": np.array(self.dtypes, dtype=object)[dtype_idx],
                                "trace": np.array(self.traces, dtype=object)[t_idx], **arch}
        df = config_frame(cols)[model_ok]
        # H: a GPU that can hold the row, and a GPU count
        g_idx, counts, placed = self._place(df, self.gpus, self.dtypes, u_gpu[model_ok], u_count[model_ok],
                                            self.gpu_weights, self.num_gpus_policy)
        df = df.assign(gpu=self.gpus.ids[g_idx].astype(str), num_gpus=counts.astype(np.int64))
        return df[placed], {"context": int((~model_ok).sum()), "placement": int((~placed).sum())}

    def _variant_pool(self, seed: int) -> dict[str, IntArray]:
        """``variants_per_model`` perturbed variants of every model, from a stream of ``seed``
        separate from the row draws."""
        k = self.variants_per_model
        return self.perturb(np.random.default_rng([check_seed(seed), 1]), np.repeat(np.arange(len(self.models.archs)), k))

    def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
        """``n`` configurations from the priors (see the class doc), the same for the same seed."""
        if self.perturb_probability > 0 and self.variants_per_model > 0:
            self._pool = self._variant_pool(seed)
        return super().sample(n, seed)

    def sample_blocks(self, n: int, seed: int = 0, block: int | None = None) -> Iterator[pd.DataFrame]:
        """As :meth:`Sampler.sample_blocks`, every block drawing from the architecture variants of ``seed``."""
        if self.perturb_probability > 0 and self.variants_per_model > 0:
            self._pool = self._variant_pool(seed)
        return super().sample_blocks(n, seed, block)

    def architectures(self, seed: int = 0) -> pd.DataFrame:
        """The architecture set A for ``seed``: the base models and their perturbed variants."""
        rows = []
        for a in self.models.archs:
            rows.append({"model": a.id, "variant": 0, **{c: getattr(a, c) for c in ARCH_COLUMNS}})
        if self.perturb_probability > 0 and self.variants_per_model > 0:
            pool = self._variant_pool(seed)
            for j in range(len(pool["num_layers"])):
                i = j // self.variants_per_model
                rows.append({"model": self.models.archs[i].id, "variant": j % self.variants_per_model + 1,
                             **{c: int(pool[c][j]) for c in ARCH_COLUMNS}})
        return pd.DataFrame(rows)
