#!/usr/bin/env bash
# The GPU engine against eager PyTorch + FSDP2 on one GPU, in one command (issue 12's proof):
#   1. builds shard-worker against the machine's CUDA PyTorch (build_worker.sh: the workstation's
#      CMake preset) and prints `shard doctor` (or `shard-worker doctor` without Qt),
#   2. runs the NCCL collectives at world size 1 (and one rank per GPU where there are several),
#   3. trains a Llama-3.2-1B-shaped model (random weights, shard-worker init-model) in bf16 at
#      sequence length 2048 for STEPS steps under zero3 at 1 rank, without and with activation
#      checkpointing,
#   4. runs the same model, batch and steps in eager PyTorch with fully_shard (fsdp2_llama.py),
#   5. trains the engine once more with checkpointing and --offload optimizer (masters, gradient
#      shards and AdamW state in pinned host memory) for OFFLOAD_STEPS steps: its tokens/s, GPU
#      peak and host bytes against the planner's, its step-1 loss against the run without offload,
#   6. writes tokens/s, MFU (6P + 12*L*h*s FLOPs per token against 990 TFLOP/s dense bf16), peak
#      allocated and reserved bytes next to the planner's prediction, and both step-1 losses to
#      $OUT/train_vs_fsdp2.{json,md}.
# The batch is one row of random token ids repeated, so both sides train on the same tokens
# whatever their data order. Usage: bench/gpu/train_vs_fsdp2.sh [BUILD_DIR]
# Env: STEPS (30), OFFLOAD_STEPS (10), SEQ (2048), MICRO (1), OUT (default build/gpu-results), PYTHON, CUDA_HOME.
# DRY_RUN=1 runs every part that needs no GPU, here: this tree's build of shard-worker (or
# $SHARD_WORKER), the tiny-15m preset on the CPU in fp32 at sequence 128 for 4 steps, the PyTorch
# side in plain eager where this PyTorch has no fully_shard, and the same report and checks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/gpu}
script_name=train_vs_fsdp2
out=${OUT:-$root/build/gpu-results}
mkdir -p "$out"
work=$(mktemp -d /tmp/shard-train-vs-fsdp2-XXXXXX)
trap 'rm -rf "$work"' EXIT

if [[ ${DRY_RUN:-0} == 1 ]]; then
    py=${PYTHON:-/usr/bin/python3} # Debian's python3-torch
    worker=${SHARD_WORKER:-$root/build/release/engine/worker/shard-worker}
    [[ -x $worker ]] || { echo "$script_name: no shard-worker at $worker (build first)" >&2; exit 1; }
    device=cpu preset=tiny-15m precision=fp32 peak=0 stored=f32
    steps=${STEPS:-4} seq=${SEQ:-128}
    export SHARD_OFFLOAD_ON_CPU=1 # offload's code path with host-to-host copies
    pyflags=(--no-fsdp)
    "$py" -c 'import torch.distributed.fsdp as f; f.fully_shard' 2>/dev/null && pyflags=()
else
    source "$here/build_worker.sh"
    device=cuda preset=llama-3.2-1b precision=bf16-mixed peak=990e12 stored=bf16
    steps=${STEPS:-30} seq=${SEQ:-2048}
    pyflags=()
    "$worker" launch --nproc-per-node 1 --run-dir "$work/nccl-1" -- \
        dist-selftest --backend nccl --device cuda --mode collectives > "$work/nccl-1.out"
    echo "{\"check\":\"nccl-collectives-1\",\"ok\":true}"
    if ((ngpu > 1)); then
        "$worker" launch --nproc-per-node "$ngpu" --run-dir "$work/nccl-$ngpu" -- \
            dist-selftest --backend nccl --device cuda --mode collectives > "$work/nccl-n.out"
        echo "{\"check\":\"nccl-collectives-$ngpu\",\"ok\":true}"
    fi
fi
micro=${MICRO:-1}
"$worker" --version
# What this machine trains with, as a user's `shard doctor` says it: the CLI where the build has it
# (the workstation preset), else the worker's own doctor (the same checks, plan/doctor.h).
cli=$(dirname "$worker")/../../app/shard
echo "== doctor"
if [[ -x $cli ]]; then
    SHARD_WORKER=$worker "$cli" doctor
