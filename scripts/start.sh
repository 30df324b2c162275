#!/usr/bin/env bash
# The main job: set up, build, then open the studio (or, with no display, run the headless demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CCACHE_BASEDIR="$PWD"
# The GPU build (setup.sh --gpu: Debian 13 with an NVIDIA driver, or SHARD_GPU=1) must find CUDA.
cuda=OFF
if bash scripts/setup.sh --gpu; then cuda=ON; fi
cmake --preset release -DSHARD_REQUIRE_CUDA=$cuda >/dev/null
# Only what the main job runs; scripts/test.sh builds the rest (tests, benchmarks).
cmake --build --preset release --target shard shard-worker shard-studio
bin=build/release
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x $bin/app/studio/shard-studio ]]; then
    exec $bin/app/studio/shard-studio
elif $bin/app/shard demo --help >/dev/null 2>&1; then
    exec $bin/app/shard demo
else
    exec $bin/app/shard plan --model llama-2-7b --gpus 8 --strategy zero3 --precision bf16-mixed \
        --checkpointing full --micro-batch 2 --seq-len 4096
fi
