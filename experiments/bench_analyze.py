"""Benchmark: vectorised analysis of many requests of different shapes.

Draws ``--n`` valid (model, GPU, request) triples from the catalogs (seeded), then times building
the batch, the per-kernel costs and rooflines of both phases, and the whole-model totals.

    python experiments/bench_analyze.py --n 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmco2.analytic.layer import LayerBatch, analyze_layers
from llmco2.analytic.model import model_totals
from llmco2.errors import InvalidInputError
from llmco2.specs import Request, gpu_catalog, model_catalog, validate_request


def draw_requests(n: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    models = list(model_catalog())
    gpus = [g for g in gpu_catalog() if g.supports("fp16")]
    items: list[tuple] = []
    while len(items) < n:
        arch = models[rng.integers(len(models))]
        gpu = gpus[rng.integers(len(gpus))]
        req = Request(batch_size=int(rng.integers(1, 9)), prompt_tokens=int(rng.integers(1, 4097)),
                      generated_tokens=int(rng.integers(1, 1025)), num_gpus=int(rng.choice([1, 2, 4])),
                      flash_attention=bool(rng.integers(2)))
        try:
            validate_request(req, arch, gpu)
        except InvalidInputError:
            continue
        items.append((arch, req, gpu))
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    items = draw_requests(args.n, args.seed)
    best = {"stack": np.inf, "analyze": np.inf, "totals": np.inf}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        batch = LayerBatch.from_items(items, validate=False)
        t1 = time.perf_counter()
        analysis = analyze_layers(batch)
        t2 = time.perf_counter()
        model_totals(analysis)
        t3 = time.perf_counter()
        best = {"stack": min(best["stack"], t1 - t0), "analyze": min(best["analyze"], t2 - t1),
                "totals": min(best["totals"], t3 - t2)}
    total = sum(best.values())
    print(f"{args.n} requests ({len({a.id for a, _, _ in items})} models, {len({g.id for _, _, g in items})} GPUs), "
          f"best of {args.repeat}:")
    for key, value in best.items():
        print(f"  {key:8s} {value * 1e3:8.2f} ms")
    print(f"  total    {total * 1e3:8.2f} ms  ->  {args.n / total:,.0f} requests/s")


if __name__ == "__main__":
    main()
