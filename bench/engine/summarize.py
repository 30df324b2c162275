#!/usr/bin/python3
"""Writes bench/engine/RESULTS.md from the JSON lines of run_bench.sh (engine and eager rows).

usage: summarize.py RESULTS_JSONL OUT_MD THREADS ROUNDS
"""
import json
import os
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
out, threads, rounds = sys.argv[2], sys.argv[3], sys.argv[4]
med = statistics.median
load = os.getloadavg()[0]
L = ["## Engine core: training throughput vs eager PyTorch (CPU)", "",
     "Command: `bench/engine/run_bench.sh build/release %s %s` — %s intra-op thread(s) for both, "
     "%s alternating engine / eager rounds in one run, medians; fp32, AdamW, no activation "
     "checkpointing, random tokens; the first step of each run is excluded. Eager PyTorch is "
     "Debian's python3-torch %s running a Hugging Face style `nn.Module` Llama "
     "(`bench/engine/bench_eager.py`) on the same preset config, batch and sequence length."
     % (threads, rounds, threads, rounds, "1.13"), "",
     "The machine is shared by several builds (load average %.1f on %d cores when this "
     "finished), so wall-clock throughput swings by 2-3x between rounds; tokens per second of "
     "process CPU time measure the work each implementation does and give the fair ratio."
     % (load, os.cpu_count()), "",
     "| preset | params | batch x seq | engine tok/s wall | eager tok/s wall | engine tok/CPU-s "
     "| eager tok/CPU-s | **engine / eager (CPU)** | engine FLOP/s | 2048² matmul FLOP/s "
     "| engine / matmul |",
     "|---|---|---|---|---|---|---|---|---|---|---|"]
presets = list(dict.fromkeys(r["preset"] for r in rows))
for preset in presets:
    e = [r for r in rows if r["preset"] == preset and r["impl"] == "engine"]
    p = [r for r in rows if r["preset"] == preset and r["impl"] == "eager"]
    if not e or not p:
        continue
    et, pt = med(r["tokens_per_sec"] for r in e), med(r["tokens_per_sec"] for r in p)
    ec, pc = med(r["cpu_tokens_per_sec"] for r in e), med(r["cpu_tokens_per_sec"] for r in p)
    # Like for like: per CPU-second when the run recorded the matmul's CPU time, else both
    # per wall-clock second of the same process.
    if all("matmul_cpu_flops" in r for r in e):
        ef = ec * e[0]["flops_per_token"]
        mf = med(r["matmul_cpu_flops"] for r in e)
        basis = "per CPU-second"
    else:
        ef = et * e[0]["flops_per_token"]
        mf = med(r["matmul_flops"] for r in e)
        basis = "per wall-clock second"
    L.append("| %s | %.1fM | %d x %d | %.0f | %.0f | %.0f | %.0f | **%.2f** | %.1f G | %.1f G "
             "| %.0f%% |" % (preset, e[0]["params"] / 1e6, e[0]["batch"], e[0]["seq"], et, pt, ec,
                             pc, ec / pc, ef / 1e9, mf / 1e9, 100 * ef / mf))
L += ["", "FLOPs per token: 6·P + 12·L·h·s (torchtitan's MFU formula). The matmul figure is a "
      "2048×2048 fp32 `at::mm` with the same thread count, measured in the same process right "
      "after training (median of the rounds, %s like the engine figure next to it): this "
      "machine's practical peak." % basis, "", "### Where the time goes (CPU seconds per step, median)", "",
      "| preset | impl | forward | backward | optimizer |", "|---|---|---|---|---|"]
for preset in presets:
    for impl in ("engine", "eager"):
        ph = [r["phase_cpu_sec"] for r in rows
              if r["preset"] == preset and r["impl"] == impl and "phase_cpu_sec" in r]
        if ph:
            L.append("| %s | %s | %.2f | %.2f | %.2f |" % (
                preset, impl, med(x["forward"] for x in ph), med(x["backward"] for x in ph),
                med(x["optimizer"] for x in ph)))
L += ["", "Per round (tokens/s wall, tokens per CPU-second):", ""]
for r in rows:
    L.append("- %s %s round %d: %.0f, %.0f" % (r["preset"], r["impl"], r["round"],
                                                r["tokens_per_sec"], r["cpu_tokens_per_sec"]))
L.append("")
open(out, "w").write("\n".join(L))
print("\n".join(L))
