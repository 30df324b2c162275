# The worker's build dependencies for a GPU machine that has a CUDA PyTorch, CMake and a compiler
# but none of the worker's own libraries and no package registry (the device tool's machines).
#
#   bash bench/gpu/carried_deps.sh fetch DIR   here, with Debian's archive reachable: downloads
#       the .debs into DIR (Debian 12's libraries, which need only glibc 2.36, so they load on a
#       newer distribution), and this machine's nccl.h and libcudart_static.a (build_worker.sh
#       uses them where the GPU machine's toolkit lacks them).
#   SHARD_GPU_DEPS=DIR, then bench/gpu/build_worker.sh sources this file: it unpacks the .debs
#       under DIR/root and sets $deps_cmake_args and LD_LIBRARY_PATH so CMake finds them before
#       anything else on the machine.
# No Gloo headers are carried: a wheel's LibTorch has none (PyTorch 2.11's has not) and its Gloo
# is built into libtorch_cpu at its own version, so the worker is built with NCCL only
# (SHARD_WITH_GLOO=AUTO); the GPU runs use NCCL.
# Nothing is installed into / and nothing outside DIR is written.

carried_debs=(nlohmann-json3-dev libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
    libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libicu-dev libicu72
    pkgconf pkgconf-bin libpkgconf3)

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    [[ ${1:-} == fetch && -n ${2:-} ]] || { echo "usage: $0 fetch DIR" >&2; exit 2; }
    dir=$(mkdir -p "$2" && cd "$2" && pwd)
    (cd "$dir" && apt-get download "${carried_debs[@]}")
    # nccl.h (libnccl.so.2 itself is dlopen'ed from the machine's PyTorch) and the static CUDA
    # runtime, for a toolkit that lacks them.
    cuda=${CUDA_HOME:-/usr/local/cuda}
    if [[ -f $cuda/include/nccl.h ]]; then
        mkdir -p "$dir/nccl/include" && cp "$cuda/include/nccl.h" "$dir/nccl/include/"
    fi
    if [[ -f $cuda/lib64/libcudart_static.a ]]; then
        mkdir -p "$dir/cuda" && cp "$cuda/lib64/libcudart_static.a" "$dir/cuda/"
    fi
    du -sh "$dir"
    exit 0
fi

# Sourced: unpack and point the build at DIR.
deps_dir=$(cd "$SHARD_GPU_DEPS" && pwd)
deps_root=$deps_dir/root
if [[ ! -f $deps_root/.unpacked ]]; then
    command -v dpkg >/dev/null || { echo "carried_deps: no dpkg here to unpack $deps_dir/*.deb" >&2; exit 1; }
    rm -rf "$deps_root"
    for deb in "$deps_dir"/*.deb; do
        dpkg -x "$deb" "$deps_root"
    done
    # pkg-config files name prefix=/usr: point them at the unpacked tree.
    for pc in "$deps_root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
        sed -i "s|^prefix=/usr\$|prefix=$deps_root/usr|" "$pc"
    done
    touch "$deps_root/.unpacked"
fi
deps_lib=$deps_root/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$deps_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$deps_lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
deps_cmake_args=(-DICU_ROOT="$deps_root/usr")
command -v pkg-config >/dev/null || command -v pkgconf >/dev/null \
    || deps_cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$deps_root/usr/bin/pkgconf")
deps_prefix=$deps_root/usr
