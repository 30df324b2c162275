#!/usr/bin/env bash
# Debian 13 build roots for CI and developers (needs root, debootstrap, zstd, network the first
# time). A root is made once with debootstrap, kept as a tarball under $SHARD_CI_CACHE keyed by
# a hash of its package list and this script's ROOTS_VERSION, and unpacked fresh for every run.
#
#   ci-roots.sh prepare ROOT        make the tarball if it is missing (fails without network)
#   ci-roots.sh run ROOT CMD...     unpack ROOT, run CMD in it (bash -c), unpack removed after
#   ci-roots.sh cpu-suite           build everything against LibTorch 2.6 (CPU), run the
#                                   engine and multirank labels
#   ci-roots.sh cuda-gate           build the whole project against CUDA LibTorch 2.6 with the
#                                   NCCL backend (the root setup.sh makes with SHARD_GPU=1), fail
#                                   unless --version shows CUDA and NCCL, print `shard doctor`,
#                                   run the unit and gui labels and tst_device_choice (no GPU),
#                                   install its .deb in a clean root (tst_deb_install)
#   ci-roots.sh fresh-ci RELEASE    a clean clone of this repository in a bare debootstrapped
#                                   root of RELEASE (bookworm or trixie): `bash .ci/run` there,
#                                   set-up from nothing included (what "a fresh machine" means)
#
# ROOT is `bookworm-bare` or `trixie-bare` (debootstrap minbase, nothing added), `trixie-cpu`
# (setup.sh's trixie packages: the README's commands on Debian 13) or `trixie-cuda` (the same
# commands with the GPU detection forced, SHARD_GPU=1: CUDA LibTorch, the toolkit, NCCL, Gloo's
# CUDA build; cuDNN replaced by a placeholder, see make_cuda_root). In a root the clone is mounted read-only at /src, the build
# is in /build (inside the unpacked root, or SHARD_CI_BUILD_DIR on the host when set, kept between
# runs), and /ccache is the release's ccache (kept in the cache). The roots of one release share
# it: their compiler and LibTorch headers are the same packages, and ccache's preprocessor mode
# hits wherever a file preprocesses the same, so the CUDA gate reuses most of the CPU suite's
# objects.
set -euo pipefail

ROOTS_VERSION=1
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SHARD_CI_CACHE:-/var/cache/shard-studio-ci}
WORK=${SHARD_CI_WORK:-/var/tmp/shard-ci-roots}
MIRROR=${SHARD_CI_MIRROR:-http://deb.debian.org/debian}
JOBS=${SHARD_CI_JOBS:-2}
# Debian 13's suite is split between the roots: the engine and multi-rank tests against the CPU
# LibTorch, the unit and studio tests against the CUDA one (each label runs once on Debian 13).
SUITE_LABELS='^(engine|multirank)$'
CUDA_GATE_LABELS='^(unit|gui)$'

# The placeholder for nvidia-cudnn (its real post-install script downloads cuDNN from NVIDIA).
FAKE_CUDNN_VERSION=9.0.0.312~cuda12+fake1

log() { echo "ci-roots: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

packages_of() {
    case $1 in
    bookworm-bare | trixie-bare) echo "minbase" ;;
    trixie-cpu) bash "$SRC/scripts/setup.sh" --list trixie ;;
    trixie-cuda) SHARD_GPU=1 bash "$SRC/scripts/setup.sh" --list trixie ;;
    *) die "unknown root '$1' (known: bookworm-bare, trixie-bare, trixie-cpu, trixie-cuda)" ;;
    esac
}

tarball_of() {
    local key
    key=$({
        echo "roots-version $ROOTS_VERSION mirror $MIRROR fake-cudnn $FAKE_CUDNN_VERSION"
        packages_of "$1"
    } | sha256sum | cut -c1-16)
    echo "$CACHE/$1-$key.tar.zst"
}

