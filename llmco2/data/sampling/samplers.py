"""The sampling driver and the paper's baseline strategy.

:class:`Sampler` draws rounds of candidates until ``n`` placeable rows are collected (a
:class:`SampleReport` counts what was drawn and dropped); :class:`RandomSampler` draws every field
uniformly over its range (the focused strategy is :mod:`llmco2.data.sampling.focused`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from llmco2.data.sampling.architectures import EDGE_MODELS, PAPER_MODELS, sampler_models
from llmco2.data.sampling.common import (
    ARCH_COLUMNS,
    DTYPES,
    SAMPLE_COLUMNS,
    IntArray,
    as_list,
    check_dtypes,
    check_fraction,
    pick,
)
from llmco2.data.sampling.frames import config_frame
from llmco2.data.sampling.hardware import GPU_COUNTS, PAPER_GPUS, Gpus, feasible, sampler_gpus
from llmco2.errors import InvalidInputError
from llmco2.specs.limits import whole_number

log = logging.getLogger(__name__)


def check_seed(seed: Any) -> int:
    """``seed`` as a whole number from 0 (NumPy refuses a negative seed with a ``ValueError`` of its
    own); text, fractions and other types are refused too, naming ``seed``."""
    return whole_number(seed, "seed", 0)


@dataclass
class SampleReport:
    """What the last :meth:`sample` call did: ``drawn`` candidates (rounds oversample; the surplus
    beyond ``requested`` is discarded, not counted as dropped) and the candidates ``dropped`` per
    reason (``context``: no model's context holds the request; ``placement``: no allowed GPU and
    count can run it)."""

    requested: int = 0
    drawn: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def dropped_total(self) -> int:
        return int(sum(self.dropped.values()))

    def as_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "drawn": self.drawn, "dropped": self.dropped_total,
                "dropped_by_reason": dict(self.dropped), "seconds": round(self.seconds, 3)}


#: Rows drawn together by :meth:`Sampler.sample_blocks` (some 9 KB each while drawing: ~0.5 GB).
SAMPLE_BLOCK = 50_000


def block_seed(seed: int, index: int) -> int:
    """The seed of block ``index`` of a sample drawn with ``seed``."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


class Sampler:
    """Shared driver: draw rounds of candidates until ``n`` placeable rows are collected."""

    memory_fraction: float
    max_rounds: int
    last_report: SampleReport

    def _draw(self, rng: np.random.Generator, m: int) -> tuple[pd.DataFrame, dict[str, int]]:
        raise NotImplementedError

    def _expected_keep(self) -> float:
        return 0.9

    def sample_blocks(self, n: int, seed: int = 0, block: int | None = None) -> Iterator[pd.DataFrame]:
        """``n`` configurations in frames of at most ``block`` rows, so that memory does not grow
        with ``n``. Up to ``block`` rows: the single frame of :meth:`sample`; beyond, block ``i``
        draws with its own seed, derived from ``(seed, i)``. :attr:`last_report` covers every block."""
        block = block or SAMPLE_BLOCK
        seed = check_seed(seed)
        if n <= block:
            yield self.sample(n, seed)
            return
        total = SampleReport(requested=n)
        for i, lo in enumerate(range(0, n, block)):
            frame = Sampler.sample(self, min(block, n - lo), block_seed(seed, i))
            total.drawn += self.last_report.drawn
            total.seconds += self.last_report.seconds
            for reason, count in self.last_report.dropped.items():
                total.dropped[reason] = total.dropped.get(reason, 0) + count
            self.last_report = total
            yield frame

    def sample(self, n: int, seed: int = 0) -> pd.DataFrame:
        """``n`` configurations (the columns of :data:`SAMPLE_COLUMNS`), the same for the same seed."""
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise InvalidInputError(f"must be a non-negative integer, got {n!r}", field="n")
        n = int(n)
        start = time.perf_counter()
        rng = np.random.default_rng(check_seed(seed))
        report = SampleReport(requested=n)
        parts: list[pd.DataFrame] = []
        have = 0
        for _ in range(self.max_rounds):
            if have >= n:
                break
            m = int(math.ceil((n - have) / self._expected_keep() * 1.1)) + 16
            part, dropped = self._draw(rng, m)
            report.drawn += m
            for reason, count in dropped.items():
                report.dropped[reason] = report.dropped.get(reason, 0) + int(count)
            parts.append(part)
            have += len(part)
        report.seconds = time.perf_counter() - start
        self.last_report = report
        if have < n:
            raise InvalidInputError(f"only {have} of {n} configurations could be placed after {self.max_rounds} rounds "
                                    f"(dropped: {report.dropped}); allow more GPUs, GPU counts or smaller dtypes",
                                    field="n")
        out = pd.concat(parts, ignore_index=True).iloc[:n] if parts else config_frame({c: [] for c in SAMPLE_COLUMNS})
        if report.dropped_total:
            log.info("%s: drew %d configurations, dropped %d that could not be placed (%s); kept %d",
                     type(self).__name__, report.drawn, report.dropped_total, report.dropped, n)
        return out.reset_index(drop=True)

    def _place(self, df: pd.DataFrame, gpus: Gpus, dtypes: Sequence[str], u_gpu: NDArray[np.float64],
               u_count: NDArray[np.float64], gpu_weights: NDArray[np.float64], policy: str,
               ) -> tuple[IntArray, IntArray, NDArray[np.bool_]]:
        """Pick a GPU (among those that can hold the row) and a count per row."""
        feas = feasible(df, gpus, dtypes, self.memory_fraction)
        any_count = feas.any(axis=2)  # (n, G)
        g_idx, ok = pick(any_count * gpu_weights[None, :], u_gpu)
        counts_ok = feas[np.arange(len(df)), g_idx]  # (n, C)
        if policy == "minimum":
            c_idx = np.argmax(counts_ok, axis=1)
        else:
            c_idx, _ = pick(counts_ok.astype(np.float64), u_count)
        return g_idx, gpus.counts[c_idx], ok


