# The worker's build dependencies for a GPU machine that has a CUDA PyTorch, CMake and a compiler
# but none of the worker's own libraries and no package registry (the device tool's machines).
#
#   bash bench/gpu/carried_deps.sh fetch DIR   here, with Debian's archive reachable: downloads
#       the .debs into DIR (Debian 12's libraries, which need only glibc 2.36, so they load on a
#       newer distribution; Debian 13's Gloo headers, closer to a recent LibTorch's Gloo), and
#       this machine's nccl.h and libcudart_static.a (build_worker.sh uses them where the GPU
#       machine's toolkit lacks them).
#   SHARD_GPU_DEPS=DIR, then bench/gpu/build_worker.sh sources this file: it unpacks the .debs
#       under DIR/root (and the Gloo headers under DIR/gloo), and sets $deps_cmake_args and
#       LD_LIBRARY_PATH so CMake finds them before anything else on the machine. The Gloo headers
#       are searched after LibTorch's own (-idirafter): a wheel that ships Gloo's headers uses them.
# Nothing is installed into / and nothing outside DIR is written.

carried_debs=(nlohmann-json3-dev libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
    libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libicu-dev libicu72
    pkgconf pkgconf-bin libpkgconf3)

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    [[ ${1:-} == fetch && -n ${2:-} ]] || { echo "usage: $0 fetch DIR" >&2; exit 2; }
    dir=$(mkdir -p "$2" && cd "$2" && pwd)
    (cd "$dir" && apt-get download "${carried_debs[@]}")
    # Debian 13's Gloo headers, from its archive, without touching this machine's apt state.
    lists=$(mktemp -d /tmp/shard-trixie-apt-XXXXXX)
    trap 'rm -rf "$lists"' EXIT
    mkdir -p "$lists/state/partial" # apt update removes unknown files from its lists folder
    echo "deb http://deb.debian.org/debian trixie main" > "$lists/sources.list"
    o=(-oDir::Etc::SourceList="$lists/sources.list" -oDir::Etc::SourceParts=/nonexistent
       -oDir::State::Lists="$lists/state")
    apt-get "${o[@]}" update >/dev/null
    (cd "$dir" && apt-get "${o[@]}" download libgloo-dev)
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
    rm -rf "$deps_root" "$deps_dir/gloo"
    for deb in "$deps_dir"/*.deb; do
        case $(basename "$deb") in
            libgloo-dev_*) dpkg -x "$deb" "$deps_dir/gloo" ;;
            *) dpkg -x "$deb" "$deps_root" ;;
        esac
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
deps_cmake_args=(-DICU_ROOT="$deps_root/usr" -DSHARD_WITH_GLOO=AUTO
    -DCMAKE_CXX_FLAGS="-idirafter $deps_dir/gloo/usr/include")
command -v pkg-config >/dev/null || command -v pkgconf >/dev/null \
    || deps_cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$deps_root/usr/bin/pkgconf")
deps_prefix=$deps_root/usr