# chroot_in DIR CMD: a command in a root with /proc, /sys, /dev and a tmpfs /tmp mounted (they
# stay until unmount_all DIR).
mount_all() {
    local dir=$1
    mount -t proc proc "$dir/proc"
    # The host's /sys with its cgroup mounts, as on a booted machine (slurmd needs the cgroups).
    mount --rbind /sys "$dir/sys"
    mount --make-rslave "$dir/sys"
    mount --rbind /dev "$dir/dev"
    mount --make-rslave "$dir/dev"
    mount -t tmpfs -o size=8g tmpfs "$dir/tmp"
}

unmount_all() {
    local dir=$1 m
    # Deepest first; lazy as a last resort so an exiting test cannot keep a mount alive.
    for m in $(findmnt -rn -o TARGET | grep -F "$dir/" | sort -r); do
        umount "$m" 2>/dev/null || umount -R "$m" 2>/dev/null || umount -l "$m" || true
    done
}

remove_root() {
    local dir=$1
    [[ -d $dir ]] || return 0
    unmount_all "$dir"
    if findmnt -rn -o TARGET | grep -qF "$dir/"; then
        log "warning: mounts remain under $dir; not removing it"
        return 0
    fi
    rm -rf --one-file-system "$dir"
}

apt_in() {
    local dir=$1
    shift
    chroot "$dir" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 \
        apt-get -o Acquire::Retries=3 -y -q --no-install-recommends "$@"
}

make_bare_root() {
    : # debootstrap's minbase as it is: the README's set-up installs everything else
}

make_cpu_root() {
    local dir=$1
    cp "$SRC/scripts/setup.sh" "$dir/tmp/setup.sh"
    chroot "$dir" env LC_ALL=C.UTF-8 bash /tmp/setup.sh
}

make_cuda_root() {
    local dir=$1
    echo "deb $MIRROR trixie main contrib non-free non-free-firmware" >"$dir/etc/apt/sources.list"
    apt_in "$dir" update
    apt_in "$dir" install equivs gcc
    # Placeholder nvidia-cudnn: apt is satisfied; no cuDNN library comes with it.
    cat >"$dir/tmp/nvidia-cudnn.ctl" <<EOF
Section: non-free/libs
Package: nvidia-cudnn
Version: $FAKE_CUDNN_VERSION
Maintainer: Shard Studio CI <ci@localhost>
Architecture: amd64
Description: placeholder for cuDNN in the CUDA build gate (no library)
EOF
    chroot "$dir" sh -c 'cd /tmp && equivs-build nvidia-cudnn.ctl >/dev/null && dpkg -i nvidia-cudnn_*.deb'
    # setup.sh checks that cuDNN's library is there: an empty one for now (the stub below
    # replaces it once libtorch_cuda says which symbols it takes).
    chroot "$dir" sh -c 'echo > /tmp/empty.c && gcc -shared -fPIC -Wl,-soname,libcudnn.so.9 \
        -o /usr/local/lib/libcudnn.so.9 /tmp/empty.c && ldconfig'
    # The README's set-up with the GPU detection forced, as on a workstation with a driver.
    cp "$SRC/scripts/setup.sh" "$dir/tmp/setup.sh"
    chroot "$dir" env LC_ALL=C.UTF-8 SHARD_GPU=1 bash /tmp/setup.sh
    apt_in "$dir" purge equivs
    apt_in "$dir" autoremove --purge
    # libtorch_cuda needs libcudnn.so.9 to load. A stub with every cudnn* symbol it imports (each
    # aborts when called) lets `shard-worker --version` run here; nothing in the gate calls cuDNN.
    chroot "$dir" bash -euo pipefail -c '
        lib=$(find /usr/lib -name "libtorch_cuda.so*" | head -1)
        [[ -n $lib ]] || { echo "no libtorch_cuda.so in the root" >&2; exit 1; }
        nm -D --undefined-only "$lib" | awk "/ cudnn/ {sub(/@.*/, \"\", \$2); print \$2}" |
            sort -u | awk "{print \"void \" \$1 \"(void) { __builtin_trap(); }\"}" >/tmp/cudnn_stub.c
        gcc -shared -fPIC -Wl,-soname,libcudnn.so.9 -o /usr/local/lib/libcudnn.so.9 /tmp/cudnn_stub.c
        ldconfig'
}

