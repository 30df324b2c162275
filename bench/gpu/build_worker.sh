# Sourced by the bench/gpu scripts (with $root, $build and $script_name set): checks for NVIDIA
# GPUs and a CUDA build of PyTorch (its LibTorch is what shard-worker builds against; Debian's
# LibTorch is CPU-only), builds shard-worker with the NCCL backend through the workstation's CMake
# preset (nccl.h + libnccl from the
# wheel's nvidia-nccl package, or from $CUDA_HOME) and sets $worker, $ngpu, $py and
# LD_LIBRARY_PATH. Env: PYTHON, CUDA_HOME, SHARD_GPU_DEPS (carried_deps.sh: the worker's
# libraries, nccl.h and libcudart_static.a for a machine that lacks them).
py=${PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}

fail() { echo "$script_name: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this script needs a machine with NVIDIA GPUs"
ngpu=$(nvidia-smi -L | grep -c '^GPU' || true)
(( ngpu > 0 )) || fail "nvidia-smi lists no GPU"
info=$("$py" - <<'PY' 2>/dev/null
import glob, os, torch
# The wheel's NCCL (nvidia-nccl-cu1x): nvidia/nccl/{include,lib} or a per-CUDA folder under nvidia/.
nccl_inc = nccl_lib = ""
try:
    import nvidia
    for base in list(nvidia.__path__):
        heads = sorted(glob.glob(os.path.join(base, "**", "nccl.h"), recursive=True))
        libs = sorted(glob.glob(os.path.join(base, "**", "libnccl.so.2"), recursive=True))
        if heads and libs:
            nccl_inc, nccl_lib = os.path.dirname(heads[0]), os.path.dirname(libs[0])
            break
except ImportError:
    pass
print(torch.utils.cmake_prefix_path)
print(torch.version.cuda or "")
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(nccl_inc)
print(nccl_lib)
PY
) || fail "$py cannot import torch; install a CUDA build of PyTorch (pip install torch)"
prefix=$(sed -n 1p <<<"$info")
torch_cuda=$(sed -n 2p <<<"$info")
abi=$(sed -n 3p <<<"$info")
wheel_nccl_inc=$(sed -n 4p <<<"$info")
wheel_nccl_lib=$(sed -n 5p <<<"$info")
[[ -n "$torch_cuda" ]] || fail "the installed PyTorch is CPU-only; install a CUDA build"
[[ "$abi" == 1 ]] || fail "this PyTorch uses the pre-C++11 ABI; the project's system libraries \
(spdlog, Qt-free deps) use the C++11 ABI: install a PyTorch >= 2.7 wheel (C++11 ABI)"

# NCCL: the wheel's own (the library LibTorch loads), else the toolkit's; libnccl.so.2 is
# dlopen'ed at run time, so only nccl.h is needed to build.
nccl_args=(-DSHARD_CUDA_ROOT="$cuda_home")
if [[ -n "$wheel_nccl_inc" ]]; then
    export NCCL_HOME="$(dirname "$wheel_nccl_inc")"
    nccl_args+=(-DSHARD_NCCL_INCLUDE_DIR="$wheel_nccl_inc")
elif [[ ! -f $cuda_home/include/nccl.h && -f ${SHARD_GPU_DEPS:-/nonexistent}/nccl/include/nccl.h ]]; then
    nccl_args+=(-DSHARD_NCCL_INCLUDE_DIR="$SHARD_GPU_DEPS/nccl/include")
fi
# The CUDA runtime is linked statically; a toolkit without libcudart_static.a takes a carried one.
if [[ ! -f $cuda_home/lib64/libcudart_static.a && ! -f $cuda_home/lib/libcudart_static.a \
    && -f ${SHARD_GPU_DEPS:-/nonexistent}/cuda/libcudart_static.a ]]; then
    nccl_args+=(-DSHARD_CUDART_LIBRARY="$SHARD_GPU_DEPS/cuda/libcudart_static.a")
fi

# A machine without the worker's libraries (spdlog, fmt, CLI11, nlohmann-json, PCRE2, ICU) takes
# them from unpacked .debs: SHARD_GPU_DEPS=DIR (bench/gpu/carried_deps.sh).
deps_cmake_args=() deps_prefix=
if [[ -n ${SHARD_GPU_DEPS:-} ]]; then
    source "$here/carried_deps.sh"
fi

mkdir -p "$build"
# The workstation's preset (CMakePresets.json: `release`, what scripts/setup.sh builds with
# SHARD_GPU=1) where this machine has its libraries (Qt, QCustomPlot, yaml-cpp, ...); without them
# (the device tool's machines have no Qt) `worker-only`, the same preset less the studio, the CLI
# and the tests. Either way SHARD_REQUIRE_CUDA=ON: the configure fails unless LibTorch has CUDA
# and the NCCL backend is built.
configure() {
    rm -f "$build/CMakeCache.txt"
    # SHARD_WITH_GLOO=AUTO: a wheel's LibTorch may lack Gloo's headers; the GPU runs use NCCL.
    (cd "$root" && cmake --preset "$1" -B "$build" -DSHARD_REQUIRE_CUDA=ON \
        -DSHARD_BUILD_TESTS=OFF -DSHARD_BUILD_BENCH=OFF \
        -DCMAKE_PREFIX_PATH="${deps_prefix:+$deps_prefix;}$prefix" -DCUDAToolkit_ROOT="$cuda_home" \
        -DSHARD_WITH_GLOO=AUTO "${nccl_args[@]}" "${deps_cmake_args[@]}") > "$build.configure-$1.log" 2>&1
}
# Qt 6's CMake package decides which: without it the release configure can only fail (after
# its find_package(Torch)), so it is not tried.
has_qt6() {
    local d
    for d in /usr/lib/*/cmake/Qt6Widgets /usr/lib/cmake/Qt6Widgets /usr/local/lib/cmake/Qt6Widgets \
        ${deps_prefix:-} ${CMAKE_PREFIX_PATH:+${CMAKE_PREFIX_PATH//:/ }}; do
        [[ -e $d/Qt6WidgetsConfig.cmake || -e $d/lib/cmake/Qt6Widgets/Qt6WidgetsConfig.cmake ]] &&
            return 0
    done
    return 1
}
preset=release
if ! has_qt6 || ! configure release; then
    has_qt6 || echo "no Qt 6 (Qt6WidgetsConfig.cmake): the worker-only preset" > "$build.configure-release.log"
    preset=worker-only
    configure worker-only ||
        fail "configure failed (preset worker-only; release: $(grep -m1 -A2 'CMake Error' "$build.configure-release.log" | tr '\n' ' ')), see $build.configure-worker-only.log"
fi
echo "{\"check\":\"configure\",\"preset\":\"$preset\",\"gpus\":$ngpu,\"torch_cuda\":\"$torch_cuda\",\"prefix\":\"$prefix\"}"
# -k 0: every compile error in one pass (a GPU machine's minutes are few).
targets=(shard-worker)
[[ $preset == release ]] && targets+=(shard)
cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" -- -k 0 > "$build.build.log" 2>&1 \
    || fail "build failed, see $build.build.log"
worker=$build/engine/worker/shard-worker
torch_lib=$(dirname "$prefix")/../lib
export LD_LIBRARY_PATH="$torch_lib:${wheel_nccl_lib:+$wheel_nccl_lib:}${LD_LIBRARY_PATH:-}"

