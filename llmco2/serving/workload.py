"""What arrives at a server: request lengths (prompt and output tokens) and arrival times.

Lengths come from an Azure LLM inference trace (``code`` or ``conv``), a fixed pair, or any
empirical arrays. Arrivals are a Poisson process at a rate (requests per second), the trace's own
timestamps, or a closed loop of ``concurrency`` clients (each sends its next request the moment
the previous one finishes; arrival times are then decided by the simulation).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.specs.limits import MAX_SIMULATED_REQUESTS

log = logging.getLogger(__name__)
LENGTH_SOURCES = ("conv", "code", "fixed")


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order.

    Attributes:
        prompt_tokens: prompt length of each request (tokens, >= 1).
        output_tokens: generated tokens of each request (>= 1; the first comes out of the prefill).
        arrival_s: arrival time of each request (s, non-decreasing), or ``None`` for a closed loop.
        concurrency: closed-loop clients (requests in the system at once), or ``None`` for open arrivals.
        description: how the workload was made (for reports).
    """

    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    arrival_s: NDArray[np.float64] | None = None
    concurrency: int | None = None
    description: str = ""

    def __post_init__(self) -> None:
        p, o = np.asarray(self.prompt_tokens), np.asarray(self.output_tokens)
        if p.ndim != 1 or p.shape != o.shape or len(p) == 0:
            raise InvalidInputError("prompt and output token arrays must be 1-D, equally long and non-empty", field="workload")
        if (p < 1).any() or (o < 1).any():
            raise InvalidInputError("every request needs >= 1 prompt token and >= 1 output token", field="workload")
        if (self.arrival_s is None) == (self.concurrency is None):
            raise InvalidInputError("give either arrival times (open load) or a concurrency (closed loop), not both",
                                    field="load")
        if self.concurrency is not None and self.concurrency < 1:
            raise InvalidInputError(f"concurrency must be >= 1, got {self.concurrency}", field="concurrency")
        if self.arrival_s is not None:
            a = np.asarray(self.arrival_s, dtype=np.float64)
            if a.shape != p.shape or not np.isfinite(a).all() or (np.diff(a) < 0).any() or (a < 0).any():
                raise InvalidInputError("arrival times must be finite, >= 0 and non-decreasing, one per request",
                                        field="arrival_s")
            object.__setattr__(self, "arrival_s", a)
        object.__setattr__(self, "prompt_tokens", p.astype(np.int64))
        object.__setattr__(self, "output_tokens", o.astype(np.int64))

    def __len__(self) -> int:
        return len(self.prompt_tokens)


@functools.lru_cache(maxsize=1)
def bundled_traces() -> dict[str, NDArray[Any]]:
    """The Azure traces' lengths and arrival offsets shipped with the package
    (``serving/data/azure_lengths.npz``, see its ``AZURE_TRACES.md``): ``{trace}_prompt``,
    ``{trace}_output`` (tokens, >= 1) and ``{trace}_offsets`` (s), in arrival order."""
    with resources.as_file(resources.files("llmco2.serving") / "data" / "azure_lengths.npz") as path:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}


def trace_lengths(which: str, n: int | None = None, seed: int = 0) -> tuple[NDArray[np.int64], NDArray[np.int64],
                                                                              NDArray[np.float64]]:
    """Prompt and output lengths and arrival offsets (s from the first request) of an Azure trace
    (``conv`` or ``code``; shipped with the package, :func:`bundled_traces`).

    ``n`` requests drawn with replacement (seeded) when given, else the whole trace in arrival order.
    Zero-token rows are raised to 1 token (a request has at least one prompt and one output token).
    """
    if which not in ("conv", "code"):
        raise InvalidInputError(f"unknown trace {which!r}; expected conv or code", field="lengths")
    z = bundled_traces()
    prompt = z[f"{which}_prompt"].astype(np.int64)
    output = z[f"{which}_output"].astype(np.int64)
    offsets = z[f"{which}_offsets"].astype(np.float64)
    if n is not None:
        if not 1 <= n <= MAX_SIMULATED_REQUESTS:
            raise InvalidInputError(f"must be from 1 to {MAX_SIMULATED_REQUESTS:,} requests, got {n:,}", field="requests_count")
        idx = np.random.default_rng(seed).integers(0, len(prompt), size=n)
        return prompt[idx], output[idx], np.sort(offsets[idx])
    return prompt, output, offsets


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> NDArray[np.float64]:
    """Arrival times (s) of ``n`` requests of a Poisson process at ``rate_per_s``."""
    if not rate_per_s > 0 or not np.isfinite(rate_per_s):
        raise InvalidInputError(f"must be a positive number of requests per second, got {rate_per_s}", field="rate")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=n)
    return np.cumsum(gaps) - gaps[0]


def make_workload(lengths: str = "conv", n: int | None = None, rate: float | None = None, concurrency: int | None = None,
                  timestamps: bool = False, prompt_tokens: int | None = None, output_tokens: int | None = None,
                  seed: int = 0) -> Workload:
    """A workload from a length source and a load (exactly one of ``rate``, ``concurrency``, ``timestamps``).

    ``lengths``: ``conv`` / ``code`` (Azure trace; ``n`` requests drawn with the seed, or the whole
    trace) or ``fixed`` (``n`` requests of ``prompt_tokens`` / ``output_tokens``).
    ``timestamps`` replays the trace's own arrival times (whole trace, or the sorted offsets of the
    drawn requests).
    """
    if n is not None and not 1 <= n <= MAX_SIMULATED_REQUESTS:
        raise InvalidInputError(f"must be from 1 to {MAX_SIMULATED_REQUESTS:,} requests, got {n:,}", field="serving_requests")
    loads = sum(x is not None and x is not False for x in (rate, concurrency, timestamps or None))
    if loads != 1:
        raise InvalidInputError("give exactly one load: --rate R, --concurrency N or trace timestamps", field="load")
    if lengths == "fixed":
        if prompt_tokens is None or output_tokens is None:
            raise InvalidInputError("fixed lengths need --prompt-tokens and --gen-tokens", field="lengths")
        if timestamps:
            raise InvalidInputError("trace timestamps need a trace (conv or code) as the length source", field="load")
        count = n or 1000
        prompt = np.full(count, int(prompt_tokens))
        output = np.full(count, int(output_tokens))
        offsets = None
        what = f"fixed {prompt_tokens}/{output_tokens} tokens"
    elif lengths in ("conv", "code"):
        prompt, output, offsets = trace_lengths(lengths, n, seed)
        what = f"Azure {lengths} trace lengths"
    else:
        raise InvalidInputError(f"unknown length source {lengths!r}; expected one of {', '.join(LENGTH_SOURCES)}",
                                field="lengths")
    if concurrency is not None:
        return Workload(prompt, output, None, int(concurrency), f"{what}, closed loop of {concurrency} clients")
    if rate is not None:
        return Workload(prompt, output, poisson_arrivals(len(prompt), float(rate), seed), None,
                        f"{what}, Poisson arrivals at {rate:g} req/s")
    assert offsets is not None
    return Workload(prompt, output, offsets, None, f"{what}, trace timestamps")
