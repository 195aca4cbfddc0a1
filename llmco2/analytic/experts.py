"""Expert parallelism of mixture-of-experts layers (``Request.expert_parallel``), vectorised over requests.

The layout is vLLM's ``--tensor-parallel-size T --data-parallel-size D --enable-expert-parallel``
(vLLM docs, "Expert Parallel Deployment"; ``vllm/model_executor/layers/fused_moe/layer.py``, v0.11):
the expert-parallel group has ``EP = T x D`` GPUs.

* Attention, norms, residual adds, the router, dense MLP layers and shared experts run
  tensor-parallel over ``T`` GPUs, as without EP, and data-parallel over the ``D`` groups: the
  request's batch is spread over the groups and a group holds at most ``ceil(B / D)`` sequences.
  Every kernel of the layer is costed on a GPU of such a group (:func:`rank_view`): the groups run
  in lockstep (they meet in every MoE layer's all-to-all; vLLM runs dummy steps on idle ranks), so
  the busiest sets the step time, and each group is counted as that busy (whole-request totals
  count ``D`` groups).
* Each GPU holds ``num_experts / EP`` routed experts whole (no tensor-parallel split of expert
  matrices) and, under **uniform routing** (every expert receives the same share of tokens; load
  imbalance is not modelled), runs ``k / T`` of its group's tokens through them
  (:func:`llmco2.analytic.kernels.expert_parallel_linear_cost`). Per pass it reads the experts,
  among its own, that the tokens of all groups touch.
* Tokens travel to their experts and back in an all-to-all (dispatch and combine,
  :func:`llmco2.analytic.kernels.all_to_all_cost`): a token's experts in its own group's GPUs need
  no transfer (the group holds the token), so only ``(D - 1) / D`` of its ``k`` routed copies
  cross. Each GPU dispatches ``1 / T`` of its group's tokens. With ``D = 1`` (EP = TP, what vLLM
  runs without data parallelism, and ML.ENERGY v3's expert-parallel rows) nothing is dispatched:
  vLLM dispatches only with ``dp_size > 1`` and sums the experts' partial outputs in the
  tensor-parallel all-reduce. With ``T = 1`` every token's experts are elsewhere but for ``1 / EP``:
  ``tokens x k x hidden x activation bytes x (EP - 1) / EP`` each way.

The all-to-all sits in the layer DAG's ``all_reduce_mlp`` slot (the MLP's collective, beside the
tensor-parallel all-reduce when ``T > 1``): the DAG keeps its slots, so graph features and
checkpoints keep their shape. With ``expert_parallel`` 1 nothing here changes a number.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import NDArray

from llmco2.analytic import kernels as K
from llmco2.analytic.mixers import pick

Array = NDArray[np.float64]
#: The expert matrices of a layer and the way tensor parallelism splits them (shared experts keep that split).
EXPERT_SLOTS: tuple[tuple[str, str], ...] = (("gate_proj", "column"), ("up_proj", "column"), ("down_proj", "row"))


def expert_parallel_rows(b: Any) -> NDArray[np.bool_]:
    """Rows whose MoE layers are expert-parallel (``ep > 1`` on a mixture-of-experts model)."""
    return (np.asarray(b.ep) > 1) & (np.asarray(b.experts) > 1)


def attention_dp(b: Any) -> Array:
    """Data-parallel attention groups of each row: ``ep / tp`` where the experts spread beyond the
    tensor-parallel group, else 1."""
    ep, tp = np.asarray(b.ep, dtype=np.float64), np.asarray(b.tp, dtype=np.float64)
    return np.where(expert_parallel_rows(b) & (ep > tp), ep / tp, 1.0)


def all_to_all_rows(b: Any) -> NDArray[np.bool_]:
    """Rows whose MoE layers dispatch tokens over more than one attention group (an all-to-all)."""
    return attention_dp(b) > 1


def rank_batch(b: Any) -> Array:
    """Sequences of the busiest attention group: ``ceil(batch / groups)`` (the batch itself with one group)."""
    groups = attention_dp(b)
    return np.where(groups > 1, np.ceil(np.asarray(b.batch) / groups), b.batch)


def rank_view(b: Any) -> Any:
    """``b`` with the batch of one (the busiest) attention group; ``b`` itself where no row has more than one."""
    if not all_to_all_rows(b).any():
        return b
    return dataclasses.replace(b, batch=rank_batch(b))


def pipeline_stages(b: Any) -> Array:
    """Pipeline stages of each row: ``num_gpus / (tp x attention groups)``."""
    return np.asarray(b.num_gpus) / (np.asarray(b.tp) * attention_dp(b))


def expert_parallel_costs(b: Any, phase: str, plain: dict[str, K.KernelCost],
                          costs: dict[str, K.KernelCost]) -> dict[str, K.KernelCost]:
    """``costs`` (the mixed layer of :func:`llmco2.analytic.layer.layer_costs`, ``b`` its rank view) with
    the MoE layers of expert-parallel rows laid out by expert: the routed share of each expert matrix
    replaced (``plain``: the tensor-parallel MoE layer the mix was built from) and the all-to-all added
    to the MLP's collective, each weighted by the share of layers that are MoE. The same objects where
    no row is expert-parallel."""
    rows = expert_parallel_rows(b)
    if not rows.any():
        return costs
    tokens = K.phase_tokens(b.batch, b.prompt, b.generated, phase)
    passes = K.weight_passes(b.generated, phase)
    groups = attention_dp(b)
    group_per_pass = groups * tokens / np.where(passes > 0, passes, 1.0)
    special = np.asarray(b.special, dtype=bool)
    share = np.where(special, b.f_moe, 1.0)  # MoE share of the mean layer
    out = dict(costs)
    for name, split in EXPERT_SLOTS:
        d_in, d_out = (b.intermediate, b.hidden) if name == "down_proj" else (b.hidden, b.intermediate)
        ep = K.expert_parallel_linear_cost(tokens, d_in, d_out, b.tp, b.ep, passes, group_per_pass, b.experts,
                                           b.experts_per_token, b.shared_experts, b.w_bytes, b.a_bytes, split=split)
        mixed = costs[name] + (ep + plain[name].scaled(-1.0)).scaled(share)  # special: f_moe x EP + f_dense x dense
        out[name] = pick(rows, pick(special, mixed, ep), costs[name])
    a2a = K.all_to_all_cost(tokens / b.tp, b.experts_per_token, b.hidden, groups, b.a_bytes)
    out["all_reduce_mlp"] = pick(rows, costs["all_reduce_mlp"] + a2a.scaled(share), costs["all_reduce_mlp"])
    return out


def weight_bytes_per_gpu(b: Any) -> Array:
    """Weights held by each GPU (bytes): the routed experts split over ``ep`` GPUs and everything else
    over ``tp`` (replicated over the attention groups), each over the pipeline stages; ``params x
    weight bytes / num_gpus`` on rows without expert parallelism, as before."""
    plain = b.params * b.w_bytes / b.num_gpus
    rows = expert_parallel_rows(b)
    if not rows.any():
        return plain
    stages = pipeline_stages(b)
    split = ((b.params - b.routed_params) / b.tp + b.routed_params / np.maximum(b.ep, 1.0)) * b.w_bytes / stages
    return np.where(rows, split, plain)
