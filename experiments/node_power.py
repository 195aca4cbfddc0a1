"""llmco2's server-scope wall power against MLPerf Inference whole-node power (experiments/data/node_power.csv).

Each row is an 8-GPU node running one LLM benchmark at a measured throughput (output tokens/s) and wall power (W).
For each row the node is simulated with the serving API (:func:`llmco2.serve`, step physics, the shipped constants):

* engines: ``8 / (TP x PP)`` replicas of the model, each on ``TP x PP`` GPUs; llmco2 has no pipeline parallelism, so a
  replica's GPUs are all tensor-parallel (Llama 3.1 405B Offline: TP2 x PP2 simulated as TP4);
* precision: the row's weight precision (``fp8``, ``fp4``), engine ``tensorrt-llm``;
* power limit: MLPerf's per-GPU limit (NVIDIA's MaxQ caps: 350 W, 500 W) is the simulated GPU's ``tdp_w``, which caps
  every step's power in the physics; the host's load proxy is taken against the catalog GPU (the load relative to the
  hardware's full power, which the platform's loaded host figure was derived for);
* load: the measured throughput per replica as a steady Poisson arrival rate (requests/s = tokens/s / mean output
  tokens), with a batch cap of 1024 sequences so the batch is not what limits it; a replica that cannot keep up runs
  saturated and is marked (its simulated throughput is then below the measured one);
* lengths: MLPerf's data sets (CNN/DailyMail, OpenOrca, ...) are not in the rows; prompts and outputs are drawn from the
  Azure conv trace (llmco2's default background), the same for every row: an approximation stated in the output.

Node figures over the steady window (10-80 % of completions, :func:`llmco2.serving.api.steady_state`): GPU power = sum
over replicas; wall power = :func:`llmco2.carbon.server_scope.server_share` of that power over one second on all 8
GPU slots of the GPU's usual platform (``hgx-h200-8``, ``hgx-b200-8``). J per output token at the wall = wall power /
simulated node throughput.

    python experiments/node_power.py [--out experiments/results/node_power.md] [--requests 1500]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "experiments" / "data" / "node_power.csv"
OUT = ROOT / "experiments" / "results" / "node_power.md"
MAX_BATCH = 1024


def simulate_row(row: pd.Series, n: int, seed: int = 0) -> dict:
    """The node of one MLPerf row simulated at its measured throughput; node GPU and wall power (W), J per token."""
    import llmco2
    from llmco2.carbon.server_scope import server_share
    from llmco2.serving.api import steady_state
    from llmco2.serving.workload import Workload, poisson_arrivals, trace_lengths
    from llmco2.specs import get_gpu
    from llmco2.specs.platforms import platform_for_gpu

    gpu = get_gpu(row.gpu_id)
    per_replica = int(row.tensor_parallel) * int(row.pipeline_parallel)
    replicas = int(row.num_gpus) // per_replica
    capped = dataclasses.replace(gpu, tdp_w=float(row.gpu_power_limit_w)) if row.gpu_power_limit_w < gpu.tdp_w else gpu
    prompts, outputs, _ = trace_lengths("conv", n, seed)
    target = float(row.throughput_tokens_per_s) / replicas  # tokens/s per replica
    rate = target / float(outputs.mean())
    work = Workload(prompts, outputs, poisson_arrivals(n, rate, seed), None, f"conv lengths, Poisson {rate:.3g} req/s")
    result = llmco2.serve(row.model, capped, work, num_gpus=per_replica, tp=per_replica, engine="tensorrt-llm",
                          dtype=row.precision, max_batch=MAX_BATCH, scope="server")
    steady = steady_state(result.schedule)
    tokens_per_s = steady["average_power_w"] / steady["j_per_output_token"]
    gpu_w = replicas * steady["average_power_w"]
    node = server_share(gpu_w, 1.0, gpu, int(row.num_gpus))
    node_tps = replicas * tokens_per_s
    return {"replicas": replicas, "gpus_per_replica": per_replica, "target_tps": target * replicas,
            "sim_tps": node_tps, "keeps_up": tokens_per_s >= 0.95 * target, "mean_batch": steady["mean_batch"],
            "gpu_w": gpu_w, "host_w": node.host_energy_j, "psu_w": node.psu_loss_j, "wall_w": node.server_energy_j,
            "platform": platform_for_gpu(gpu).id, "utilisation": node.utilisation,
            "gpu_j_per_token": gpu_w / node_tps, "wall_j_per_token": node.server_energy_j / node_tps}


def not_expressed(row: pd.Series) -> list[str]:
    """What of the row llmco2 approximates (shown beside each result)."""
    out = ["MLPerf's data set lengths (conv trace used)"]
    if int(row.pipeline_parallel) > 1:
        out.append(f"PP{int(row.pipeline_parallel)} (simulated as TP{int(row.tensor_parallel) * int(row.pipeline_parallel)})")
    if row.precision == "fp4":
        out.append("FP4 as 4-bit weights at B200's FP4 peak; FP8 KV cache not modelled (KV at the weights' precision)")
    return out


def table(rows: pd.DataFrame) -> str:
    lines = ["| system | model | scenario | GPUs x limit | measured tok/s | simulated tok/s | measured node W | "
             "llmco2 wall W (GPU W + host W + PSU W) | ratio | measured J/tok | llmco2 wall J/tok | GPU-scope J/tok |",
             "|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows.itertuples():
        keep = "" if r.keeps_up else " (saturated)"
        lines.append(f"| {r.mlperf_platform} | {r.model} {r.precision} | {r.scenario} | {r.num_gpus} x {r.gpu_power_limit_w:g} W "
                     f"| {r.throughput_tokens_per_s:,.0f} | {r.sim_tps:,.0f}{keep} | {r.node_power_w:,.0f} | "
                     f"{r.wall_w:,.0f} ({r.gpu_w:,.0f} + {r.host_w:,.0f} + {r.psu_w:,.0f}) | {r.wall_w / r.node_power_w:.2f} | "
                     f"{r.joules_per_token:.3g} | {r.wall_j_per_token:.3g} | {r.gpu_j_per_token:.3g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--requests", type=int, default=1500, help="simulated requests per replica (default 1500)")
    args = ap.parse_args(argv)
    data = pd.read_csv(DATA)
    start = time.perf_counter()
    sims = [simulate_row(r, args.requests) for _, r in data.iterrows()]
    rows = pd.concat([data, pd.DataFrame(sims)], axis=1)
    rows["approximated"] = ["; ".join(not_expressed(r)) for _, r in data.iterrows()]
    ratio = rows["wall_w"] / rows["node_power_w"]
    kept = rows[rows["keeps_up"]]
    kept_ratio = kept["wall_w"] / kept["node_power_w"]
    summary = (f"{len(rows)} rows; llmco2 wall / measured node power: median {np.median(ratio):.2f}, range "
               f"{ratio.min():.2f}-{ratio.max():.2f}; rows whose simulated replicas keep up with the measured throughput: "
               f"{len(kept)} (median ratio {np.median(kept_ratio):.2f})" if len(kept) else
               f"{len(rows)} rows; llmco2 wall / measured node power: median {np.median(ratio):.2f}")
    wall_jpt = rows["wall_j_per_token"] / rows["joules_per_token"]
    text = "\n".join([
        "# llmco2 server scope against MLPerf Inference whole-node wall power",
        "",
        "Command: `python experiments/node_power.py` (data: `experiments/data/node_power.csv`, described in "
        "`experiments/data/NODE_POWER.md`; method: the docstring of `experiments/node_power.py`). "
        f"{args.requests} simulated requests per replica; {time.perf_counter() - start:.0f} s.",
        "",
        table(rows),
        "",
        f"Summary: {summary}. J per output token at the wall over measured: median {np.median(wall_jpt):.2f}, range "
        f"{wall_jpt.min():.2f}-{wall_jpt.max():.2f} (it mixes the power error with the throughput error where a "
        "replica runs saturated).",
        "",
        "Host share per node (llmco2's platform model): host W is the platform's idle floor plus its dynamic power at the "
        "GPUs' load proxy; PSU W the supply losses at the platform's efficiency. Platforms: "
        + ", ".join(sorted(set(rows["platform"]))) + ".",
        "",
        "What each row approximates (nothing of a row is left out; these are stated approximations):",
        "",
        *[f"- {r.mlperf_platform} {r.model} {r.scenario}: {r.approximated}" for r in rows.itertuples()],
        "",
        "Load proxy of each node (0-1, GPU power relative to the catalog GPU's idle-to-TDP span): "
        + ", ".join(f"{r.model} {r.scenario} {r.utilisation:.2f}" for r in rows.itertuples()) + ".",
        "",
    ])
    Path(args.out).write_text(text, encoding="utf-8")
    rows.drop(columns=["source"]).to_csv(Path(args.out).with_suffix(".csv"), index=False)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
