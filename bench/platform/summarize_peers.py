#!/usr/bin/env python3
"""Turns the runs of run_peers.sh into its Markdown section (stdout).

usage: summarize_peers.py OUT_DIR RESULTS_JSONL THREADS ROUNDS DIST_STEPS
"""
import glob
import json
import os
import statistics
import sys

out, results, threads, rounds, steps = sys.argv[1:6]
rows = [json.loads(line) for line in open(results) if line.strip()]
med = statistics.median
MiB = 1 << 20

torch_version = next((r["torch"] for r in rows if "torch" in r), "?")
print("### Debian 13: the engine on LibTorch 2.6 vs PyTorch %s (CPU)\n" % torch_version)
print("Command (on the host, as root): `bash scripts/ci-roots.sh run trixie-cpu 'cmake --preset "
      "release -B /build >/dev/null && cmake --build /build -j2 --target shard-worker "
      "bench_engine_train && bash bench/platform/run_peers.sh /build %s %s %s'` — in the Debian 13 "
      "root (python3-torch with libopenblas0-pthread), %s alternating engine / eager rounds, "
      "medians; load average %.1f on %d cores at the end.\n"
      % (threads, rounds, steps, rounds, os.getloadavg()[0], os.cpu_count()))
print("Single process, tiny-15m, batch 4 x 256, %s thread(s), AdamW, first step excluded "
      "(`bench_engine_train` vs `bench/engine/bench_eager.py --precision P`; bf16-mixed is "
      "`torch.autocast(\"cpu\", torch.bfloat16)` with fp32 master weights in eager):\n" % threads)
print("| precision | engine tok/s wall | eager tok/s wall | engine tok/CPU-s | eager tok/CPU-s "
      "| **engine / eager (CPU)** | engine fwd / bwd / opt CPU-s | eager fwd / bwd / opt CPU-s |")
print("|---|---:|---:|---:|---:|---:|---|---|")
for precision in ("fp32", "bf16-mixed"):
    by = {impl: [r for r in rows if r.get("impl") == impl and r.get("precision") == precision]
          for impl in ("engine", "eager")}
    if not by["engine"] or not by["eager"]:
        continue
    wall = {k: med(r["tokens_per_sec"] for r in v) for k, v in by.items()}
    cpu = {k: med(r["cpu_tokens_per_sec"] for r in v) for k, v in by.items()}
    ph = {k: "/".join("%.2f" % med(r["phase_cpu_sec"][p] for r in v)
                      for p in ("forward", "backward", "optimizer")) for k, v in by.items()}
    print("| %s | %.0f | %.0f | %.0f | %.0f | **%.2f** | %s | %s |"
          % (precision, wall["engine"], wall["eager"], cpu["engine"], cpu["eager"],
             cpu["engine"] / cpu["eager"], ph["engine"], ph["eager"]))


def engine_run(path):
    recs = [json.loads(line) for line in open(path + "/metrics.jsonl")]
    recs = [r for r in recs if r.get("type") == "metric"]
    return [r["tokens_per_sec"] for r in recs[1:]], recs[-1].get("comm_bytes", 0)


zero3 = [engine_run(d) for d in sorted(glob.glob(out + "/zero3-2.*")) if os.path.isdir(d)]
fsdp = [r for r in rows if r.get("impl") == "fsdp1"]
params = next((r["params"] for r in rows if r.get("impl") == "eager"), None)
print("\n2 ranks on one machine (Gloo over loopback, 1 thread per rank), tiny-15m, fp32, seq 128, "
      "micro-batch 4 per rank (global 8 rows per step), %s steps, median of steps 2..%s, %s rounds "
      "alternating; FSDP1 is `FullyShardedDataParallel(FULL_SHARD)` wrapping each decoder block "
      "(`bench/platform/fsdp1_peer.py`, ranks started by hand with USE_LIBUV=0):\n"
      % (steps, steps, rounds))
print("| run | tokens/s (median) | per round | bytes sent/step/rank |")
print("|---|---:|---|---:|")
if zero3:
    tps = [t for run, _ in zero3 for t in run]
    print("| engine zero3, 2 ranks | %.0f | %s | %.1f MiB (counted) |"
          % (med(tps), ", ".join("%.0f" % med(run) for run, _ in zero3), zero3[-1][1] / MiB))
if fsdp:
    # FULL_SHARD: all-gather of the parameters in forward and again in backward, reduce-scatter
    # of the gradients: 3 x (W-1)/W x 4 bytes per parameter (not counted here: Gloo's own).
    est = "%.1f MiB (3·½·4·P, not counted)" % (3 * 0.5 * 4 * params / MiB) if params else "?"
    print("| PyTorch FSDP1 FULL_SHARD, 2 ranks | %.0f | %s | %s |"
          % (med(r["tokens_per_sec"] for r in fsdp),
             ", ".join("%.0f" % r["tokens_per_sec"] for r in fsdp), est))
