# Sourced by the bench/gpu scripts (with $root, $build and $script_name set): checks for NVIDIA
# GPUs and a CUDA build of PyTorch (its LibTorch is what shard-worker builds against; Debian's
# LibTorch is CPU-only), builds shard-worker with the NCCL backend (nccl.h + libnccl from the
# wheel's nvidia-nccl package, or from $CUDA_HOME) and sets $worker, $ngpu, $py and
# LD_LIBRARY_PATH. Env: PYTHON, CUDA_HOME.
py=${PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}

fail() { echo "$script_name: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this script needs a machine with NVIDIA GPUs"
ngpu=$(nvidia-smi -L | grep -c '^GPU' || true)
(( ngpu > 0 )) || fail "nvidia-smi lists no GPU"
info=$("$py" - <<'PY' 2>/dev/null
import os, torch
import importlib.util
nccl = importlib.util.find_spec("nvidia.nccl")
nccl_dir = ""
if nccl is not None and nccl.submodule_search_locations:
    nccl_dir = list(nccl.submodule_search_locations)[0]
print(torch.utils.cmake_prefix_path)
print(torch.version.cuda or "")
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(nccl_dir)
PY
) || fail "$py cannot import torch; install a CUDA build of PyTorch (pip install torch)"
prefix=$(sed -n 1p <<<"$info")
torch_cuda=$(sed -n 2p <<<"$info")
abi=$(sed -n 3p <<<"$info")
wheel_nccl=$(sed -n 4p <<<"$info")
[[ -n "$torch_cuda" ]] || fail "the installed PyTorch is CPU-only; install a CUDA build"
[[ "$abi" == 1 ]] || fail "this PyTorch uses the pre-C++11 ABI; the project's system libraries \
(spdlog, Qt-free deps) use the C++11 ABI: install a PyTorch >= 2.7 wheel (C++11 ABI)"

# NCCL: the wheel's own (same library LibTorch loads), else the toolkit's.
nccl_args=(-DSHARD_CUDA_ROOT="$cuda_home")
if [[ -n "$wheel_nccl" && -f "$wheel_nccl/include/nccl.h" ]]; then
    export NCCL_HOME="$wheel_nccl"
    # The wheel ships libnccl.so.2 only; give find_library a name it can use.
    mkdir -p "$build/nccl-link"
    ln -sf "$wheel_nccl/lib/libnccl.so.2" "$build/nccl-link/libnccl.so"
    nccl_args+=(-DSHARD_NCCL_INCLUDE_DIR="$wheel_nccl/include"
                -DSHARD_NCCL_LIBRARY="$build/nccl-link/libnccl.so")
fi

echo "{\"check\":\"configure\",\"gpus\":$ngpu,\"torch_cuda\":\"$torch_cuda\",\"prefix\":\"$prefix\"}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSHARD_BUILD_STUDIO=OFF -DSHARD_BUILD_TESTS=OFF -DSHARD_BUILD_BENCH=OFF \
    -DCMAKE_PREFIX_PATH="$prefix" -DCUDAToolkit_ROOT="$cuda_home" "${nccl_args[@]}" \
    > "$build.configure.log" 2>&1 || fail "configure failed, see $build.configure.log"
grep -q "NCCL backend ON" "$build.configure.log" || fail "NCCL was not found, see $build.configure.log"
cmake --build "$build" --target shard-worker -j "$(nproc)" > "$build.build.log" 2>&1 \
    || fail "build failed, see $build.build.log"
worker=$build/engine/worker/shard-worker
torch_lib=$(dirname "$prefix")/../lib
export LD_LIBRARY_PATH="$torch_lib:${wheel_nccl:+$wheel_nccl/lib:}${LD_LIBRARY_PATH:-}"

