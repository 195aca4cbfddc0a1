"""Serving-level energy and carbon: requests inside a continuously batched server.

A workload (lengths and arrivals, :mod:`.workload`) runs through an iteration-level scheduler
(:mod:`.simulator`) whose iterations are costed by the per-phase predictors on a (batch, context)
grid (:mod:`.costs`); :func:`serve` (:mod:`.api`) charges every request its share.
"""

from llmco2.serving.api import ServingResult, serve, steady_state, steady_state_j_per_token, summarise
from llmco2.serving.costs import GridCostModel, IterationCost, idle_power_w, memory_budget
from llmco2.serving.schedule import Schedule, SchedulerConfig
from llmco2.serving.simulator import simulate
from llmco2.serving.workload import Workload, make_workload, poisson_arrivals, trace_lengths

__all__ = ["GridCostModel", "IterationCost", "Schedule", "SchedulerConfig", "ServingResult", "Workload", "idle_power_w",
           "make_workload", "memory_budget", "poisson_arrivals", "serve", "simulate", "steady_state", "steady_state_j_per_token",
           "summarise", "trace_lengths"]
