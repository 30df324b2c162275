#!/usr/bin/env bash
# GPU check of the NCCL backend, for a machine with NVIDIA GPUs and a CUDA build of PyTorch
# (its LibTorch is what we build against; Debian's LibTorch is CPU-only):
#   1. configure and build shard-worker against the wheel's LibTorch (Torch_DIR from
#      torch.utils.cmake_prefix_path) with the NCCL backend (nccl.h + libnccl from the wheel's
#      nvidia-nccl package, or from $CUDA_HOME),
#   2. run every collective on CUDA tensors through NCCL (dist-selftest --backend nccl
#      --device cuda), at 1 rank and, with several GPUs, at one rank per GPU,
#   3. run one bf16 ZeRO-3 step (bf16 all-gather of padded shards, autograd on the GPU, fp32
#      reduce-scatter, update of the fp32 shards) and compare it with an fp32 reference,
#   4. tensor parallel: one split block against the whole block in fp64 on the GPU (1 rank: the
#      degenerate path; with 2+ GPUs: 2 ranks over NCCL), and with 2+ GPUs a TP2 training run
#      (`train --tensor-parallel 2 --device cuda`) against the same run on one GPU, and the same
#      with sequence parallel (reduce-scatter / all-gather along the sequence over NCCL),
#   5. pipeline parallel, with 2+ GPUs: PP2 (1F1B over 4 micro-batches, activations and their
#      gradients between the GPUs over NCCL) and, with 4+ GPUs, TP2 x PP2 against one GPU.
# Usage: bench/gpu/run_nccl_zero3.sh [BUILD_DIR]   (env: PYTHON, CUDA_HOME, NPROC)
# Output: one JSON line per check on stdout; exit status 0 when all passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/gpu}

# Probes the CUDA PyTorch, builds shard-worker against its LibTorch with NCCL: sets $worker,
# $ngpu and LD_LIBRARY_PATH (bench/gpu/build_worker.sh).
script_name=run_nccl_zero3
source "$here/build_worker.sh"

run_dir=$(mktemp -d /tmp/shard-gpu-XXXXXX)
status=0
check() { # name nproc mode
    local name=$1 nproc=$2 mode=$3
    if "$worker" launch --nproc-per-node "$nproc" --run-dir "$run_dir/$name" -- \
        dist-selftest --backend nccl --device cuda --mode "$mode" > "$run_dir/$name.out"; then
        echo "{\"check\":\"$name\",\"ok\":true,\"report\":$(tail -1 "$run_dir/$name.out")}"
    else
        echo "{\"check\":\"$name\",\"ok\":false,\"log\":\"$run_dir/$name/logs/rank-0.log\"}"
        status=1
    fi
}
check nccl-collectives-1 1 collectives
check nccl-zero3-bf16-step-1 1 zero3-step
check nccl-tp-block-1 1 tp-block
nproc=${NPROC:-$ngpu}
if (( nproc > 1 )); then
    check "nccl-collectives-$nproc" "$nproc" collectives
    check "nccl-zero3-bf16-step-$nproc" "$nproc" zero3-step
    check nccl-tp-block-2 2 tp-block
    # TP2 training on two GPUs against one GPU: the same losses within fp32 summation order.
    "$worker" init-model --preset tiny-15m --out "$run_dir/model" --seed 1 >/dev/null
    python3 -c "
import json, random
r = random.Random(0)
with open('$run_dir/data.jsonl', 'w') as f:
    for _ in range(256):
        f.write(json.dumps({'input_ids': [r.randrange(4096) for _ in range(128)]}) + '\\n')
"
    train_args=(train --model "$run_dir/model" --data "$run_dir/data.jsonl" --steps 8
        --seq-len 128 --lr 1e-3 --seed 3 --device cuda)
    # train NAME NPROC ARGS...: one training run; compare REF RUN CHECK: the losses of two.
    train() {
        local name=$1 n=$2
        shift 2
        "$worker" launch --nproc-per-node "$n" -- "${train_args[@]}" "$@" --nproc-per-node "$n" \
            --out "$run_dir/$name" >/dev/null 2>&1
    }
    compare() {
        python3 - "$run_dir" "$1" "$2" "$3" <<'PY' || status=1
import json, sys
d, ref, run, check = sys.argv[1:5]
def losses(name):
    return [r["loss"] for r in map(json.loads, open(f"{d}/{name}/metrics.jsonl"))
            if r.get("type") == "metric"]
a, b = losses(ref), losses(run)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(json.dumps({"check": check, "ok": worst <= 1e-4, "loss_max_rel": worst, "steps": len(b)}))
sys.exit(0 if worst <= 1e-4 else 1)
PY
    }
    failed() {
        echo "{\"check\":\"$1\",\"ok\":false,\"log\":\"$run_dir/$2/logs/rank-0.log\"}"
        status=1
    }
    if train tp-ref 1 --micro-batch 4 && train tp2 2 --micro-batch 4 --tensor-parallel 2; then
        compare tp-ref tp2 nccl-tp2-train
    else
        failed nccl-tp2-train tp2
    fi
    if train tp2-sp 2 --micro-batch 4 --tensor-parallel 2 --sequence-parallel; then
        compare tp-ref tp2-sp nccl-tp2-sp-train
    else
        failed nccl-tp2-sp-train tp2-sp
    fi
    # Pipeline parallel: the same losses as one GPU running the same 4 micro-batches.
    if train pp-ref 1 --micro-batch 1 --grad-accum 4 \
        && train pp2 2 --micro-batch 1 --grad-accum 4 --pipeline-parallel 2; then
        compare pp-ref pp2 nccl-pp2-train
    else
        failed nccl-pp2-train pp2
    fi
    if (( nproc >= 4 )); then
        if train tp2-pp2 4 --micro-batch 1 --grad-accum 4 --pipeline-parallel 2 \
            --tensor-parallel 2; then
            compare pp-ref tp2-pp2 nccl-tp2-pp2-train
        else
            failed nccl-tp2-pp2-train tp2-pp2
        fi
    fi
fi
exit $status
