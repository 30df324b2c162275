#!/bin/sh
# Engine vs eager PyTorch training throughput, side by side in one run (alternating A/B rounds so
# that load from other processes hits both alike), plus achieved FLOP/s vs a large matmul.
# usage: bench/engine/run_bench.sh [BUILD_DIR] [THREADS] [ROUNDS]   (writes bench/engine/RESULTS.md)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/release}
threads=${2:-2}
rounds=${3:-2}
engine=$build/bench/engine/bench_engine_train
worker=$build/engine/worker/shard-worker
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
results=$out/results.jsonl
: > "$results"
for case in "tiny-15m 4 256 6" "tiny-100m 2 256 4"; do
    set -- $case
    preset=$1 batch=$2 seq=$3 steps=$4
    "$worker" init-model --preset "$preset" --out "$out/$preset" >/dev/null 2>&1
    r=0
    while [ $r -lt "$rounds" ]; do
        "$engine" --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" \
            --threads "$threads" 2>/dev/null | sed "s/^{/{\"preset\":\"$preset\",\"round\":$r,/" >> "$results"
        /usr/bin/python3 "$here/bench_eager.py" --config "$out/$preset/config.json" \
            --batch "$batch" --seq "$seq" --steps "$steps" --threads "$threads" \
            | sed "s/^{/{\"preset\":\"$preset\",\"round\":$r,/" >> "$results"
        r=$((r + 1))
    done
done
cp "$results" "${BENCH_RESULTS_JSONL:-/dev/null}" 2>/dev/null || true
/usr/bin/python3 "$here/summarize.py" "$results" "$here/RESULTS.md" "$threads" "$rounds"