else
    "$worker" doctor
fi

"$worker" init-model --preset "$preset" --out "$work/model" --seed 1 --dtype "$stored" >/dev/null
# One row of SEQ random ids below the vocabulary, repeated for every micro-batch of every step.
"$py" - "$work/model/config.json" "$work/data.jsonl" "$seq" "$((steps * micro + 8))" <<'PY'
import json, random, sys
vocab = json.load(open(sys.argv[1]))["vocab_size"]
rng = random.Random(0)
row = json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(int(sys.argv[3]))]})
with open(sys.argv[2], "w") as f:
    f.write((row + "\n") * int(sys.argv[4]))
PY

results=$work/results.jsonl
: > "$results"
# engine_run CHECKPOINTING OFFLOAD STEPS: one engine run, its row appended to $results.
engine_run() {
    local ckpt=$1 offload=$2 n=$3 run=$work/engine-$1-$2
    "$worker" launch --nproc-per-node 1 --run-dir "$run" -- train --model "$work/model" \
        --data "$work/data.jsonl" --data-format tokenized --no-shuffle --steps "$n" \
        --micro-batch "$micro" --seq-len "$seq" --precision "$precision" --checkpointing "$ckpt" \
        --offload "$offload" --device "$device" --strategy zero3 --nproc-per-node 1 --lr 1e-4 \
        --warmup 0 --schedule constant --log-every 1 --out "$run" > "$run.log" 2>&1 \
        || { tail -20 "$run.log" "$run/logs/rank-0.log" >&2; echo "$script_name: engine run failed" >&2; exit 1; }
    "$py" - "$run" "$ckpt" "$offload" >> "$results" <<'PY'
import json, statistics, sys
run, ckpt, offload = sys.argv[1], sys.argv[2], sys.argv[3]
metrics = [json.loads(l) for l in open(run + "/metrics.jsonl") if l.strip()]
start = next(json.loads(l) for l in open(run + "/events.jsonl") if '"start"' in l)
tps = [m["tokens_per_sec"] for m in metrics]
warm = tps[3:] if len(tps) > 4 else tps[1:] or tps
mem = [r for m in metrics for r in m.get("memory", [])]
cuda = [r["cuda"] for r in mem if "cuda" in r]
print(json.dumps({"impl": "engine", "checkpointing": ckpt, "offload": offload,
    "tokens_per_sec": statistics.median(warm),
    "loss_step1": metrics[0]["loss"], "params": start["data"]["params"],
    # Reads of tensor values to the host per logged step (--log-every 1: per step); each one
    # waits for the GPU. The engine's budget is 1, 2 with offload (docs/ARCHITECTURE.md).
    "host_reads": max(m.get("host_reads", -1) for m in metrics),
    "planned_peak": start["data"].get("planned_peak_bytes"),
    "planned_host": start["data"].get("planned_host_bytes"),
    "offloaded": max((r.get("offloaded", 0) for r in mem), default=0),
    "peak": max((r.get("peak", 0) for r in mem), default=0),
    "max_allocated": max((c["allocated_peak"] for c in cuda), default=None),
    "max_reserved": max((c["reserved_peak"] for c in cuda), default=None),
    "num_alloc_retries": max((c["alloc_retries"] for c in cuda), default=None)}))
PY
}
for ckpt in none full; do
    engine_run "$ckpt" none "$steps"
    "$py" "$here/fsdp2_llama.py" --model "$work/model" --data "$work/data.jsonl" --steps "$steps" \
        --micro-batch "$micro" --seq "$seq" --precision "$precision" --checkpointing "$ckpt" \
        --device "$device" "${pyflags[@]}" >> "$results"
done
engine_run full optimizer "${OFFLOAD_STEPS:-10}"

