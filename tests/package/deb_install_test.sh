#!/usr/bin/env bash
# Builds the .deb with CPack, installs it with apt into a clean minbase root of this machine's
# Debian release (debootstrap), and runs the programs there: shard --version, shard-worker
# --version, shard doctor, shard plan, shard demo and shard-studio --screenshot.
#
# A CUDA build's package (it depends on libtorch-cuda-2.6: the Debian 13 CUDA root of
# scripts/ci-roots.sh) installs from Debian's contrib and non-free the same way. Its nvidia-cudnn
# dependency downloads cuDNN from NVIDIA at install time; where this machine has CI's placeholder
# for it (version +fake, no network to NVIDIA), the clean root gets the same placeholder, with
# this machine's libcudnn.so.9 stub, before the package: everything else is Debian's.
#
# Kept between runs under $SHARD_PKGTEST_CACHE (/var/cache/shard-studio-test): the minbase
# tarball of each release and apt's downloaded packages (the CUDA ones are ~2 GB).
# Exit 77 = skipped (not root / no debootstrap / no mirror configured).
set -euo pipefail
build=${1:?usage: deb_install_test.sh BUILD_DIR}
build=$(cd "$build" && pwd)

[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for debootstrap/chroot"; exit 77; }
command -v debootstrap >/dev/null || { echo "SKIP: debootstrap not installed"; exit 77; }

suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ $suite == bookworm || $suite == trixie ]] ||
    { echo "SKIP: this test knows Debian 12 and 13 (bookworm, trixie), not '${suite:-?}'"; exit 77; }
# The mirror the host's apt already uses (deb822 or one-line format).
mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk -v s="$suite" '/^deb / && $3 == s {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || { echo "SKIP: no Debian mirror configured in /etc/apt"; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/shard-deb-test.XXXXXX")
root=$work/root
cleanup() {
    for m in "$root/var/cache/apt/archives" "$root/dev/pts" "$root/dev" "$root/proc" "$root/sys"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

echo "== cpack"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
    { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/pkg/*.deb)
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
depends=$(dpkg-deb -f "$deb" Depends)
echo "$depends"
# One dependency a line; alternatives ("libtorch2.6 | libtorch-cuda-2.6 | ...", for the
# libraries every LibTorch flavour ships) stay on their line.
items=$(sed 's/, /\n/g' <<<"$depends")
cuda=0
if grep -qE '^libtorch-cuda-[0-9.]+( \([^)]*\))?$' <<<"$items"; then
    cuda=1
    # A CUDA build must not pull the CPU LibTorch in (the two conflict in apt).
    if grep -qE '^libtorch[0-9.]+( \([^)]*\))?$' <<<"$items"; then
        echo "FAIL: the CUDA package also depends on the CPU LibTorch alone"
        exit 1
    fi
fi

echo "== debootstrap $suite (minbase)"
cache=${SHARD_PKGTEST_CACHE:-/var/cache/shard-studio-test}
mkdir -p "$cache/apt-$suite"
tarball=$cache/$suite-minbase.tgz
if [[ ! -s $tarball ]]; then
    debootstrap --variant=minbase --make-tarball="$tarball.part" "$suite" "$work/tb" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
    mv "$tarball.part" "$tarball"
fi
debootstrap --variant=minbase --unpack-tarball="$tarball" "$suite" "$root" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
for p in gcc g++ cmake qmake6 python3 nvcc; do
    if chroot "$root" sh -c "command -v $p" >/dev/null 2>&1; then
        echo "FAIL: the clean root unexpectedly has $p"
        exit 1
    fi
done
# CUDA LibTorch and its libraries are in contrib and non-free.
echo "deb $mirror $suite main contrib non-free non-free-firmware" >"$root/etc/apt/sources.list"
rm -f "$root"/etc/apt/sources.list.d/*.sources

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
# apt's downloads kept between runs (apt-get clean is never called on them).
mount --bind "$cache/apt-$suite" "$root/var/cache/apt/archives"
mkdir -p "$root/var/cache/apt/archives/partial"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp "$deb" "$root/tmp/shard-studio.deb"

cudnn_fake=$(dpkg-query -W -f '${Version}' nvidia-cudnn 2>/dev/null || true)
if ((cuda)) && [[ $cudnn_fake == *+fake* ]]; then
    stub=$(ldconfig -p | awk '/libcudnn\.so\.9 / {print $NF; exit}')
    [[ -n $stub ]] || { echo "FAIL: the placeholder nvidia-cudnn is here but no libcudnn.so.9 stub"; exit 1; }
    echo "== placeholder nvidia-cudnn $cudnn_fake (this machine's, with its libcudnn.so.9 stub)"
    pkg=$work/fake-cudnn
    mkdir -p "$pkg/DEBIAN" "$pkg/usr/lib/x86_64-linux-gnu"
    cp "$stub" "$pkg/usr/lib/x86_64-linux-gnu/libcudnn.so.9"
    cat >"$pkg/DEBIAN/control" <<CTL
Package: nvidia-cudnn
Version: $cudnn_fake
Section: non-free/libs
Priority: optional
Architecture: amd64
Maintainer: Shard Studio CI <ci@localhost>
Description: placeholder for cuDNN in the package test (a stub library, no cuDNN)
CTL
    dpkg-deb --root-owner-group -b "$pkg" "$root/tmp/nvidia-cudnn.deb" >/dev/null
    chroot "$root" dpkg -i /tmp/nvidia-cudnn.deb >/dev/null
    chroot "$root" ldconfig
fi

echo "== apt install ./shard-studio.deb"
start=$SECONDS
chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -q && apt-get install -y -q --no-install-recommends /tmp/shard-studio.deb' \
    >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
tail -1 "$work/apt.log"
echo "installed in $((SECONDS - start)) s; the root holds $(du -sh --one-file-system "$root" | cut -f1)"

run() { echo "\$ $*"; chroot "$root" env HOME=/root QT_QPA_PLATFORM=offscreen "$@"; }
run shard --version
version=$(chroot "$root" shard-worker --version)
echo "$version"
if ((cuda)); then
    for want in "CUDA 12\." "NCCL backend on"; do
        grep -qE "$want" <<<"$version" ||
            { echo "FAIL: the installed CUDA worker's --version lacks /$want/"; exit 1; }
    done
fi
# What a user of the installed package sees first: the doctor finds the worker (exit 0) and, with
# no GPU here, says what the machine trains with.
doctor=$(chroot "$root" env HOME=/root shard doctor) || { echo "$doctor"; echo "FAIL: shard doctor failed"; exit 1; }
echo "$doctor"
grep -q "shard-worker" <<<"$doctor" || { echo "FAIL: shard doctor does not report the worker"; exit 1; }
run shard plan --model llama-2-7b --gpus 8 --strategy zero3 --precision bf16-mixed \
    --checkpointing full --micro-batch 2 --seq-len 4096
run test -f /usr/share/man/man1/shard.1.gz
run test -f /usr/share/applications/shard-studio.desktop
run test -f /usr/share/shard-studio/demo/copy.jsonl
run shard-studio --screenshot /tmp/plan.png --page plan
run test -s /tmp/plan.png
# With a CUDA worker and no GPU, the demo trains on the CPU (--device auto).
run shard demo
echo "PASS: installed and ran in a clean Debian $suite root$( ((cuda)) && echo ' (CUDA build)')"
