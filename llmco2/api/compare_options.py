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

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmco2.errors import InvalidInputError

if TYPE_CHECKING:
    from llmco2.api.options import RequestOptions
    from llmco2.specs import GPU, ModelArch

#: GPU counts tried per type (each up to ``max_gpus``).
GPU_COUNTS = (1, 2, 4, 8)
#: What a configuration whose weights do not fit suggests in its ``left_out`` line: plain words, as
#: the line reads the same in Python and on the command line (``gpus`` is compare's GPU types).
MEMORY_ADVICE = "use more GPUs or a smaller dtype"
#: The modes ``compare``'s ``expert_parallel`` (``--ep``) accepts besides a degree N: ``auto`` offers
#: the expert-parallel layouts of a mixture-of-experts model beside the others (nothing for a dense
#: model), ``off`` none of them, ``only`` those alone (a dense model is refused).
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


def check_ep_mode(mode: str | int, arch: ModelArch) -> tuple[str, int | None]:
    """``expert_parallel`` as a mode and the expert-parallel degree it asks for: ``auto``, ``off``
    and ``only`` as they are (no degree); a degree N keeps the rows whose ``expert_parallel`` is N
    (1: those without expert parallelism, as ``off``; N > 1: ``only``, with ``ep`` = N). An unknown
    mode, a degree below 1, and ``only`` or N > 1 on a dense model are refused."""
    if isinstance(mode, str) and mode in EP_MODES:
        mode_, degree = mode, None
    elif isinstance(mode, numbers.Integral) and not isinstance(mode, bool) and mode >= 1:
        mode_, degree = ("off", None) if mode == 1 else ("only", int(mode))
    else:
        raise InvalidInputError(f"must be one of {', '.join(EP_MODES)}, or a whole number of GPUs from 1 (the "
                                f"expert-parallel degree), got {mode!r}", field="expert_parallel")
    if mode_ == "only" and not arch.is_moe:
        use = "use auto, off or 1" if degree is None else "use 1, off or auto"
        raise InvalidInputError(f"{arch.id} is a dense model; expert parallelism needs a mixture-of-experts model "
                                f"({use})", field="expert_parallel")
    return mode_, degree


