#!/usr/bin/env bash
# Sets up a fresh Debian 12 or 13 machine if needed, builds everything (Release, Ninja, ccache)
# and runs every test through CTest. Extra arguments go to ctest (e.g. -L unit, -R tst_planner).
# With --all-platforms first (what .ci/run does), it then also builds and tests in Debian 13
# roots (scripts/ci-roots.sh): the whole project against LibTorch 2.6 (CPU; labels engine,
# multirank), and against CUDA LibTorch 2.6 as setup.sh installs it with SHARD_GPU=1 (the CUDA
# gate: labels unit, gui and the device fallback, no GPU needed). Needs root for the roots.
set -euo pipefail
cd "$(dirname "$0")/.."
all_platforms=0
if [[ ${1:-} == --all-platforms ]]; then
    all_platforms=1
    shift
fi
# Each phase's end, in seconds since the start (CI's time budget is read from these lines).
phase() { echo "test: $1 at +$SECONDS s"; }
bash scripts/setup.sh
bash scripts/fetch-fixtures.sh
phase "set-up done"

prep_pids=()
if ((all_platforms)); then
    # Making a root mostly waits on the network: overlap it with the host's build.
    mkdir -p build
    for root in trixie-cpu trixie-cuda; do
        bash scripts/ci-roots.sh prepare "$root" >"build/ci-roots-prepare-$root.log" 2>&1 &
        prep_pids+=($!)
    done
fi

export CCACHE_BASEDIR="$PWD" CCACHE_MAXSIZE=5G
# The GPU build (setup.sh --gpu: Debian 13 with an NVIDIA driver, or SHARD_GPU=1) must find CUDA.
cuda=OFF
if bash scripts/setup.sh --gpu; then cuda=ON; fi
cmake --preset release -DSHARD_REQUIRE_CUDA=$cuda >/dev/null
cmake --build --preset release
phase "this machine's build done"
ctest --preset release "$@"
phase "this machine's tests done"

if ((all_platforms)); then
    i=0
    for root in trixie-cpu trixie-cuda; do
        if ! wait "${prep_pids[$i]}"; then
            cat "build/ci-roots-prepare-$root.log" >&2
            echo "test: the Debian 13 root $root could not be made (see above)" >&2
            exit 1
        fi
        i=$((i + 1))
    done
    phase "Debian 13 roots ready"
    echo "test: Debian 13, LibTorch 2.6 (CPU): whole project, labels engine multirank"
    bash scripts/ci-roots.sh cpu-suite
    phase "Debian 13 suite done"
    echo "test: Debian 13, CUDA gate: whole project against CUDA LibTorch 2.6 (NCCL backend), labels unit gui"
    bash scripts/ci-roots.sh cuda-gate
    phase "CUDA build gate done"
fi
