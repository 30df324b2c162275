#!/usr/bin/env bash
# Sharded engine on CPU (Gloo over loopback), one run side by side:
#   tokens/s of zero3 vs ddp at 2 ranks and vs 1 rank, and peak memory per rank for every
#   strategy next to the planner's prediction. Writes a Markdown section to stdout.
# Usage: bench/dist/run_bench.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup dist 12 "$@"
seq=128
global=8 # rows per optimizer step, whatever the rank count
cores=$(nproc)

bench_model_and_data 2000

common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len $seq --lr 1e-3
        --seed 3 --no-shuffle --log-every 1)
run() { # name ranks strategy
    local name=$1 ranks=$2 strategy=$3
    local threads=$(( cores / ranks )); (( threads < 1 )) && threads=1
    bench_train "$name" "$ranks" "${common[@]}" --micro-batch $(( global / ranks )) \
        --strategy "$strategy" --threads $threads
}
# Throughput: ddp at 1 rank, ddp and zero3 at 2 ranks, interleaved over two rounds (the machine
# is shared; the summary takes the median over both rounds). Then the other strategies once.
for round in a b; do
    run "ddp-1.$round" 1 ddp
    run "ddp-2.$round" 2 ddp
    run "zero3-2.$round" 2 zero3
done
for name in ddp-1 ddp-2 zero3-2; do mv "$out/$name.a" "$out/$name"; done
run zero3-1 1 zero3
for s in zero1 zero2; do run "$s-2" 2 "$s"; done

"$predict" "$out/model" 1 $global $seq fp32 none > "$out/plan-1.jsonl"
"$predict" "$out/model" 2 $(( global / 2 )) $seq fp32 none > "$out/plan-2.jsonl"
python3 "$here/summarize_bench.py" "$out" "$preset" "$steps" "$cores"
