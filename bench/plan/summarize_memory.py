#!/usr/bin/env python3
"""Measured vs predicted per-rank memory for the runs of measure_memory.sh (Markdown)."""
import json
import sys

out, preset, steps = sys.argv[1:4]
names = sys.argv[4:]
MiB = 1 << 20
print(f"Command: `bench/plan/measure_memory.sh build/release {preset} {steps}` — seq 128, "
      f"global batch 8 rows (micro-batch 8/N), 1 thread per rank; measured = max over ranks "
      f"and steps of the counting allocator's peak; model states = sharded params + optimizer "
      f"at the last step.\n")
print("| run | measured states | planned states | ratio | measured peak | planned total "
      "| ratio | planned phase |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
worst_states = worst_peak = 0.0
for name in names:
    strategy = name.split("-")[0]
    recs = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    recs = [r for r in recs if r.get("type") == "metric"]
    peak = max(m["peak"] for r in recs for m in r["memory"])
    states = max(m["sharded_params"] + m["optimizer"] for m in recs[-1]["memory"])
    plan = next(json.loads(l) for l in open(f"{out}/{name}.plan.jsonl")
                if json.loads(l)["strategy"] == strategy)
    pstates = plan["sharded_params"] + plan["optimizer"]
    rs, rp = states / pstates, peak / plan["total"]
    worst_states = max(worst_states, abs(rs - 1))
    worst_peak = max(worst_peak, abs(rp - 1))
    print(f"| {name} | {states / MiB:.1f} MiB | {pstates / MiB:.1f} MiB | {rs:.3f} | "
          f"{peak / MiB:.1f} MiB | {plan['total'] / MiB:.1f} MiB | {rp:.3f} | "
          f"{plan.get('peak_phase', '')} |")
print(f"\nWorst deviation: model states {worst_states * 100:.1f}%, peak {worst_peak * 100:.1f}%.")
