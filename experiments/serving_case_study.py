"""Case study: the carbon of the Azure conversation hour (19,366 requests) on 1, 2 and 4 H100s at
three loads, each request predicted in isolation (batch 1, ``llmco2 predict``) versus served by a
continuously batched vLLM server (``llmco2.serving``). The server's iterations are costed by the step
physics with the shipped constants, as ``llmco2 predict --serving`` does (``--cost-model checkpoint``:
the learned checkpoint's per-request predictions on the grid instead).

Loads: the trace's own arrival times (x1, about 5.4 requests/s), and the same requests with
their arrival times stretched x2 (half the load) or compressed x2 (double the load). Model
Llama-3.1-8B, bf16, TP over the GPUs, world-average grid and industry-average PUE (the defaults).

    python experiments/serving_case_study.py [--model llama3.1-8b] [--cost-model physics|checkpoint]
                                             [--out experiments/results/serving_case_study.md]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from llmco2.carbon.footprint import predict_footprint
from llmco2.prediction.loading import load_predictor
from llmco2.serving import Workload, serve, trace_lengths
from llmco2.serving.api import server_setup
from llmco2.serving.calibration import shipped_calibration

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent
LOADS = {"0.5x (stretched)": 2.0, "1x (as recorded)": 1.0, "2x (compressed)": 0.5}
GPU_COUNTS = (1, 2, 4)


def isolated(model: str, gpu: str, num_gpus: int, prompt: np.ndarray, output: np.ndarray, predictor) -> dict:
    """Every request alone on the GPUs (batch 1), as ``llmco2 predict`` answers: energy (J) and carbon (g)."""
    arch, dev, req = server_setup(model, gpu, num_gpus, None, "vllm", "bf16")
    pairs, inverse = np.unique(np.stack([prompt, output], axis=1), axis=0, return_inverse=True)
    items = [(arch, req.replace(batch_size=1, prompt_tokens=int(p), generated_tokens=int(o)), dev) for p, o in pairs]
    fp = predict_footprint(items, predictor)
    inverse = inverse.reshape(-1)
    return {"energy_j": float(fp.total_j[inverse].sum()), "carbon_g": float(fp.total_g[inverse].sum()),
            "gpu_s": float(fp.latency_s[inverse].sum())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3.1-8b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", default=str(ROOT / "results" / "serving_case_study.md"))
    ap.add_argument("--figure", default=str(ROOT.parent / "docs" / "figures" / "serving_case_study.png"))
    ap.add_argument("--cost-model", choices=("physics", "checkpoint"), default="physics",
                    help="cost of the server's iterations: the step physics (default, as predict --serving) or the learned checkpoint")
    ap.add_argument("--no-calibration", action="store_true", help="with --cost-model checkpoint: no ML.ENERGY correction")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    predictor = load_predictor()
    learned = args.cost_model == "checkpoint"
    calibration = shipped_calibration() if learned and not args.no_calibration else None
    prompt, output, offsets = trace_lengths("conv")
    tokens = int(output.sum())
    rows = []
    for count in GPU_COUNTS:
        iso = isolated(args.model, args.gpu, count, prompt, output, predictor)
        for load, stretch in LOADS.items():
            t0 = time.perf_counter()
            r = serve(args.model, args.gpu, Workload(prompt, output, offsets * stretch), num_gpus=count,
                      predictor=predictor if learned else None, calibration=calibration)
            s = r.summary
            rows.append({"gpus": count, "load": load, "rate_req_s": len(prompt) / (offsets[-1] * stretch),
                         "isolated_kwh": iso["energy_j"] / 3.6e6, "isolated_kg": iso["carbon_g"] / 1000,
                         "served_kwh": s["energy_j"] / 3.6e6, "served_kg": float(r.requests["total_g"].sum()) / 1000,
                         "served_j_per_token": s["energy_j"] / tokens, "isolated_j_per_token": iso["energy_j"] / tokens,
                         "mean_batch": s["mean_batch"], "gpu_utilisation": s["gpu_utilisation"],
                         "average_power_w": s["average_power_w"], "ttft_p50_s": s["ttft_s"]["p50"],
                         "tpot_p50_s": s["tpot_s"]["p50"], "makespan_h": s["makespan_s"] / 3600,
                         "sim_seconds": time.perf_counter() - t0})
            log.info("%d GPU(s), %s: served %.3g kg vs isolated %.3g kg", count, load, rows[-1]["served_kg"], rows[-1]["isolated_kg"])
    frame = pd.DataFrame(rows)
    frame["isolated_over_served"] = frame["isolated_kg"] / frame["served_kg"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out.with_suffix(".csv"), index=False)
    plot(frame, Path(args.figure), args.model)
    lines = [f"# Azure conv hour ({len(prompt):,} requests, {tokens:,} output tokens): isolated vs served, {args.model} on H100",
             "", "Command: `python experiments/serving_case_study.py`. Carbon = operational (world grid, industry PUE) + "
             "embodied. Served: " + ("the learned checkpoint" + (" with the shipped ML.ENERGY v3 correction" if calibration else "")
                                     if learned else "the step physics (as `predict --serving`)") + ".", "",
             "| GPUs | load | req/s | isolated kg CO2eq | served kg CO2eq | isolated / served | served J/token | mean batch | "
             "GPU busy | median TTFT | median TPOT | span (h) |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['load']} | {r['rate_req_s']:.2f} | {r['isolated_kg']:.3g} | {r['served_kg']:.3g} | "
                     f"{r['isolated_kg'] / r['served_kg']:.1f}x | {r['served_j_per_token']:.3g} | {r['mean_batch']:.1f} | "
                     f"{100 * r['gpu_utilisation']:.0f}% | {r['ttft_p50_s']:.2f} s | {1000 * r['tpot_p50_s']:.0f} ms | "
                     f"{r['makespan_h']:.2f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({"sim_seconds": frame["sim_seconds"].round(2).tolist()}))
    return 0


def plot(frame: pd.DataFrame, out: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    labels = [f"{g} GPU{'s' if g > 1 else ''}\n{load.split(' ')[0]}" for g, load in zip(frame["gpus"], frame["load"], strict=True)]
    x = np.arange(len(frame))
    ax.bar(x - 0.2, frame["isolated_kg"], 0.4, label="isolated (each request alone, batch 1)")
    ax.bar(x + 0.2, frame["served_kg"], 0.4, label="served (continuous batching, vLLM)")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("kg CO2eq, all 19,366 requests of the trace")
    ax.set_title(f"Azure conv hour on H100: {model}, loads 0.5x / 1x / 2x the recorded arrival rate", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
