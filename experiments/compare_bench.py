"""How long ``llmco2 compare`` takes: configurations simulated per second at one load.

    python experiments/compare_bench.py [--model llama3.1-70b] [--rate 2] [--gpus h100,a100-80gb,h200,b200,l40s]

Prints the configurations, the wall time and the time per configuration (the target is 20
configurations at one load in under 10 s on 2 cores).
"""

from __future__ import annotations

import argparse
import time

from llmco2.api.compare import compare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3.1-70b")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--gpus", default="h100,a100-80gb,h200,b200,l40s")
    ap.add_argument("--serving-requests", type=int, default=600)
    args = ap.parse_args()
    start = time.perf_counter()
    table = compare(args.model, args.gpus, rate=args.rate, serving_requests=args.serving_requests)
    seconds = time.perf_counter() - start
    print(f"{len(table)} configurations of {args.model} at {args.rate:g} req/s ({args.serving_requests} requests each) "
          f"in {seconds:.2f} s: {seconds / len(table):.3f} s per configuration")
    print(table.attrs["verdict"])


if __name__ == "__main__":
    main()
