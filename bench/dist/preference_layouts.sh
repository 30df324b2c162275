#!/usr/bin/env bash
# DPO through pipeline stages on CPU ranks (Gloo over loopback), one run side by side, through the
# product path (`shard-worker launch -- train --objective dpo --pipeline-parallel 2`): tokens/s,
# peak memory per rank and the first stage's idle share of a step of PP2 (1F1B over 4
# micro-batches, the pair loss on the last stage) against zero3 at 2 ranks, for full DPO (the
# reference precomputed once, through the stages under PP) and LoRA DPO (the live reference: a
# pass without gradients through the stages every step). Writes a Markdown section to stdout.
# Usage: bench/dist/preference_layouts.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup preference-layouts 8 "$@"
seq=64
pairs=8 # pairs per optimizer step, whatever the layout
cores=$(nproc)

"$worker" init-model --preset "$preset" --out "$out/model" --seed 1 >/dev/null 2>&1
"$worker" make-data --task arithmetic --format preference --count 400 --seed 4 \
    --out "$out/pairs.jsonl" >/dev/null 2>&1
common=(--model "$out/model" --data "$out/pairs.jsonl" --objective dpo --steps "$steps"
        --seq-len $seq --lr 1e-4 --seed 3 --log-every 1 --threads $(( cores / 2 > 0 ? cores / 2 : 1 )))
run() { # name pp micro-batches [method args...]
    local name=$1 pp=$2 micro=$3
    shift 3
    local copies=$(( 2 / pp ))
    bench_train "$name" 2 "${common[@]}" --micro-batch $(( pairs / copies / micro )) \
        --grad-accum "$micro" --strategy zero3 --pipeline-parallel "$pp" "$@"
}
# Interleaved over two rounds (the machine is shared; the summary pools both).
for round in a b; do
    run "full-zero3.$round" 1 1
    run "full-pp2-k4.$round" 2 4
    run "lora-zero3.$round" 1 1 --method lora
    run "lora-pp2-k4.$round" 2 4 --method lora
done
python3 - "$out" "$preset" "$steps" "$cores" "$seq" "$pairs" <<'PY'
import json, statistics, sys
out, preset, steps, cores, seq, pairs = sys.argv[1:7]
MiB = 1 << 20

def metrics(name):
    with open(f"{out}/{name}/metrics.jsonl") as f:
        return [r for r in map(json.loads, f) if r.get("type") == "metric"]

def start(name):
    with open(f"{out}/{name}/events.jsonl") as f:
        return next((e for e in map(json.loads, f) if e.get("kind") == "start"), {})

def pooled(name, f):  # step 1 warms up; both rounds pooled
    return statistics.median(f(r) for rnd in "ab" for r in metrics(f"{name}.{rnd}")[1:])

def peak(name):
    return max((m.get("peak", 0) for m in metrics(f"{name}.a")[-1].get("memory", [])), default=0)

def reference_sec(name):
    return start(f"{name}.a").get("data", {}).get("reference_sec")

print(f"### DPO through pipeline stages on CPU ranks ({preset}, Gloo over loopback, {cores} cores)\n")
print(f"Command: `bench/dist/preference_layouts.sh build/release {preset} {steps}` — fp32, seq "
      f"{seq}, {pairs} pairs ({2 * int(pairs)} sequences) per step at 2 ranks: zero3 takes "
      f"{int(pairs) // 2} pairs a rank in one micro-batch, PP2 the {pairs} in 4 micro-batches of "
      f"2 through both stages; cores / 2 threads per rank, median of steps 2..{steps} over two "
      f"interleaved rounds.\n")
print("| run | reference | tokens/s | vs zero3 | peak/rank | rank 0 idle | reference pass |")
print("|---|---|---:|---:|---:|---:|---:|")
for method, ref in [("full", "precomputed"), ("lora", "live (adapters off)")]:
    base = pooled(f"{method}-zero3", lambda r: r["tokens_per_sec"])
    for layout in ["zero3", "pp2-k4"]:
        name = f"{method}-{layout}"
        t = pooled(name, lambda r: r["tokens_per_sec"])
        idle = pooled(name, lambda r: r.get("scalars", {}).get("pipeline/idle_fraction", 0.0))
        rs = reference_sec(name)
        print(f"| {name} | {ref} | {t:.0f} | {t / base:.2f} | {peak(name) / MiB:.0f} MiB | "
              f"{idle:.2f} | {'%.2f s' % rs if rs is not None else 'every step'} |")
PY
