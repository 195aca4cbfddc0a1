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
from llmco2.specs.limits import MAX_SIMULATED_REQUESTS, REQUEST_LIMITS, finite_number, whole_number

log = logging.getLogger(__name__)
LENGTH_SOURCES = ("conv", "code", "fixed")
#: Most tokens of a prompt or an output (as for a request, :data:`llmco2.specs.limits.REQUEST_LIMITS`).
MAX_TOKENS = REQUEST_LIMITS["prompt_tokens"]
#: Lowest arrival rate a workload is simulated at (requests/s): one a day. Idle time between
#: arrivals is charged to the requests, so a rate near zero would charge one request for years of idling
#: (``rate=1e-300`` predicted 1.9e302 J for five requests).
MIN_RATE = 1.0 / 86_400


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
        if p.dtype.kind not in "iuf" or o.dtype.kind not in "iuf":
            raise InvalidInputError("prompt and output token arrays must hold numbers", field="workload")
        for tokens in (p, o):
            if not (np.isfinite(tokens).all() and (tokens >= 1).all() and (tokens <= MAX_TOKENS).all()
                    and (tokens == np.floor(tokens)).all()):
                raise InvalidInputError(f"every request needs a whole number of prompt and output tokens from 1 to "
                                        f"{MAX_TOKENS:,}", field="workload")
        if (self.arrival_s is None) == (self.concurrency is None):
            raise InvalidInputError("give either arrival times (open load) or a concurrency (closed loop), not both",
                                    field="load")
        if self.concurrency is not None:
            object.__setattr__(self, "concurrency", whole_number(self.concurrency, "concurrency", 1))
        if self.arrival_s is not None:
            try:
                a = np.asarray(self.arrival_s, dtype=np.float64)
            except (TypeError, ValueError, OverflowError):
                raise InvalidInputError("arrival times must be numbers", field="arrival_s") from None
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
        n = whole_number(n, "n", 1, MAX_SIMULATED_REQUESTS)
        seed = whole_number(seed, "seed", 0)
        idx = np.random.default_rng(seed).integers(0, len(prompt), size=n)
        return prompt[idx], output[idx], np.sort(offsets[idx])
    return prompt, output, offsets


def check_rate(rate: Any) -> float:
    """``rate`` (requests/s) as a finite number from :data:`MIN_RATE` (one request a day); else an
    :class:`InvalidInputError` naming ``rate``."""
    rate = finite_number(rate, "rate", above=True, what="a positive number of requests per second")
    if rate < MIN_RATE:
        raise InvalidInputError(f"{rate:g} requests/s is below {MIN_RATE:g} (one request a day): the server would idle "
                                f"for {1 / rate:.3g} s between requests and charge that idle energy to them", field="rate")
    return rate


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> NDArray[np.float64]:
    """Arrival times (s) of ``n`` requests of a Poisson process at ``rate_per_s``."""
    rate_per_s = check_rate(rate_per_s)
    seed = whole_number(seed, "seed", 0)
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
    if not isinstance(lengths, str):
        raise InvalidInputError(f"must be one of {', '.join(LENGTH_SOURCES)}, got {lengths!r}", field="lengths")
    if n is not None:
        n = whole_number(n, "serving_requests", 1, MAX_SIMULATED_REQUESTS)
    seed = whole_number(seed, "seed", 0)
    if not isinstance(timestamps, (bool, np.bool_)):
        raise InvalidInputError(f"must be True or False, got {timestamps!r}", field="timestamps")
    loads = sum(x is not None and x is not False for x in (rate, concurrency, timestamps or None))
    if loads != 1:
        raise InvalidInputError("give exactly one load: `rate=R`, `concurrency=N` or trace timestamps", field="load")
    if rate is not None:
        rate = check_rate(rate)
    if concurrency is not None:
        concurrency = whole_number(concurrency, "concurrency", 1)
    if lengths == "fixed":
        if prompt_tokens is None or output_tokens is None:
            raise InvalidInputError("fixed lengths need `prompt_tokens` and `output_tokens`", field="lengths")
        prompt_tokens = whole_number(prompt_tokens, "prompt_tokens", 1, MAX_TOKENS)
        output_tokens = whole_number(output_tokens, "output_tokens", 1, MAX_TOKENS)
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
        return Workload(prompt, output, poisson_arrivals(len(prompt), rate, seed), None,
                        f"{what}, Poisson arrivals at {rate:g} req/s")
    assert offsets is not None
    return Workload(prompt, output, offsets, None, f"{what}, trace timestamps")
