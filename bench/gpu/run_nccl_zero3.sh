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
#      (`train --tensor-parallel 2 --device cuda`) against the same run on one GPU.
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
        --seq-len 128 --micro-batch 4 --lr 1e-3 --seed 3 --device cuda)
    if "$worker" launch --nproc-per-node 1 -- "${train_args[@]}" \
            --out "$run_dir/tp-ref" >/dev/null 2>&1 \
        && "$worker" launch --nproc-per-node 2 -- "${train_args[@]}" \
            --tensor-parallel 2 --nproc-per-node 2 --out "$run_dir/tp2" >/dev/null 2>&1; then
        python3 - "$run_dir" <<'PY' || status=1
import json, sys
d = sys.argv[1]
def losses(run):
    return [r["loss"] for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))
            if r.get("type") == "metric"]
a, b = losses("tp-ref"), losses("tp2")
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(json.dumps({"check": "nccl-tp2-train", "ok": worst <= 1e-4, "loss_max_rel": worst,
                  "steps": len(b)}))
sys.exit(0 if worst <= 1e-4 else 1)
PY
    else
        echo "{\"check\":\"nccl-tp2-train\",\"ok\":false,\"log\":\"$run_dir/tp2/logs/rank-0.log\"}"
        status=1
    fi
fi
exit $status
