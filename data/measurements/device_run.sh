#!/bin/bash
# One call of the focused sweep on a lent GPU machine (H100 or H200), from the repository root:
# measures for MT seconds (default 480), resuming the committed table of that GPU, then copies the
# table, its run log and its failures to $OUT (the device tool brings $OUT back). Run it again to go on.
#   MT=480 bash data/measurements/device_run.sh
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/llmco2-measure}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,power.limit,memory.total --format=csv > "$OUT/env.txt" 2>&1
python3 -c "import torch, transformers, pynvml; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$OUT/env.txt" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) gpu=h200 ;;
  *H100*) gpu=h100 ;;
  *) echo "no focused plan for this GPU (data/measurements has configs_h100.csv and configs_h200.csv)"; exit 2 ;;
esac
table=data/measurements/$gpu.csv
timeout -s INT "${MT:-480}" python3 -m llmco2.cli measure --configs "data/measurements/configs_$gpu.csv" --out "$table" \
  --repeats 3 --warmup 1 --no-progress > "$OUT/measure.log" 2>&1
echo "measure exit status $? (124: stopped by the time limit, finished configurations kept)" >> "$OUT/measure.log"
for f in "$table" "${table%.csv}.runs.jsonl" "${table%.csv}.failed.csv"; do
  [ -f "$f" ] && cp "$f" "$OUT/"
done
python3 -m llmco2.cli data summary data/measurements > "$OUT/summary.txt" 2>&1
tail -3 "$OUT/measure.log"
