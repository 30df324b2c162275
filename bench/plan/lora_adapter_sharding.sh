#!/usr/bin/env bash
# Does sharding LoRA's adapters pay? The same LoRA run (rank 64 on every projection, so the
# adapters are 8 % of tiny-15m's parameters) under ddp (adapters replicated, gradients
# all-reduced), zero1 / zero2 (adapter optimizer state, and gradients, sharded) and zero3 (the
# frozen base and the adapters sharded) at 2 ranks, side by side in one invocation: peak per rank,
# its adapter part (masters + AdamW + gradients), bytes sent per step and tokens/s.
# Usage: bench/plan/lora_adapter_sharding.sh [BUILD_DIR] [PRESET] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup lorashard 6 "$@"
bench_model_and_data 200
common=(--model "$out/model" --data "$out/data.jsonl" --steps "$steps" --seq-len 128 --lr 1e-3
        --seed 3 --no-shuffle --log-every 1 --threads 1 --precision fp32 --micro-batch 4
        --method lora --lora-rank 64 --lora-targets q,k,v,o,gate,up,down)
for s in ddp zero1 zero2 zero3; do
    bench_train "$s" 2 "${common[@]}" --strategy "$s"
done
python3 - "$out" "$preset" "$steps" <<'PY'
import json, sys
out, preset, steps = sys.argv[1:4]
MiB = 1 << 20
print(f"Command: `bench/plan/lora_adapter_sharding.sh build/release {preset} {steps}` — 2 ranks "
      f"(Gloo over loopback), fp32, seq 128, micro-batch 4 per rank, LoRA rank 64 on "
      f"q,k,v,o,gate,up,down, 1 thread per rank; values at the last step, max over ranks; "
      f"tokens/s = mean over the steps after the first.\n")
print("| strategy | peak / rank | frozen base / rank | adapter masters + AdamW + grads / rank "
      "| sent / rank / step | tokens/s |")
print("|---|---:|---:|---:|---:|---:|")
for s in ["ddp", "zero1", "zero2", "zero3"]:
    recs = [json.loads(l) for l in open(f"{out}/{s}/metrics.jsonl")]
    recs = [r for r in recs if r.get("type") == "metric"]
    last = recs[-1]["memory"]
    peak = max(m["peak"] for r in recs for m in r["memory"])
    frozen = max(m["frozen_params"] for m in last)
    adapter = max(m["sharded_params"] + m["optimizer"] + m["grads"] for m in last)
    sent = sum(r.get("comm_bytes", 0) for r in recs[1:]) / max(1, len(recs) - 1)
    tps = [r["tokens_per_sec"] for r in recs[1:]]
    print(f"| {s} | {peak / MiB:.1f} MiB | {frozen / MiB:.1f} MiB | {adapter / MiB:.2f} MiB | "
          f"{sent / MiB:.2f} MiB | {sum(tps) / len(tps):.0f} |")
PY
