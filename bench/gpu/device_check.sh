#!/usr/bin/env bash
# Every GPU check in one command, for a lent GPU machine that has a CUDA PyTorch but none of the
# worker's libraries (the device tool's machines: Ubuntu 24.04, g++ 13, CMake 4, PyTorch 2.11
# cu130, no package registry). Here, first: bash bench/gpu/carried_deps.sh fetch .gpudeps
# (.gpudeps is git-ignored through .git/info/exclude; the device call carries it). There:
#   OUT=<folder> bash bench/gpu/device_check.sh
# writes $OUT/report.txt (the machine, the steps' exit codes and times), train.log and the
# train_vs_fsdp2.{json,md} of train_vs_fsdp2.sh (which builds the worker), configure.log and
# build-errors.txt (every compile error: the build runs with -k 0), and nccl_zero3.log: at most
# 8 files, what the device tool brings back.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:?set OUT to the folder for the results}
mkdir -p "$out"
export SHARD_GPU_DEPS=${SHARD_GPU_DEPS:-$root/.gpudeps} PYTHONUNBUFFERED=1
report=$out/report.txt
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    grep PRETTY_NAME /etc/os-release
    g++ --version | head -1
    cmake --version | head -1
    echo "cpus $(nproc)"
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} > "$report" 2>&1
cd "$root" || exit 1
OUT=$out bash "$here/train_vs_fsdp2.sh" > "$out/train.log" 2>&1
rc=$?
echo "train_vs_fsdp2: exit $rc at $(since)" >> "$report"
cat build/gpu.configure-*.log > "$out/configure.log" 2>/dev/null
[[ -f build/gpu.build.log ]] && grep -E "FAILED:|error|Error" -A4 build/gpu.build.log | head -c 400000 \
    > "$out/build-errors.txt"
if [[ -x build/gpu/engine/worker/shard-worker ]]; then
    bash "$here/run_nccl_zero3.sh" > "$out/nccl_zero3.log" 2>&1
    nrc=$?
    echo "run_nccl_zero3: exit $nrc at $(since)" >> "$report"
    (( rc == 0 )) && rc=$nrc
fi
tail -c 3000 "$out/train.log"
cat "$report"
exit $rc
