#!/usr/bin/env bash
# Builds the .deb with CPack, installs it with apt into a clean Debian 12 (minbase) root made by
# debootstrap, and runs shard --version, shard plan, shard demo and shard-studio --screenshot
# there. Exit 77 = skipped (not root / no debootstrap / no mirror configured).
set -euo pipefail
build=${1:?usage: deb_install_test.sh BUILD_DIR}
build=$(cd "$build" && pwd)

[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root for debootstrap/chroot"; exit 77; }
command -v debootstrap >/dev/null || { echo "SKIP: debootstrap not installed"; exit 77; }

# The mirror the host's apt already uses (deb822 or one-line format).
mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '/^deb / && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || { echo "SKIP: no Debian mirror configured in /etc/apt"; exit 77; }

work=$(mktemp -d /tmp/shard-deb-test.XXXXXX)
root=$work/root
cleanup() {
    for m in "$root/dev/pts" "$root/dev" "$root/proc" "$root/sys"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    rm -rf "$work"
}
trap cleanup EXIT

echo "== cpack"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
    { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/pkg/*.deb)
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb -f "$deb" Depends

echo "== debootstrap bookworm (minbase)"
cache=/var/cache/shard-studio-test
mkdir -p "$cache"
tarball=$cache/bookworm-minbase.tgz
if [[ ! -s $tarball ]]; then
    debootstrap --variant=minbase --make-tarball="$tarball.part" bookworm "$work/tb" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
    mv "$tarball.part" "$tarball"
fi
debootstrap --variant=minbase --unpack-tarball="$tarball" bookworm "$root" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
for p in gcc g++ cmake qmake6 python3; do
    if chroot "$root" sh -c "command -v $p" >/dev/null 2>&1; then
        echo "FAIL: the clean root unexpectedly has $p"
        exit 1
    fi
done

mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp "$deb" "$root/tmp/shard-studio.deb"

echo "== apt install ./shard-studio.deb"
chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -q && apt-get install -y -q --no-install-recommends /tmp/shard-studio.deb' \
    >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
tail -1 "$work/apt.log"

run() { echo "\$ $*"; chroot "$root" env HOME=/root QT_QPA_PLATFORM=offscreen "$@"; }
run shard --version
run shard-worker --version
run shard plan --model llama-2-7b --gpus 8 --strategy zero3 --precision bf16-mixed \
    --checkpointing full --micro-batch 2 --seq-len 4096
run test -f /usr/share/man/man1/shard.1.gz
run test -f /usr/share/applications/shard-studio.desktop
run test -f /usr/share/shard-studio/demo/copy.jsonl
run shard-studio --screenshot /tmp/plan.png --page plan
run test -s /tmp/plan.png
run shard demo
echo "PASS: installed and ran in a clean Debian 12 root"
