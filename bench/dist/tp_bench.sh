#!/usr/bin/env bash
# Tensor parallel on CPU ranks (Gloo over loopback), one run side by side, through the product
# path (`shard-worker launch -- train --tensor-parallel N`): tokens/s, bytes sent per step per rank
# and peak memory per rank of TP2 against zero3 and ddp at 2 ranks, and of TP2 x zero3 DP2
# against zero3 at 4 ranks, with the planner's tensor-parallel bytes beside the measured ones.
# Writes a Markdown section to stdout.
# Usage: bench/dist/tp_bench.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup tp 8 "$@"
seq=128
global=8 # rows per optimizer step, whatever the layout
cores=$(nproc)

bench_model_and_data 2000

common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len $seq --lr 1e-3
        --seed 3 --no-shuffle --log-every 1)
run() { # name ranks tp strategy
    local name=$1 ranks=$2 tp=$3 strategy=$4
    local threads=$(( cores / ranks )); (( threads < 1 )) && threads=1
    local copies=$(( ranks / tp ))
    bench_train "$name" "$ranks" "${common[@]}" --micro-batch $(( global / copies )) \
        --strategy "$strategy" --tensor-parallel "$tp" --threads $threads
}
# Interleaved over two rounds (the machine is shared; the summary pools both).
for round in a b; do
    run "zero3-2.$round" 2 1 zero3
    run "ddp-2.$round" 2 1 ddp
    run "tp2-2.$round" 2 2 zero3
    run "zero3-4.$round" 4 1 zero3
    run "tp2-dp2-4.$round" 4 2 zero3
done
python3 - "$out" "$preset" "$steps" "$cores" "$seq" "$global" "$build" <<'PY'
import json, statistics, subprocess, sys
out, preset, steps, cores, seq, glob, build = sys.argv[1:8]
MiB = 1 << 20

def metrics(name):
    with open(f"{out}/{name}/metrics.jsonl") as f:
        return [r for r in map(json.loads, f) if r.get("type") == "metric"]

def tps(name):  # step 1 warms up; both rounds pooled
    return statistics.median(r["tokens_per_sec"] for rnd in "ab" for r in metrics(f"{name}.{rnd}")[1:])

def peak(name):
    mem = metrics(f"{name}.a")[-1].get("memory", [])
    return max((m.get("peak", 0) for m in mem), default=0)

runs = [("zero3-2", 2, 1), ("ddp-2", 2, 1), ("tp2-2", 2, 2), ("zero3-4", 4, 1), ("tp2-dp2-4", 4, 2)]
print(f"### Tensor parallel on CPU ranks ({preset}, Gloo over loopback, {cores} cores)\n")
print(f"Command: `bench/dist/tp_bench.sh build/release {preset} {steps}` — fp32, seq {seq}, "
      f"global batch {glob} rows per step (each data-parallel copy a micro-batch of {glob} / "
      f"copies), cores / ranks threads per rank, median of steps 2..{steps} over two interleaved "
      f"rounds.\n")
print("| run | ranks | tp | tokens/s | vs zero3 at the same ranks | bytes sent/step/rank | peak/rank |")
print("|---|---:|---:|---:|---:|---:|---:|")
base = {2: tps("zero3-2"), 4: tps("zero3-4")}
for name, ranks, tp in runs:
    t = tps(name)
    comm = metrics(f"{name}.a")[-1].get("comm_bytes", 0)
    print(f"| {name} | {ranks} | {tp} | {t:.0f} | {t / base[ranks]:.2f} | {comm / MiB:.1f} MiB | "
          f"{peak(name) / MiB:.0f} MiB |")
PY
