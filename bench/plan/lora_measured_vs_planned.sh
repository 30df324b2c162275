#!/usr/bin/env bash
# Full fine-tuning, LoRA and QLoRA side by side at 1, 2 and 4 ranks (zero3, fp32, CPU, one run
# each, in one invocation): the engine's measured peak per rank next to the planner's total for
# the same run spec, and tokens/s. Writes a Markdown table to stdout.
# Usage: bench/plan/lora_measured_vs_planned.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup loraplan 4 "$@"
shard=$build/app/shard
seq=128
global=8
bench_model_and_data 200
common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len $seq --lr 1e-3
        --seed 3 --no-shuffle --log-every 1 --threads 1 --strategy zero3 --precision fp32
        --lora-rank 8 --lora-targets q,k,v,o)
runs=()
for ranks in 1 2 4; do
    for method in full lora qlora; do
        name=$method-$ranks
        bench_train "$name" "$ranks" "${common[@]}" --micro-batch $(( global / ranks )) \
            --method "$method"
        "$shard" plan --spec "$out/$name/run.json" --gpu-memory cpu --json > "$out/$name.plan.json"
        runs+=("$name")
    done
done
python3 - "$out" "$preset" "$steps" "${runs[@]}" <<'PY'
import json, sys
out, preset, steps = sys.argv[1:4]
MiB = 1 << 20
print(f"Command: `bench/plan/lora_measured_vs_planned.sh build/release {preset} {steps}` — zero3, "
      f"fp32, seq 128, global batch 8 rows (micro-batch 8/N), LoRA rank 8 on q,k,v,o, 1 thread "
      f"per rank; measured = max over ranks and steps of the counting allocator's peak; "
      f"tokens/s = mean over the steps after the first.\n")
print("| method | ranks | measured peak / rank | planned | measured / planned | tokens/s |")
print("|---|---:|---:|---:|---:|---:|")
for name in sys.argv[4:]:
    method, ranks = name.rsplit("-", 1)
    recs = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    recs = [r for r in recs if r.get("type") == "metric"]
    peak = max(m["peak"] for r in recs for m in r["memory"])
    tps = [r["tokens_per_sec"] for r in recs[1:]] or [recs[0]["tokens_per_sec"]]
    plan = json.load(open(f"{out}/{name}.plan.json"))["per_device"]["total"]
    print(f"| {method} | {ranks} | {peak / MiB:.1f} MiB | {plan / MiB:.1f} MiB | "
          f"{peak / plan:.3f} | {sum(tps) / len(tps):.0f} |")
PY
