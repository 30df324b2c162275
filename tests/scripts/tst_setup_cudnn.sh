#!/usr/bin/env bash
# scripts/setup.sh against a half-installed cuDNN, through dpkg itself (issue 35): nvidia-cudnn's
# installer downloads cuDNN from NVIDIA when it is configured, and without access it fails and
# leaves the package half-configured. Here a package of that name whose configure step fails the
# same way is installed over the root's; setup.sh must say what is wrong and how to finish, and,
# once the download works, finish it on the next run. Then cuDNN's library removed: setup.sh
# stops and says so. It changes the root's dpkg state, so it runs only as root in CI's disposable
# CUDA root (scripts/ci-roots.sh sets SHARD_CI_ROOT); elsewhere it is skipped (exit 77).
set -uo pipefail
setup=${1:?path to scripts/setup.sh}
if [[ $(id -u) -ne 0 || ${SHARD_CI_ROOT:-} != trixie-cuda ]]; then
    echo "SKIP: needs root in CI's disposable trixie-cuda root (it changes dpkg's state)"
    exit 77
fi
failures=0
check() { # description, then a command that must succeed
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# nvidia-cudnn whose configure step fails as the real one does without NVIDIA's servers.
pkg=$work/pkg
mkdir -p "$pkg/DEBIAN"
cat >"$pkg/DEBIAN/control" <<CTL
Package: nvidia-cudnn
Version: 9.0.0.312~cuda12+fake2
Architecture: amd64
Maintainer: Shard Studio tests <tests@localhost>
Description: nvidia-cudnn whose download fails (tst_setup_cudnn)
CTL
printf '#!/bin/sh\n[ "$1" = configure ] || exit 0\necho "nvidia-cudnn: downloading cuDNN from developer.download.nvidia.com failed" >&2\nexit 1\n' \
    >"$pkg/DEBIAN/postinst"
chmod 755 "$pkg/DEBIAN/postinst"
dpkg-deb --build "$pkg" "$work/nvidia-cudnn.deb" >/dev/null
dpkg -i "$work/nvidia-cudnn.deb" >"$work/dpkg.log" 2>&1
status=$(dpkg-query -W -f='${Status}' nvidia-cudnn)
check "dpkg leaves it half-configured: $status" test "$status" == "install ok half-configured"

out=$(SHARD_GPU=1 bash "$setup" 2>&1)
rc=$?
check "setup.sh stops and says cuDNN could not be downloaded, and how to finish (exit $rc): $out" \
    bash -c '[[ $1 -ne 0 && $2 == *"nvidia-cudnn is half installed"* && $2 == *"developer.download.nvidia.com"* && $2 == *"run this script again"* ]]' _ "$rc" "$out"

# NVIDIA reachable again: the package's configure step now succeeds; setup.sh finishes it.
printf '#!/bin/sh\nexit 0\n' >/var/lib/dpkg/info/nvidia-cudnn.postinst
out=$(SHARD_GPU=1 bash "$setup" 2>&1)
rc=$?
check "run again, it finishes the half-configured package (exit $rc): $out" \
    bash -c '[[ $1 -eq 0 && $2 == *"finishing packages a previous install left half-configured"* && $2 == *"already installed"* ]]' _ "$rc" "$out"
status=$(dpkg-query -W -f='${Status}' nvidia-cudnn)
check "nvidia-cudnn is installed: $status" test "$status" == "install ok installed"

# cuDNN's library gone (the package installed, the files removed): setup.sh says so and stops.
lib=$(/sbin/ldconfig -p | awk '/libcudnn\.so\.9 / {print $NF; exit}')
if [[ -n $lib ]]; then
    mv "$lib" "$work/libcudnn.so.9" && /sbin/ldconfig
    out=$(SHARD_GPU=1 bash "$setup" 2>&1)
    rc=$?
    mv "$work/libcudnn.so.9" "$lib" && /sbin/ldconfig
    check "no libcudnn: setup.sh stops and says how to reinstall it (exit $rc): $out" \
        bash -c '[[ $1 -ne 0 && $2 == *"no libcudnn is in the linker cache"* && $2 == *"--reinstall nvidia-cudnn"* ]]' _ "$rc" "$out"
else
    check "the root has a libcudnn.so.9 in the linker cache" false
fi
echo "tst_setup_cudnn: $failures failure(s)"
exit $((failures > 0))
