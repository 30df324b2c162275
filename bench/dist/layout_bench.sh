#!/usr/bin/env bash
# Tensor and pipeline parallel on CPU ranks (Gloo over loopback), one run side by side, through
# the product path (`shard-worker launch -- train --tensor-parallel T --pipeline-parallel P`):
# tokens/s, bytes sent per step per rank and peak memory per rank of TP2 (with and without
# sequence parallel), PP2 (1F1B over 4 and 8 micro-batches) against zero3 and ddp at 2 ranks, and
# of TP2 x zero3 DP2, PP2 x zero3 DP2 and TP2 x PP2 (with and without sequence parallel)
# against zero3 at 4 ranks; the pipeline bubble measured against the 1F1B theory
# (P - 1) / (vK + P - 1) (the engine's record of the time rank 0 waits for its neighbour).
# Writes a Markdown section to stdout.
# Usage: bench/dist/layout_bench.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup layout 8 "$@"
seq=128
global=8 # rows per optimizer step, whatever the layout
cores=$(nproc)

bench_model_and_data 2000

common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len $seq --lr 1e-3
        --seed 3 --no-shuffle --log-every 1)
run() { # name ranks tp pp strategy micro-batches [threads] [virtual stages] [sp]
    local name=$1 ranks=$2 tp=$3 pp=$4 strategy=$5 micro=$6
    local threads=${7:-$(( cores / ranks ))}; (( threads < 1 )) && threads=1
    local copies=$(( ranks / (tp * pp) ))
    bench_train "$name" "$ranks" "${common[@]}" --micro-batch $(( global / copies / micro )) \
        --grad-accum "$micro" --strategy "$strategy" --tensor-parallel "$tp" \
        --pipeline-parallel "$pp" --virtual-stages "${8:-1}" --threads "$threads" \
        ${9:+--sequence-parallel}
}
# Interleaved over two rounds (the machine is shared; the summary pools both).
for round in a b; do
    run "zero3-2.$round" 2 1 1 zero3 1
    run "ddp-2.$round" 2 1 1 ddp 1
    run "tp2-2.$round" 2 2 1 zero3 1
    run "tp2-sp-2.$round" 2 2 1 zero3 1 "" "" sp
    run "pp2-k4-2.$round" 2 1 2 zero3 4
    run "pp2-k8-2.$round" 2 1 2 zero3 8
    run "pp2-v2-k4-2.$round" 2 1 2 zero3 4 "" 2
    run "zero3-4.$round" 4 1 1 zero3 1
    run "tp2-dp2-4.$round" 4 2 1 zero3 1
    run "pp2-dp2-4.$round" 4 1 2 zero3 4
    run "tp2-pp2-4.$round" 4 2 2 zero3 4
    run "tp2-sp-pp2-4.$round" 4 2 2 zero3 4 "" "" sp
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

runs = [("zero3-2", 2, 1, 1, 1), ("ddp-2", 2, 1, 1, 1), ("tp2-2", 2, 2, 1, 1),
        ("tp2-sp-2", 2, 2, 1, 1),
        ("pp2-k4-2", 2, 1, 2, 4), ("pp2-k8-2", 2, 1, 2, 8), ("pp2-v2-k4-2", 2, 1, 2, 4),
        ("zero3-4", 4, 1, 1, 1),
        ("tp2-dp2-4", 4, 2, 1, 1), ("pp2-dp2-4", 4, 1, 2, 4), ("tp2-pp2-4", 4, 2, 2, 4),
        ("tp2-sp-pp2-4", 4, 2, 2, 4)]
print(f"### Tensor and pipeline parallel on CPU ranks ({preset}, Gloo over loopback, {cores} cores)\n")
print(f"Command: `bench/dist/layout_bench.sh build/release {preset} {steps}` — fp32, seq {seq}, "
      f"global batch {glob} rows per step (each data-parallel copy {glob} / copies rows, in K "
      f"micro-batches under pipeline parallel), cores / ranks threads per rank, median of steps "
      f"2..{steps} over two interleaved rounds.\n")
print("| run | ranks | tp | pp | K | tokens/s | vs zero3 at the same ranks | bytes sent/step/rank 0 "
      "| peak/rank |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
base = {2: tps("zero3-2"), 4: tps("zero3-4")}
for name, ranks, tp, pp, k in runs:
    t = tps(name)
    comm = metrics(f"{name}.a")[-1].get("comm_bytes", 0)
    print(f"| {name} | {ranks} | {tp} | {pp} | {k} | {t:.0f} | {t / base[ranks]:.2f} | "
          f"{comm / MiB:.1f} MiB | {peak(name) / MiB:.0f} MiB |")
# The bubble: the share of each step the first stage waited for its neighbour (the engine's
# "pipeline/idle_fraction", which includes the transfers), against the schedule's theory.
def idle(name):
    return statistics.median(r.get("scalars", {}).get("pipeline/idle_fraction", float("nan"))
                             for rnd in "ab" for r in metrics(f"{name}.{rnd}")[1:])

print("\nPipeline bubble at 2 stages (rank 0's share of a step spent waiting for stage 1):\n")
print("| run | K | chunks | tokens/s | measured idle | theory (P-1)/(vK+P-1) |")
print("|---|---:|---:|---:|---:|---:|")
for name, k, v in [("pp2-k4-2", 4, 1), ("pp2-k8-2", 8, 1), ("pp2-v2-k4-2", 4, 2)]:
    print(f"| {name} | {k} | {v} | {tps(name):.0f} | {idle(name):.2f} | {1 / (v * k + 1):.2f} |")
PY