# The report, and the checks: both step-1 losses agree (the same weights and batch: within
# bf16's tolerance on the GPU, fp32's on the CPU).
"$py" - "$results" "$work/model/config.json" "$seq" "$peak" "$precision" "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
c = json.load(open(sys.argv[2]))
seq, peak, precision, out = int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
L, h = c["num_hidden_layers"], c["hidden_size"]
gib = lambda b: "-" if b is None else f"{b / 2**30:.2f} GiB"
lines = ["| side | checkpointing | tokens/s | MFU | step-1 loss | peak allocated | peak reserved | planned peak | host reads / step |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
ok = True
for r in rows:
    P = r["params"]
    flops = 6 * P + 12 * L * h * seq
    r["mfu"] = r["tokens_per_sec"] * flops / peak if peak else None
    side = ("engine (zero3, 1 rank" + (f", offload {r['offload']}" if r.get("offload", "none") != "none" else "") + ")"
            if r["impl"] == "engine" else f"PyTorch {r.get('torch')} ({r.get('fsdp')})")
    mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    allocated = r.get("max_allocated") or r.get("peak")
    lines.append(f"| {side} | {r['checkpointing']} | {r['tokens_per_sec']:.0f} | {mfu} | "
                 f"{r['loss_step1']:.5f} | {gib(allocated)} | {gib(r.get('max_reserved'))} | "
                 f"{gib(r.get('planned_peak'))} | {r.get('host_reads', '-')} |")
tol = 2e-2 if precision == "bf16-mixed" else 1e-4
engine = lambda ckpt, offload="none": next(
    r for r in rows if r["impl"] == "engine" and r["checkpointing"] == ckpt and r["offload"] == offload)
for ckpt in ("none", "full"):
    e = engine(ckpt)
    p = next(r for r in rows if r["impl"] == "pytorch" and r["checkpointing"] == ckpt)
    rel = abs(e["loss_step1"] - p["loss_step1"]) / abs(p["loss_step1"])
    good = rel <= tol
    ok = ok and good
    lines.append(f"\nStep-1 loss, checkpointing {ckpt}: engine {e['loss_step1']:.6f}, PyTorch "
                 f"{p['loss_step1']:.6f}, relative difference {rel:.2e} "
                 f"({'within' if good else 'OUTSIDE'} {tol:g}); tokens/s engine / PyTorch "
                 f"{e['tokens_per_sec'] / p['tokens_per_sec']:.2f}x")
# Offload: the same first step (its loss is computed before any update: the same up to the
# kernels' run-to-run order), host bytes next to the planner's (which also counts the gradient
# shard, alive from the reduce to the zero-grad), tokens/s against the run without offload.
o, f = engine("full", "optimizer"), engine("full")
rel = abs(o["loss_step1"] - f["loss_step1"]) / abs(f["loss_step1"])
good = rel <= 1e-3
ok = ok and good
grad_shard = 4 * o["params"]
lines.append(f"\nOffload optimizer (checkpointing full): step-1 loss {o['loss_step1']:.6f} vs "
             f"{f['loss_step1']:.6f} without offload ({'same' if good else 'DIFFERENT'}, {rel:.1e}); "
             f"host bytes {gib(o['offloaded'])} offloaded + {gib(grad_shard)} gradient shard = "
             f"{gib(o['offloaded'] + grad_shard)} against the planner's {gib(o.get('planned_host'))}; "
             f"tokens/s {o['tokens_per_sec'] / f['tokens_per_sec']:.2f}x of the run without offload")
# A step reads one value set back to the host per logged step (the loss and gradient norm of the
# steps since the last read); with the optimizer on the host, one more: clipping's factor, read
# once the gradients have come to the host (their copy waited for the GPU already). More means a
# sync crept back into the step.
for r in rows:
    budget = 1 if r.get("offload", "none") == "none" else 2
    if r["impl"] == "engine" and r.get("host_reads", -1) > budget:
        ok = False
        lines.append(f"\nHOST READS: the engine run ({r['checkpointing']}, offload {r['offload']}) "
                     f"read {r['host_reads']} values per step to the host (budget {budget})")
json.dump({"rows": rows, "losses_agree": ok}, open(out + "/train_vs_fsdp2.json", "w"), indent=1)
open(out + "/train_vs_fsdp2.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
PY
