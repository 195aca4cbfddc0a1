"""Speed of the serving simulator (a script, not a timed test): simulated requests per second for
the whole Azure conversation trace (19,366 requests, its own timestamps) on one GPU type.

Times separately the one-off cost grid (the predictors on the (batch, context) grid) and the
simulation itself; best of ``--repeat`` runs.

    python experiments/serving_bench.py [--model llama3.1-8b] [--gpu h100] [--gpus 1] [--repeat 3] [--cost-model physics|checkpoint]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from llmco2.prediction.loading import load_predictor
from llmco2.serving import GridCostModel, SchedulerConfig, Workload, idle_power_w, memory_budget, simulate, trace_lengths
from llmco2.serving.api import server_setup
from llmco2.serving.physics_params import shipped_params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3.1-8b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--trace", default="conv", choices=("conv", "code"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cost-model", default="physics", choices=("physics", "checkpoint"),
                    help="the step physics (the default of predict --serving) or the shipped checkpoint's grid")
    args = ap.parse_args(argv)
    predictor = load_predictor() if args.cost_model == "checkpoint" else None
    arch, gpu, req = server_setup(args.model, args.gpu, args.gpus, None, "vllm", "bf16")
    idle = idle_power_w(gpu, args.gpus)[0]
    prompt, output, offsets = trace_lengths(args.trace)
    workload = Workload(prompt, output, offsets)
    cfg = SchedulerConfig(kv_capacity_tokens=int(memory_budget(arch, gpu, req)["kv_capacity_tokens"]), idle_w=idle)
    grid_s, sim_s = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        cost = (GridCostModel.from_predictor(arch, gpu, req, predictor, idle_w=idle) if predictor is not None
                else GridCostModel.from_physics(arch, gpu, req, shipped_params(), idle_w=idle))
        t1 = time.perf_counter()
        schedule = simulate(workload, cost, cfg)
        t2 = time.perf_counter()
        grid_s.append(t1 - t0)
        sim_s.append(t2 - t1)
    best_sim, best_grid = min(sim_s), min(grid_s)
    out = {"trace": args.trace, "cost_model": args.cost_model, "requests": len(workload), "server": f"{args.model} on {args.gpus} x {gpu.id}",
           "cpu_cores": os.cpu_count(), "cost_grid_s": round(best_grid, 3), "simulation_s": round(best_sim, 3),
           "requests_per_s": round(len(workload) / best_sim), "requests_per_s_incl_grid": round(len(workload) / (best_sim + best_grid)),
           "iterations": schedule.iterations, "events": len(schedule.log_energy_j),
           "simulated_iterations_per_s": round(schedule.iterations / best_sim),
           "energy_kwh": round(float(np.sum(schedule.energy_j)) / 3.6e6, 4)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
