#!/usr/bin/env bash
# GPU check of the NCCL backend, for a machine with NVIDIA GPUs and a CUDA build of PyTorch
# (its LibTorch is what we build against; Debian's LibTorch is CPU-only):
#   1. configure and build shard-worker against the wheel's LibTorch (Torch_DIR from
#      torch.utils.cmake_prefix_path) with the NCCL backend (nccl.h + libnccl from the wheel's
#      nvidia-nccl package, or from $CUDA_HOME),
#   2. run every collective on CUDA tensors through NCCL (dist-selftest --backend nccl
#      --device cuda), at 1 rank and, with several GPUs, at one rank per GPU,
#   3. run one bf16 ZeRO-3 step (bf16 all-gather of padded shards, autograd on the GPU, fp32
#      reduce-scatter, update of the fp32 shards) and compare it with an fp32 reference.
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
nproc=${NPROC:-$ngpu}
if (( nproc > 1 )); then
    check "nccl-collectives-$nproc" "$nproc" collectives
    check "nccl-zero3-bf16-step-$nproc" "$nproc" zero3-step
fi
exit $status
