"""Benchmark of the prediction path on this machine (a script, not a timed test).

* graphs built per second and predictions per second for ``--n`` requests of mixed shapes;
* batch prediction (energy, latency, carbon) of the whole Azure conversation trace on one model
  and GPU, in requests per second.

    python experiments/bench_predict.py --n 10000 [--checkpoint PATH]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.carbon.footprint import predict_footprint
from llmco2.data.azure import load_trace
from llmco2.graph.features import build_graph_arrays
from llmco2.models.dataset import from_items
from llmco2.models.predict import load_predictor
from llmco2.specs import Request, get_gpu, get_model


def timed(fn, repeat: int = 3):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--model", default="llama3.1-8b")
    parser.add_argument("--gpu", default="a100-80gb")
    args = parser.parse_args()
    from experiments.bench_analyze import draw_requests

    items = draw_requests(args.n, seed=0)
    predictor = load_predictor(args.checkpoint)

    def graphs():
        analysis = analyze_layers(LayerBatch.from_items(items, validate=False))
        return build_graph_arrays(analysis, model_totals(analysis))

    t_graph, g = timed(graphs)
    t_pred, _ = timed(lambda: predictor.predict_phases(from_items(items)))
    print(f"{args.n:,} mixed requests: graphs {t_graph * 1e3:.0f} ms ({args.n / t_graph:,.0f} graphs/s, "
          f"{len(g.x) / args.n:.1f} nodes each); analysis + graphs + GNN {t_pred * 1e3:.0f} ms "
          f"({args.n / t_pred:,.0f} predictions/s)")
    trace = load_trace("conv")
    arch, gpu = get_model(args.model), get_gpu(args.gpu)
    conv = [(arch, Request(batch_size=1, prompt_tokens=int(p), generated_tokens=max(int(o), 1)), gpu)
            for p, o in zip(trace["prompt_tokens"], trace["generated_tokens"], strict=True)]
    t_fp, fp = timed(lambda: predict_footprint(conv, predictor, region_id="usa"), repeat=2)
    print(f"Azure conversation trace ({len(conv):,} requests, {arch.id} on {gpu.id}): footprint in {t_fp:.2f} s "
          f"({len(conv) / t_fp:,.0f} requests/s); total {fp.total_j.sum() / 3.6e6:.2f} kWh, {fp.total_g.sum() / 1000:.2f} kg CO2eq")


if __name__ == "__main__":
    main()
