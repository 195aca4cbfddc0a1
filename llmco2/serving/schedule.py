"""What the serving scheduler takes and gives, as data: the engine's limits (:class:`SchedulerConfig`)
and each request's outcome with the iteration log (:class:`Schedule`), for
:func:`llmco2.serving.simulator.simulate`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from llmco2.errors import InvalidInputError
from llmco2.specs.limits import finite_number, whole_number


@dataclass(frozen=True)
class SchedulerConfig:
    """Engine limits.

    Attributes:
        max_batch: most sequences in one iteration (vLLM ``max_num_seqs``, default 256).
        max_batched_tokens: token budget of one iteration (vLLM ``max_num_batched_tokens``).
        chunked_prefill: split prompts into chunks mixed with decodes (vLLM V1) or prefill whole
            prompts in prefill-only iterations (vLLM V0 default).
        kv_capacity_tokens: KV-cache capacity of the server (tokens).
        idle_w: power of the server's GPUs while no request is in it (W).
    """

    max_batch: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    kv_capacity_tokens: int = 10**9
    idle_w: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_batched_tokens", "kv_capacity_tokens"):
            object.__setattr__(self, name, whole_number(getattr(self, name), name, 1))
        if not isinstance(self.chunked_prefill, (bool, np.bool_)):
            raise InvalidInputError(f"must be True or False, got {self.chunked_prefill!r}", field="chunked_prefill")
        object.__setattr__(self, "chunked_prefill", bool(self.chunked_prefill))
        object.__setattr__(self, "idle_w", finite_number(self.idle_w, "idle_w", what="a finite number of W from 0"))


@dataclass
class Schedule:
    """Per-request outcome (arrays over requests, in workload order) and the iteration log.

    Times in s from the start, energies in J (all GPUs); ``prefill_j`` is the part of ``energy_j``
    charged for the request's prompt tokens (the rest is decode), ``idle_share_j`` the part that is
    idle energy. ``log_*`` hold one entry per costed event
    (one prefill iteration, or one run of decode steps): start and end time, energy incl. the idle
    spell before it, that idle energy, output tokens produced, iterations, batch size.
    """

    arrival_s: NDArray[np.float64]
    first_token_s: NDArray[np.float64]
    finish_s: NDArray[np.float64]
    energy_j: NDArray[np.float64]
    prefill_j: NDArray[np.float64]
    idle_share_j: NDArray[np.float64]
    gpu_s: NDArray[np.float64]
    preemptions: NDArray[np.int64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    idle_j: float = 0.0
    busy_s: float = 0.0
    iterations: int = 0
    log_start_s: list[float] = field(default_factory=list)
    log_end_s: list[float] = field(default_factory=list)
    log_energy_j: list[float] = field(default_factory=list)
    log_idle_j: list[float] = field(default_factory=list)
    log_tokens: list[int] = field(default_factory=list)
    log_iterations: list[int] = field(default_factory=list)
    log_batch: list[int] = field(default_factory=list)

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max())

    @property
    def total_energy_j(self) -> float:
        return float(sum(self.log_energy_j))
