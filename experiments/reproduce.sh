#!/usr/bin/env bash
# Regenerate every results table of the README on the real data in ../shared/data (CPU, ~1 h on
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
# Data-centre accuracy: leave one device out (before/after/baselines), leave one engine out, interval
# coverage on a random split; then the shipped checkpoint with out-of-domain intervals calibrated
# on the held-out devices' residuals.
# llmco2 over three seeds (mean and range in the tables), the other predictors once
"$PY" -m llmco2.models.experiment +experiment=lodo_datacenter model=llmco2 seed=0,1,2 \
  hydra.sweep.dir="${OUT}_datacentre/lodo_datacenter" hydra.sweep.subdir='${name}-seed${seed}'
"$PY" -m llmco2.models.experiment +experiment=lodo_datacenter model=llmco2_physical_prior,llmco2_tdp_prior,gbt,llmcarbon,roofline_tdp \
  hydra.sweep.dir="${OUT}_datacentre/lodo_datacenter" hydra.sweep.subdir='${name}-seed${seed}'
"$PY" -m llmco2.models.experiment +experiment=leave_engine_out \
  hydra.sweep.dir="${OUT}_datacentre/leave_engine_out" hydra.sweep.subdir='${name}-seed${seed}'
"$PY" -m llmco2.models.experiment +experiment=random_coverage hydra.run.dir="${OUT}_datacentre/random_coverage"
"$PY" -m llmco2.models.experiment model=llmco2 trainer.max_epochs=80 trainer.patience=10 trainer.threads=1 \
  hydra.run.dir="${OUT}_datacentre/edge_table3_llmco2"
"$PY" experiments/summarize_datacentre.py "${OUT}_datacentre" --markdown experiments/results_datacentre.md \
  --figure docs/figures/lodo_datacentre.png
"$PY" experiments/prior_alone.py --markdown experiments/results/prior_alone.md
"$PY" experiments/summarize.py "$OUT" --markdown experiments/results.md --plots experiments/figures
