"""The server configurations ``llmco2 compare`` tries: a GPU type, a GPU count and its layout.

Without expert parallelism a configuration is ``dp`` data-parallel replicas of a ``tp``-GPU
tensor-parallel group; each replica holds the whole model and serves ``1 / dp`` of the load.
For a mixture-of-experts model each such split is also offered with expert parallelism across
the replicas, vLLM's ``--tensor-parallel-size tp --data-parallel-size dp
--enable-expert-parallel`` (:mod:`llmco2.analytic.experts`): ``ep = tp x dp`` (every GPU of the
server), attention tensor-parallel within ``tp`` and data-parallel over the ``dp`` groups, each GPU
holding ``num_experts / ep`` routed experts whole. The ``ep`` GPUs are one server that meets in
every MoE layer's all-to-all, so the whole load is simulated on them at once.

Example:
    >>> from llmco2.specs import get_gpu
    >>> ServerOption(get_gpu("h100"), tp=2, dp=4, ep=8).label
    'h100-sxm x8 (tp 2 x dp 4, ep 8)'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmco2.errors import InvalidInputError

if TYPE_CHECKING:
    from llmco2.api.options import RequestOptions
    from llmco2.specs import GPU, ModelArch

#: GPU counts tried per type (each up to ``max_gpus``).
GPU_COUNTS = (1, 2, 4, 8)
#: What ``compare``'s ``expert_parallel`` (``--ep``) accepts: ``auto`` offers the expert-parallel
#: layouts of a mixture-of-experts model beside the others (nothing for a dense model), ``off``
#: none of them, ``only`` those alone (a dense model is refused).
EP_MODES = ("auto", "off", "only")


@dataclass(frozen=True)
class ServerOption:
    """One server configuration: ``dp`` groups of ``tp`` x ``gpu`` (``dp * tp`` GPUs in all);
    ``ep`` is 1 (the groups are independent replicas) or ``tp * dp`` (expert parallelism across
    them: one server, each GPU holding ``1 / ep`` of the routed experts)."""

    gpu: GPU
    tp: int
    dp: int
    ep: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def simulated_gpus(self) -> int:
        """GPUs of the server one simulation covers: a replica (``tp``), or all of them with expert parallelism."""
        return self.num_gpus if self.ep > 1 else self.tp

    @property
    def copies(self) -> int:
        """How many simulated servers make the configuration (``dp`` replicas; 1 with expert parallelism)."""
        return 1 if self.ep > 1 else self.dp

    @property
    def label(self) -> str:
        if self.ep > 1:
            split = f"tp {self.tp} x dp {self.dp}" if self.dp > 1 else f"tp {self.tp}"
            return f"{self.gpu.id} x{self.num_gpus} ({split}, ep {self.ep})"
        split = f" (tp {self.tp} x dp {self.dp})" if self.dp > 1 else ""
        return f"{self.gpu.id} x{self.num_gpus}{split}"


def check_ep_mode(mode: str, arch: ModelArch) -> None:
    """Refuse an unknown ``expert_parallel`` mode, and ``only`` on a dense model."""
    if mode not in EP_MODES:
        raise InvalidInputError(f"must be one of {', '.join(EP_MODES)}, got {mode!r}", field="expert_parallel")
    if mode == "only" and not arch.is_moe:
        raise InvalidInputError(f"{arch.id} is a dense model; expert parallelism needs a mixture-of-experts model "
                                "(use auto or off)", field="expert_parallel")


def gpu_ids(gpus: str | Sequence[str]) -> list[str]:
    """``datacentre`` (the data-centre GPUs of the catalog), ``all`` (every GPU of the catalog) or
    a list of ids (a comma-separated text or a sequence)."""
    from llmco2.carbon.reports import COMPARE_GPUS
    from llmco2.specs import get_gpu, gpu_catalog

    if isinstance(gpus, str) and gpus.strip() in ("datacentre", "datacenter"):
        return list(COMPARE_GPUS)
    if isinstance(gpus, str) and gpus.strip() == "all":
        return sorted(gpu_catalog())
    names = [g.strip() for g in (gpus.split(",") if isinstance(gpus, str) else gpus) if g.strip()]
    if not names:
        raise InvalidInputError("is empty; give GPU ids, datacentre or all", field="gpus")
    try:
        return list(dict.fromkeys(get_gpu(n).id for n in names))
    except InvalidInputError as exc:
        raise InvalidInputError(str(exc.args[0]), field="gpus") from None


def holds(arch: ModelArch, gpu: GPU, num_gpus: int, tp: int, ep: int, dtype: str | None, longest_tokens: int) -> None:
    """Raise :class:`InvalidInputError` unless ``num_gpus`` x ``gpu`` split ``tp``-wide with
    expert-parallel degree ``ep`` can serve ``arch``: a valid layout whose weights fit (the routed
    experts split ``ep`` ways) with KV room for one request of ``longest_tokens`` tokens in one
    attention group (a request's KV cache stays in its group)."""
    from llmco2.serving.costs import memory_budget
    from llmco2.specs import Request, validate_request

    req = Request(batch_size=1, prompt_tokens=1, generated_tokens=1, num_gpus=num_gpus, tensor_parallel=tp,
                  expert_parallel=ep, weight_dtype=dtype)
    validate_request(req, arch, gpu, check_context=False)
    per_group = memory_budget(arch, gpu, req)["kv_capacity_tokens"] // req.attention_dp
    if per_group < longest_tokens:
        raise InvalidInputError(f"no KV room for a {longest_tokens}-token request", field="gpus")


def server_options(arch: ModelArch, gpus: Sequence[str], max_gpus: int, options: RequestOptions,
                   longest_tokens: int, expert_parallel: str = "off") -> tuple[list[ServerOption], list[str]]:
    """The configurations that hold the weights and at least one longest request in KV cache; and
    one line per GPU type left out (none of its configurations fits), saying why, and per GPU type
    that holds the model but has no valid expert-parallel layout (``expert_parallel`` ``auto`` or
    ``only`` on a mixture-of-experts model)."""
    from llmco2.specs import Request, get_gpu

    check_ep_mode(expert_parallel, arch)
    Request(weight_dtype=options.dtype)  # an unknown dtype is refused here, naming it, not taken for a misfit
    counts = [n for n in GPU_COUNTS if n <= max_gpus]
    found: list[ServerOption] = []
    left: list[str] = []
    for gid in gpus:
        gpu, dense, moe, refusals = get_gpu(gid), [], [], []
        if expert_parallel != "only":
            fitting = [tp for tp in counts if _holds_quietly(arch, gpu, tp, tp, 1, options.dtype, longest_tokens)]
            dense = [ServerOption(gpu, tp, n // tp) for n in counts for tp in fitting if n % tp == 0]
        if expert_parallel != "off" and arch.is_moe:
            for n in (n for n in counts if n > 1):
                for tp in (t for t in counts if n % t == 0):
                    try:
                        holds(arch, gpu, n, tp, n, options.dtype, longest_tokens)
                        moe.append(ServerOption(gpu, tp, n // tp, ep=n))
                    except InvalidInputError as exc:
                        refusals.append(str(exc.args[0]))
        if not dense and not moe:
            left.append(f"{gpu.id}: {arch.id} does not fit on up to {max_gpus} of them")
        elif arch.is_moe and expert_parallel != "off" and not moe and counts[-1] > 1:
            left.append(f"{gpu.id}: no expert-parallel layout ({refusals[-1]})")
        found += dense + moe
    return found, left


def _holds_quietly(arch: ModelArch, gpu: GPU, num_gpus: int, tp: int, ep: int, dtype: str | None, longest: int) -> bool:
    """Whether :func:`holds` accepts the layout."""
    try:
        holds(arch, gpu, num_gpus, tp, ep, dtype, longest)
    except InvalidInputError:
        return False
    return True
