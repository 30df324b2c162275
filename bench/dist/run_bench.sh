#!/usr/bin/env bash
# Sharded engine on CPU (Gloo over loopback), one run side by side:
#   tokens/s of zero3 vs ddp at 2 ranks and vs 1 rank, and peak memory per rank for every
#   strategy next to the planner's prediction. Writes a Markdown section to stdout.
# Usage: bench/dist/run_bench.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/release}
preset=${2:-tiny-15m}
steps=${3:-12}
worker=$build/engine/worker/shard-worker
predict=$build/bench/dist/plan_predict
out=$(mktemp -d /tmp/shard-bench-dist-XXXXXX)
seq=128
global=8 # rows per optimizer step, whatever the rank count
cores=$(nproc)

"$worker" init-model --preset "$preset" --out "$out/model" --seed 1 >/dev/null 2>&1
python3 - "$out" <<'PY'
import json, random, sys
out = sys.argv[1]
vocab = json.load(open(f"{out}/model/config.json"))["vocab_size"]
r = random.Random(0)
with open(f"{out}/data.jsonl", "w") as f:
    for _ in range(2000):
        f.write(json.dumps({"input_ids": [r.randrange(vocab) for _ in range(128)]}) + "\n")
PY

common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len $seq --lr 1e-3
        --seed 3 --no-shuffle --log-every 1)
run() { # name ranks strategy
    local name=$1 ranks=$2 strategy=$3
    local threads=$(( cores / ranks )); (( threads < 1 )) && threads=1
    if (( ranks == 1 )); then
        "$worker" train "${common[@]}" --micro-batch $global --strategy "$strategy" \
            --threads $threads --out "$out/$name" >/dev/null 2>"$out/$name.err"
    else
        "$worker" launch --nproc-per-node "$ranks" -- train "${common[@]}" \
            --micro-batch $(( global / ranks )) --strategy "$strategy" --threads $threads \
            --nproc-per-node "$ranks" --out "$out/$name" >/dev/null 2>"$out/$name.err"
    fi
}
run ddp-1 1 ddp
run zero3-1 1 zero3
for s in ddp zero1 zero2 zero3; do run "$s-2" 2 "$s"; done

"$predict" "$out/model" 1 $global $seq fp32 none > "$out/plan-1.jsonl"
"$predict" "$out/model" 2 $(( global / 2 )) $seq fp32 none > "$out/plan-2.jsonl"
python3 "$here/summarize_bench.py" "$out" "$preset" "$steps" "$cores"
