#!/usr/bin/env python3
"""Turns the runs of run_bench.sh into the RESULTS.md section (tokens/s, memory vs planner)."""
import json
import statistics
import sys

out, preset, steps, cores = sys.argv[1:5]
MiB = 1 << 20


def metrics(name):
    recs = []
    with open(f"{out}/{name}/metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "metric":
                recs.append(r)
    return recs


def plan(ranks):
    rows = {}
    with open(f"{out}/plan-{ranks}.jsonl") as f:
        for line in f:
            r = json.loads(line)
            rows[r["strategy"]] = r
    return rows


runs = ["ddp-1", "zero3-1", "ddp-2", "zero1-2", "zero2-2", "zero3-2"]
data = {name: metrics(name) for name in runs}
plans = {1: plan(1), 2: plan(2)}


def tokens_per_sec(recs):
    # Step 1 includes warm-up (allocations, first gathers): leave it out.
    return statistics.median(r["tokens_per_sec"] for r in recs[1:])


tps = {name: tokens_per_sec(recs) for name, recs in data.items()}
print(f"### Sharded engine on CPU ({preset}, Gloo over loopback, {cores} cores)\n")
print(f"Command: `bench/dist/run_bench.sh build/release {preset} {steps}` — fp32, seq 128, "
      f"global batch 8 rows per step (1 rank: micro-batch 8 with {cores} threads; 2 ranks: "
      f"micro-batch 4 with {max(1, int(cores) // 2)} thread(s) each), median of steps 2..{steps}.\n")
print("| run | tokens/s | vs 1 rank | vs ddp at 2 ranks | bytes sent/step/rank |")
print("|---|---:|---:|---:|---:|")
for name in runs:
    comm = data[name][-1].get("comm_bytes", 0)
    print(f"| {name} | {tps[name]:.0f} | {tps[name] / tps['ddp-1']:.2f} | "
          f"{tps[name] / tps['ddp-2']:.2f} | {comm / MiB:.1f} MiB |")

print("\nPeak memory per rank (counting allocator, max over steps) and the engine's categories "
      "at the last logged step, next to `shard plan`'s prediction for the same settings:\n")
print("| run | rank | measured peak | planner total | planner total − overhead | "
      "measured params+optimizer | planner sharded+optimizer |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in runs:
    strategy = name.split("-")[0]
    ranks = int(name.split("-")[1])
    p = plans[ranks].get(strategy)
    last = data[name][-1]
    for m in sorted(last["memory"], key=lambda m: m["rank"]):
        peak = max(next(x for x in r["memory"] if x["rank"] == m["rank"])["peak"]
                   for r in data[name])
        states = m["sharded_params"] + m["optimizer"]
        print(f"| {name} | {m['rank']} | {peak / MiB:.1f} MiB | {p['total'] / MiB:.1f} MiB | "
              f"{(p['total'] - p['overhead']) / MiB:.1f} MiB | {states / MiB:.1f} MiB | "
              f"{(p['sharded_params'] + p['optimizer']) / MiB:.1f} MiB |")
