#!/usr/bin/env bash
# Do two revisions print the same numbers? Runs one set of commands (single predictions as JSON and
# tables, a sampled request file to CSV and Parquet with totals, a served request, report compare,
# the Python API on a frame) with the code of REV (a git worktree) and of this working tree, and
# lists the outputs that differ (timings are masked).
#   experiments/outputs_unchanged.sh REV            e.g. experiments/outputs_unchanged.sh 7f8e62e
set -u
REV=${1:?usage: experiments/outputs_unchanged.sh REV}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
export LLMCO2_SHARED_DATA=${LLMCO2_SHARED_DATA:-$(cd "$ROOT/.." && pwd)/shared/data}
git -C "$ROOT" worktree add -q "$WORK/base" "$REV" || exit 2
trap 'git -C "$ROOT" worktree remove --force "$WORK/base"; rm -rf "$WORK"' EXIT

run() {  # run SRC OUT
  local SRC=$1 OUT=$2; mkdir -p "$OUT"; cd "$OUT" || exit 2
  local PY="env PYTHONPATH=$SRC $ROOT/.venv/bin/python" L="env PYTHONPATH=$SRC $ROOT/.venv/bin/python -m llmco2.cli"
  $L predict --model llama3.1-8b --gpu h100 --batch-size 1 --prompt-tokens 1000 --gen-tokens 200 --json > p1.json 2> p1.err
  $L predict --model llama3.1-70b --gpu a100-80gb --gpus 4 --prompt-tokens 500 --gen-tokens 300 --batch-size 4 --region FR \
     --pue 1.2 --engine hf --json > p2.json 2> p2.err
  $L predict --model llama3.1-8b --gpu h100 --batch-size 1 --prompt-tokens 1000 --gen-tokens 200 > p3.txt 2> p3.err
  $L sample --strategy focused --trace conv --n 3000 --seed 0 --out req.csv > s.txt 2> s.err
  $L predict --requests req.csv --out pred.csv --region fra > r1.txt 2> r1.err
  $L predict --requests req.csv --out pred.parquet > r2.txt 2> r2.err
  $L predict --model llama3.1-8b --gpu h100 --batch-size 1 --prompt-tokens 1000 --gen-tokens 200 --serving --concurrency 16 \
     --serving-requests 300 --json > sv.json 2> sv.err
  $L report compare --model llama3.1-70b --batch-size 1 --prompt-tokens 500 --gen-tokens 200 -o cmp.png --json > cmp.json 2> cmp.err
  $PY -W ignore - > frame.txt 2> frame.err <<'PY'
import pandas as pd, llmco2
print(llmco2.predict_frame(pd.read_csv("req.csv").head(200), region="DE").to_csv(index=False))
PY
  sed -i 's/in [0-9.]* s\b/in T s/; s/seconds=[0-9.e-]*/seconds=T/; s/([0-9,]*\/s)/(R\/s)/' ./*.err
}
(run "$WORK/base" "$WORK/before")
(run "$ROOT" "$WORK/after")
same=0; differ=0
for f in "$WORK"/before/*; do
  b=$(basename "$f")
  if cmp -s "$f" "$WORK/after/$b"; then same=$((same + 1)); else differ=$((differ + 1)); echo "differs: $b"; fi
done
echo "$same outputs identical, $differ differ ($REV vs the working tree)"