prepare() {
    local name=$1 tarball dir start
    tarball=$(tarball_of "$name")
    if [[ -f $tarball ]]; then
        log "$name: cached ($tarball)"
        return 0
    fi
    command -v debootstrap >/dev/null || die "debootstrap is missing (bash scripts/setup.sh)"
    command -v zstd >/dev/null || die "zstd is missing (bash scripts/setup.sh)"
    mkdir -p "$CACHE" "$WORK"
    start=$SECONDS
    dir=$(mktemp -d "$WORK/make-$name-XXXXXX")
    chmod 755 "$dir" # a root's / (mktemp makes it 0700): service users must traverse it
    # set -e stops at the first failing step; the message says what that means.
    trap 'rc=$?; remove_root "'"$dir"'"; ((rc == 0)) || log "error: '"$name"': the root could not be made (no network to '"$MIRROR"'?): CI fails"' EXIT
    log "$name: making the root with debootstrap from $MIRROR"
    debootstrap --variant=minbase "${name%%-*}" "$dir" "$MIRROR" >"$dir.debootstrap.log" 2>&1 || {
        tail -5 "$dir.debootstrap.log" >&2
        die "$name: debootstrap failed (no network to $MIRROR?): the root cannot be made"
    }
    rm -f "$dir.debootstrap.log"
    cp /etc/resolv.conf "$dir/etc/resolv.conf"
    # Services installed in the root (sshd, slurm) must not start.
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod +x "$dir/usr/sbin/policy-rc.d"
    mount_all "$dir"
    "make_${name#*-}_root" "$dir"
    chroot "$dir" apt-get clean
    unmount_all "$dir"
    log "$name: packing $(du -sh --one-file-system "$dir" | cut -f1) into $tarball"
    tar -C "$dir" --numeric-owner -cf - . | zstd -q -T0 -3 -o "$tarball.part"
    mv "$tarball.part" "$tarball"
    remove_root "$dir"
    trap - EXIT
    log "$name: made in $((SECONDS - start)) s"
}

# run ROOT CMD: CMD (a bash script) inside a fresh unpack of ROOT.
run_in() {
    local name=$1 cmd=$2 tarball dir start rc=0
    prepare "$name"
    tarball=$(tarball_of "$name")
    mkdir -p "$WORK" "$CACHE/ccache-${name%%-*}"
    dir=$(mktemp -d "$WORK/$name-XXXXXX")
    trap 'remove_root "'"$dir"'"' EXIT
    start=$SECONDS
    zstd -q -d -T0 -c "$tarball" | tar -C "$dir" --numeric-owner -xf -
    chmod 755 "$dir" # tests run as other users too
    log "$name: unpacked in $((SECONDS - start)) s"
    mount_all "$dir"
    mkdir -p "$dir/src" "$dir/ccache" "$dir/build"
    mount --bind "$SRC" "$dir/src"
    mount -o remount,bind,ro "$dir/src"
    # SHARD_CI_CCACHE: a ccache folder of the host's to use instead of the release's.
    mount --bind "${SHARD_CI_CCACHE:-$CACHE/ccache-${name%%-*}}" "$dir/ccache"
    # The package test's minbase tarballs and apt downloads (tests/package), shared with the host.
    mkdir -p /var/cache/shard-studio-test "$dir/var/cache/shard-studio-test"
    mount --bind /var/cache/shard-studio-test "$dir/var/cache/shard-studio-test"
    if ((${SHARD_CI_CLONE:-0})); then
        # A clean clone made by the host's git (a bare root has none), owned by root there.
        git clone -q "$SRC" "$dir/root/clone"
    fi
    if [[ -n ${SHARD_CI_BUILD_DIR:-} ]]; then
        # A developer's build folder kept between runs (the root itself is always fresh).
        mkdir -p "$SHARD_CI_BUILD_DIR"
        mount --bind "$SHARD_CI_BUILD_DIR" "$dir/build"
    fi
    # The host's trust anchors (a network that inspects TLS needs them; npm and git read them).
    cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/host-ca-certificates.crt" 2>/dev/null || true
    chroot "$dir" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LC_ALL=C.UTF-8 TERM=dumb CCACHE_DIR=/ccache CCACHE_BASEDIR=/src \
        CUDA_GATE_LABELS="$CUDA_GATE_LABELS" \
        NODE_EXTRA_CA_CERTS=/etc/ssl/host-ca-certificates.crt \
        CCACHE_MAXSIZE=5G JOBS="$JOBS" SHARD_CI_ROOT="$name" \
        bash -euo pipefail -c "! command -v git >/dev/null || git config --global --add safe.directory /src; cd /src; $cmd" || rc=$?
    remove_root "$dir"
    trap - EXIT
    return $rc
}