class RandomSampler(Sampler):
    """The paper's baseline: every field uniform over its range.

    Models uniform over ``models`` + ``extra_models`` (catalog architectures, unperturbed),
    prompt tokens in ``1..max_prompt``, generated tokens in ``1..max_generated``, batch size in
    ``1..max_batch``, weight dtype, GPU and GPU count uniform over their lists. Draws that cannot
    run (context longer than the model's, no tensor-parallel split, unsupported dtype, weights +
    KV cache over ``memory_fraction`` of the GPUs' memory) are rejected, so the sample is uniform
    over the runnable configurations. ``trace`` is ``uniform``.
    """

    def __init__(self, models: Sequence[str] = PAPER_MODELS + EDGE_MODELS, extra_models: Sequence[str] = (),
                 gpus: Sequence[str] = PAPER_GPUS, gpu_counts: Sequence[int] = GPU_COUNTS,
                 dtypes: Sequence[str] = DTYPES, max_prompt: int = 4096, max_generated: int = 1024,
                 max_batch: int = 8, memory_fraction: float = 0.9, max_rounds: int = 50) -> None:
        self.models = sampler_models(as_list(models, "models") + as_list(extra_models, "extra_models"))
        self.gpus = sampler_gpus(as_list(gpus, "gpus"), as_list(gpu_counts, "gpu_counts"))
        self.dtypes = check_dtypes(as_list(dtypes, "dtypes"))
        for name, value in (("max_prompt", max_prompt), ("max_generated", max_generated), ("max_batch", max_batch)):
            if int(value) < 1:
                raise InvalidInputError(f"must be >= 1, got {value}", field=name)
        self.max_prompt, self.max_generated, self.max_batch = int(max_prompt), int(max_generated), int(max_batch)
        self.memory_fraction = check_fraction(memory_fraction, "memory_fraction")
        self.max_rounds = int(max_rounds)
        self.last_report = SampleReport()

    def _expected_keep(self) -> float:
        return 0.3

    def _draw(self, rng: np.random.Generator, m: int) -> tuple[pd.DataFrame, dict[str, int]]:
        mod = rng.integers(0, len(self.models.archs), m)
        prompt = rng.integers(1, self.max_prompt + 1, m)
        gen = rng.integers(1, self.max_generated + 1, m)
        batch = rng.integers(1, self.max_batch + 1, m)
        dtype = rng.integers(0, len(self.dtypes), m)
        g_idx = rng.integers(0, len(self.gpus.gpus), m)
        c_idx = rng.integers(0, len(self.gpus.counts), m)
        cols: dict[str, Any] = {"model": self.models.ids[mod], "gpu": self.gpus.ids[g_idx], "num_gpus": self.gpus.counts[c_idx],
                                "batch_size": batch, "prompt_tokens": prompt, "generated_tokens": gen,
                                "dtype": np.array(self.dtypes, dtype=object)[dtype], "trace": "uniform"}
        for c in ARCH_COLUMNS:
            cols[c] = self.models.col(c)[mod]
        df = config_frame(cols)
        context_ok = prompt + gen <= self.models.max_context[mod]
        feas = feasible(df, self.gpus, self.dtypes, self.memory_fraction)
        placed = feas[np.arange(m), g_idx, c_idx]
        keep = context_ok & placed
        return df[keep], {"context": int((~context_ok).sum()), "placement": int((context_ok & ~placed).sum())}
