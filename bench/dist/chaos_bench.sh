#!/bin/sh
# Chaos benchmark: tests/dist/tst_chaos over many seeds (one fault each: SIGKILL or SIGSTOP of a
# rank, SIGKILL of the launcher, a full tmpfs, a kill during a checkpoint write, SIGUSR1 to the
# launcher as a preemption), each followed
# by `--resume auto` and a bit-exact comparison with an uninterrupted run. Run as root (tmpfs).
# Usage: bench/dist/chaos_bench.sh [BUILD_DIR] [SEEDS]   (SEEDS like 0-39; the last line of the
# output is the count that goes into BENCHMARKS.md)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
seeds=${2:-0-39}
SHARD_CHAOS_SEEDS=$seeds SHARD_WORKER=$build/engine/worker/shard-worker OMP_NUM_THREADS=1 \
    "$build/tests/dist/tst_chaos"