cpu_suite() {
    run_in trixie-cpu "
        cmake --preset release -B /build >/dev/null
        cmake --build /build -j \$JOBS
        ctest --test-dir /build -L '$SUITE_LABELS' -j \$JOBS --timeout 600 --output-on-failure
        ccache -s | grep -E 'Hits|Misses' || true"
}

cuda_gate() {
    run_in trixie-cuda '
        # The whole project against CUDA LibTorch, as SHARD_GPU=1 bash scripts/start.sh builds it.
        # No cuDNN in the root (see make_cuda_root): libtorch_cuda.so links with its cudnn
        # symbols left to load time.
        cmake --preset release -B /build -DSHARD_REQUIRE_CUDA=ON \
            -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined >/dev/null
        cmake --build /build -j $JOBS
        v=$(/build/engine/worker/shard-worker --version)
        echo "$v"
        for want in "LibTorch 2\." "CUDA 12\." "NCCL 2\." "NCCL backend on"; do
            grep -qE "$want" <<<"$v" ||
                { echo "cuda-gate: shard-worker --version lacks /$want/: the CUDA path is off" >&2; exit 1; }
        done
        # What a user of this build without a GPU sees.
        /build/app/shard doctor
        # The tests that need no GPU: with CUDA LibTorch and no driver, --device auto trains on
        # the CPU and --device cuda refuses (tst_device_choice); the unit and GUI suites.
        ctest --test-dir /build -L "$CUDA_GATE_LABELS" -j $JOBS --timeout 600 --output-on-failure
        ctest --test-dir /build -R "^tst_device_choice\$" --timeout 600 --output-on-failure
        # The package of this build: it depends on the CUDA LibTorch packages, installs with apt
        # in a clean Debian 13 root, and shard doctor, plan, demo and the studio run there. Its
        # root (~4 GB) is made on disk, not in the tmpfs /tmp.
        TMPDIR=/var/tmp ctest --test-dir /build -R "^tst_deb_install\$" --timeout 1200 --output-on-failure
        ccache -s | grep -E "Hits|Misses" || true
        echo "cuda-gate: passed"'
}

# fresh-ci RELEASE: `bash .ci/run` on a clean clone in a bare root, as on a fresh machine.
fresh_ci() {
    local release=$1
    [[ $release == bookworm || $release == trixie ]] ||
        die "fresh-ci: unknown release '$release' (bookworm or trixie)"
    SHARD_CI_CLONE=1 run_in "$release-bare" '
        cd /root/clone
        export CCACHE_DIR=/ccache
        bash .ci/run'
}

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
case ${1:-} in
prepare) prepare "${2:?root name}" ;;
run) run_in "${2:?root name}" "${*:3}" ;;
cpu-suite) cpu_suite ;;
cuda-gate) cuda_gate ;;
fresh-ci) fresh_ci "${2:?release: bookworm or trixie}" ;;
*) die "usage: ci-roots.sh prepare|run ROOT [CMD] | cpu-suite | cuda-gate | fresh-ci RELEASE" ;;
esac
