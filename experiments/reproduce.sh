#!/usr/bin/env bash
# Regenerate every results table of the README on the real data in ../shared/data (CPU, ~30 min on
# 2 cores): paper Table 3/4 layout on CO2-Meter, Table 5 ablations, transfer to unseen devices and
# models. Then summarise the run folders into experiments/results.md and parity plots.
#   bash experiments/reproduce.sh [OUT_DIR]      (default outputs/experiments)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-outputs/experiments}
PY=${PYTHON:-.venv/bin/python}
for exp in table3_co2meter table5_ablations transfer_device transfer_model transfer_datacenter; do
  "$PY" -m llmco2.models.experiment +experiment=$exp hydra.sweep.dir="$OUT/$exp" hydra.sweep.subdir='${name}'
done
"$PY" experiments/summarize.py "$OUT" --markdown experiments/results.md --plots experiments/figures
