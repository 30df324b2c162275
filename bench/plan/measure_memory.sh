#!/usr/bin/env bash
# Measured per-rank memory of the engine (counting allocator and its categories) next to the
# planner's prediction, for every strategy at 1, 2 and 4 ranks on CPU, plus one run with full
# checkpointing and one bf16-mixed. Writes a Markdown table to stdout.
# Usage: bench/plan/measure_memory.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup planmem 3 "$@"
seq=128
global=8

bench_model_and_data 200
common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len $seq --lr 1e-3
        --seed 3 --no-shuffle --log-every 1 --threads 1)
run() { # name ranks strategy precision checkpointing [grad-accum [shard-group]]
    local name=$1 ranks=$2 strategy=$3 prec=$4 ckpt=$5 ga=${6:-1} group=${7:-0}
    local mb=$(( global / ranks / ga ))
    local extra=(--grad-accum "$ga")
    (( group > 0 )) && extra+=(--shard-group "$group")
    bench_train "$name" "$ranks" "${common[@]}" --micro-batch $mb --strategy "$strategy" \
        --precision "$prec" --checkpointing "$ckpt" "${extra[@]}"
    "$predict" "$out/model" "$ranks" $mb $seq "$prec" "$ckpt" "$ga" "$group" \
        > "$out/$name.plan.jsonl"
}
runs=()
for ranks in 1 2 4; do
    for s in ddp zero1 zero2 zero3; do
        run "$s-$ranks-fp32-none" "$ranks" "$s" fp32 none; runs+=("$s-$ranks-fp32-none")
    done
done
run zero3-2-fp32-full 2 zero3 fp32 full; runs+=(zero3-2-fp32-full)
run zero3-2-bf16-mixed-none 2 zero3 bf16-mixed none; runs+=(zero3-2-bf16-mixed-none)
run zero3-2-fp32-none-ga2 2 zero3 fp32 none 2; runs+=(zero3-2-fp32-none-ga2)
run hybrid-4-fp32-none-g2 4 hybrid fp32 none 1 2; runs+=(hybrid-4-fp32-none-g2)
python3 "$here/summarize_memory.py" "$out" "$preset" "$steps" "${runs[@]}"