def check_degree(value: int | None, name: str) -> int | None:
    """A ``tp`` or ``dp`` restriction: ``None`` (any) or a whole number from 1."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise InvalidInputError(f"must be a whole number from 1, got {value!r}", field=name)


def layouts(max_gpus: int, tp: int | None = None, dp: int | None = None, ep: int | None = None,
            expert_parallel: str = "auto") -> list[tuple[int, int, int]]:
    """The ``(num_gpus, tp, ep)`` layouts tried up to ``max_gpus`` GPUs (``ep`` 1, or the GPU count
    where ``expert_parallel`` allows it) whose degrees are ``tp``, ``dp`` and ``ep`` where given."""
    counts = [n for n in GPU_COUNTS if n <= max_gpus]
    eps = {"off": (False,), "only": (True,)}.get(expert_parallel, (False, True))
    return [(n, t, n if spread else 1) for n in counts for t in counts if n % t == 0 for spread in eps
            if (not spread or n > 1) and tp in (None, t) and dp in (None, n // t) and ep in (None, n if spread else 1)]


def restriction_text(tp: int | None, dp: int | None, ep: int | None) -> str:
    """The restrictions given, as the parameters that set them (`tp=2` with `dp=2`)."""
    given = [f"`{name}={value}`" for name, value in (("tp", tp), ("dp", dp), ("expert_parallel", ep)) if value is not None]
    return " with ".join(given)


def restricted_field(tp: int | None, dp: int | None, ep: int | None) -> str:
    """The parameter an error about the restrictions names: the first one given."""
    return next(name for name, value in (("tp", tp), ("dp", dp), ("expert_parallel", ep)) if value is not None)


def check_restriction(max_gpus: int, tp: int | None, dp: int | None, ep: int | None, expert_parallel: str) -> None:
    """Refuse degrees that no layout tried has, whatever the GPU: naming the first parameter given."""
    if layouts(max_gpus, tp, dp, ep, expert_parallel):
        return
    field = restricted_field(tp, dp, ep)
    counts = ", ".join(str(n) for n in GPU_COUNTS if n <= max_gpus)
    raise InvalidInputError(f"{restriction_text(tp, dp, ep)} matches no configuration tried: {counts} GPUs (up to "
                            f"`max_gpus={max_gpus}`), split as tp x dp = GPUs, with ep = 1 or the GPU count", field=field)


def gpu_ids(gpus: str | Sequence[str]) -> list[str]:
    """``datacentre`` (the data-centre GPUs of the catalog), ``all`` (every GPU of the catalog) or
    a list of ids (a comma-separated text or a sequence)."""
    from llmco2.carbon.reports import COMPARE_GPUS
    from llmco2.specs import get_gpu, gpu_catalog

    if not isinstance(gpus, str):
        try:
            names = list(gpus)
        except TypeError:
            names = [None]
        if not all(isinstance(n, str) for n in names) or isinstance(gpus, (bytes, bytearray)):
            raise InvalidInputError(f"must be GPU ids (a comma-separated text or a list of texts), datacentre or all, "
                                    f"got {gpus!r}", field="gpus")
        gpus = names
    if isinstance(gpus, str) and gpus.strip() in ("datacentre", "datacenter"):
        return list(COMPARE_GPUS)
    if isinstance(gpus, str) and gpus.strip() == "all":
        return sorted(gpu_catalog().ids)
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
    per_group = memory_budget(arch, gpu, req, advice=MEMORY_ADVICE)["kv_capacity_tokens"] // req.attention_dp
    if per_group < longest_tokens:
        raise InvalidInputError(f"no KV room for a {longest_tokens}-token request", field="gpus")


def server_options(arch: ModelArch, gpus: Sequence[str], max_gpus: int, options: RequestOptions,
                   longest_tokens: int, expert_parallel: str | int = "off", tp: int | None = None,
                   dp: int | None = None) -> tuple[list[ServerOption], list[str]]:
    """The configurations that hold the weights and at least one longest request in KV cache; and
    one line per GPU type left out (none of its configurations fits), saying why, per GPU type that
    holds the model but has no valid expert-parallel layout (``expert_parallel`` ``auto`` or
    ``only`` on a mixture-of-experts model), and per GPU type whose configurations the degrees
    ``tp``, ``dp`` and ``expert_parallel`` N leave out (with why the layouts of those degrees do not serve)."""
    from llmco2.specs import Request, get_gpu

    mode, ep = check_ep_mode(expert_parallel, arch)
    tp, dp = check_degree(tp, "tp"), check_degree(dp, "dp")
    restricted = any(v is not None for v in (tp, dp, ep))
    if restricted:
        check_restriction(max_gpus, tp, dp, ep, mode)
    compute = Request(weight_dtype=options.dtype).compute_dtype  # an unknown dtype is refused here, not taken for a misfit
    counts = [n for n in GPU_COUNTS if n <= max_gpus]
    found: list[ServerOption] = []
    left: list[str] = []
    for gid in gpus:
        gpu, dense, moe, refusals = get_gpu(gid), [], [], []
        if not gpu.supports(compute):  # type: ignore[arg-type]
            left.append(f"{gpu.id}: has no {compute} throughput (supported: {', '.join(sorted(gpu.peak_dense_tops))}); "
                        "choose another `dtype`")
            continue
        if mode != "only":
            fitting = [t for t in counts if _holds_quietly(arch, gpu, t, t, 1, options.dtype, longest_tokens)]
            dense = [ServerOption(gpu, t, n // t) for n in counts for t in fitting if n % t == 0]
        if mode != "off" and arch.is_moe:
            for n in (n for n in counts if n > 1):
                for t in (t for t in counts if n % t == 0):
                    try:
                        holds(arch, gpu, n, t, n, options.dtype, longest_tokens)
                        moe.append(ServerOption(gpu, t, n // t, ep=n))
                    except InvalidInputError as exc:
                        refusals.append(str(exc.args[0]))
        kept = [o for o in dense + moe if tp in (None, o.tp) and dp in (None, o.dp) and ep in (None, o.ep)]
        if not dense and not moe:
            left.append(f"{gpu.id}: {arch.id} does not fit on up to {max_gpus} of them")
        elif not kept:
            left.append(f"{gpu.id}: no configuration with {_degrees(tp, dp, ep)} "
                        f"({_why_not(arch, gpu, max_gpus, tp, dp, ep, mode, options.dtype, longest_tokens)})")
        elif arch.is_moe and mode != "off" and not moe and counts[-1] > 1 and not restricted:
            left.append(f"{gpu.id}: no expert-parallel layout ({refusals[-1]})")
        found += kept
    return found, left


def refuse_empty_restriction(arch: ModelArch, gpus: Sequence[str], max_gpus: int, options: RequestOptions,
                             longest_tokens: int, expert_parallel: str | int, tp: int | None, dp: int | None,
                             left: Sequence[str]) -> None:
    """Where :func:`server_options` found nothing for degrees that configurations without them
    would have had, refuse the degrees, naming the first given, with the ``left`` lines of why."""
    ep = check_ep_mode(expert_parallel, arch)[1]
    if (tp, dp, ep) == (None, None, None) or not server_options(arch, gpus, max_gpus, options, longest_tokens, "auto")[0]:
        return
    raise InvalidInputError(f"{restriction_text(tp, dp, ep)} leaves no configuration of {arch.id} on up to {max_gpus} "
                            f"GPUs: {'; '.join(left)}", field=restricted_field(tp, dp, ep))


def _degrees(tp: int | None, dp: int | None, ep: int | None) -> str:
    """``tp 2 x dp 2, ep 4``: the degrees asked for."""
    split = " x ".join(f"{name} {value}" for name, value in (("tp", tp), ("dp", dp)) if value is not None)
    return ", ".join(part for part in (split, f"ep {ep}" if ep is not None else "") if part)


def _why_not(arch: ModelArch, gpu: GPU, max_gpus: int, tp: int | None, dp: int | None, ep: int | None, mode: str,
             dtype: str | None, longest: int) -> str:
    """Why no layout of the degrees asked for serves ``arch`` on ``gpu``: the refusal of the smallest one.
    A replica without expert parallelism is judged on its ``tp`` GPUs, as :func:`server_options` does."""
    for n, t, e in layouts(max_gpus, tp, dp, ep, mode if arch.is_moe else "off"):
        try:
            holds(arch, gpu, n if e > 1 else t, t, e, dtype, longest)
        except InvalidInputError as exc:
            return str(exc.args[0])
    return "it holds the model otherwise"


def _holds_quietly(arch: ModelArch, gpu: GPU, num_gpus: int, tp: int, ep: int, dtype: str | None, longest: int) -> bool:
    """Whether :func:`holds` accepts the layout."""
    try:
        holds(arch, gpu, num_gpus, tp, ep, dtype, longest)
    except InvalidInputError:
        return False
    return True
