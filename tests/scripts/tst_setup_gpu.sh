#!/usr/bin/env bash
# scripts/setup.sh's choice of build (issue 35), without installing anything: the GPU build's
# package list on Debian 13 (CUDA LibTorch, toolkit, NCCL, Gloo's CUDA build, cuDNN, in place of
# the CPU LibTorch's), the CPU list unchanged without it, Debian 12 refusing the GPU list and
# setting up the CPU build with its two lines, `--gpu` on this machine, a bad SHARD_GPU, and (where
# the GPU build is installed) a driver too old or missing said without failing.
set -uo pipefail
setup=${1:?path to scripts/setup.sh}
failures=0
check() { # description, then a command that must succeed
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
has() { grep -qx -- "$2" <<<"$1"; }

cpu=$(SHARD_GPU=0 bash "$setup" --list trixie)
gpu=$(SHARD_GPU=1 bash "$setup" --list trixie)
plain=$(env -u SHARD_GPU bash "$setup" --list trixie)
check "the CPU list is --list's default" test "$cpu" == "$plain"
for p in libtorch-dev libgloo-dev python3-torch; do
    check "CPU list has $p" has "$cpu" "$p"
    check "GPU list drops $p" bash -c '! grep -qx -- "$1" <<<"$2"' _ "$p" "$gpu"
done
for p in libtorch-cuda-dev libgloo-cuda-dev python3-torch-cuda nvidia-cuda-toolkit libnccl-dev \
    nvidia-cudnn; do
    check "GPU list has $p" has "$gpu" "$p"
    check "CPU list lacks $p" bash -c '! grep -qx -- "$1" <<<"$2"' _ "$p" "$cpu"
done
check "both lists keep the rest (Qt, the toolchain)" \
    test "$(grep -vxE 'libtorch-dev|libgloo-dev|python3-torch' <<<"$cpu")" == \
    "$(grep -vxE 'libtorch-cuda-dev|libgloo-cuda-dev|python3-torch-cuda|nvidia-cuda-toolkit|libnccl-dev|nvidia-cudnn' <<<"$gpu")"

out=$(SHARD_GPU=1 bash "$setup" --list bookworm 2>&1)
rc=$?
check "no GPU list for Debian 12 (exit $rc): $out" \
    bash -c '[[ $1 -ne 0 && $2 == *"needs Debian 13"* ]]' _ "$rc" "$out"
out=$(SHARD_GPU=yes bash "$setup" --list trixie 2>&1)
rc=$?
check "a bad SHARD_GPU is refused (exit $rc): $out" \
    bash -c '[[ $1 -ne 0 && $2 == *"SHARD_GPU must be 1"* ]]' _ "$rc" "$out"

# This machine: --gpu says which build the build scripts configure; it installs nothing.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
SHARD_GPU=0 bash "$setup" --gpu
check "SHARD_GPU=0: the CPU build" test $? -eq 1
out=$(SHARD_GPU=1 bash "$setup" --gpu 2>&1)
rc=$?
if [[ $codename == trixie ]]; then
    check "Debian 13, SHARD_GPU=1: the GPU build" test "$rc" -eq 0
else
    check "Debian 12, SHARD_GPU=1: the CPU build, silently under --gpu" test "$rc" -eq 1 -a -z "$out"
fi
if [[ $codename == bookworm ]] && bash "$setup" >/dev/null 2>&1; then
    # Everything is installed here (the suite runs after setup): the two lines and no install.
    out=$(SHARD_GPU=1 bash "$setup" 2>&1)
    check "Debian 12 with a GPU says it builds for the CPU and how to get the GPU build: $out" \
        bash -c '[[ $1 == *"Debian 12 has no CUDA LibTorch"* && $1 == *"use Debian 13"* && $1 == *"already installed"* ]]' _ "$out"
fi
# Debian 13 with the GPU build installed (CI's CUDA root): a driver too old for CUDA 12, and none,
# are said without failing the set-up (nvidia-smi here is a script answering as such a driver's).
installed=""
[[ $codename == trixie ]] && installed=$(SHARD_GPU=1 bash "$setup" 2>/dev/null || true)
if [[ $codename == trixie && ! -e /proc/driver/nvidia/version && $installed == *"already installed"* ]]; then
    bin=$(mktemp -d)
    printf '#!/bin/sh\n[ "$1" = --query-gpu=driver_version ] && echo 470.82.01\n' >"$bin/nvidia-smi"
    chmod +x "$bin/nvidia-smi"
    out=$(PATH="$bin:$PATH" SHARD_GPU=1 bash "$setup" 2>&1)
    rc=$?
    check "an old driver is named with the version CUDA 12 needs (exit $rc): $out" \
        bash -c '[[ $1 -eq 0 && $2 == *"470.82.01, older than 525.60.13"* && $2 == *"apt install nvidia-driver"* ]]' _ "$rc" "$out"
    rm -rf "$bin"
    out=$(SHARD_GPU=1 bash "$setup" 2>&1)
    check "no driver: the GPU build still sets up, and says runs train on the CPU: $out" \
        bash -c '[[ $1 == *"no NVIDIA driver answers here"* && $1 == *"already installed"* ]]' _ "$out"
fi
echo "tst_setup_gpu: $failures failure(s)"
exit $((failures > 0))
