#!/usr/bin/env bash
# The engine built against LibTorch 2.6 next to Debian 13's PyTorch 2.6, in one run on the same
# model, batch and threads: (1) eager PyTorch in fp32 and bf16 autocast vs bench_engine_train,
# alternating rounds; (2) FSDP1 (FULL_SHARD, Gloo) at 2 ranks vs the engine's zero3 at 2 ranks.
# Writes a Markdown section to stdout. Runs in the Debian 13 root (python3-torch 2.6):
#   bash scripts/ci-roots.sh run trixie-cpu 'cmake --preset release -B /build >/dev/null &&
#     cmake --build /build -j2 --target shard-worker bench_engine_train &&
#     bash bench/platform/run_peers.sh /build'
# Usage: bench/platform/run_peers.sh BUILD_DIR [THREADS] [ROUNDS] [DIST_STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup platform 8 "$1" tiny-15m "${4:-8}"
threads=${2:-1}
rounds=${3:-2}
engine=$build/bench/engine/bench_engine_train
results=$out/results.jsonl
: >"$results"

# (1) single process, fp32 and bf16-mixed, tiny-15m 4 x 256
"$worker" init-model --preset "$preset" --out "$out/single" >/dev/null 2>&1
for precision in fp32 bf16-mixed; do
    for ((r = 0; r < rounds; r++)); do
        "$engine" --preset "$preset" --batch 4 --seq 256 --steps 6 --threads "$threads" \
            --precision "$precision" 2>/dev/null >>"$results"
        python3 "$here/../engine/bench_eager.py" --config "$out/single/config.json" --batch 4 \
            --seq 256 --steps 6 --threads "$threads" --precision "$precision" >>"$results"
    done
done

# (2) 2 ranks: engine zero3 vs FSDP1, seq 128, micro-batch 4 per rank, 1 thread per rank
bench_model_and_data 2000
for ((r = 0; r < rounds; r++)); do
    bench_train "zero3-2.$r" 2 --model "$out/model" --data "$out/data.jsonl" --steps "$steps" \
        --seq-len 128 --micro-batch 4 --lr 1e-3 --seed 3 --no-shuffle --log-every 1 \
        --strategy zero3 --threads 1
    port=$((29500 + RANDOM % 1000))
    pids=()
    for rank in 0 1; do
        RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port USE_LIBUV=0 \
            python3 "$here/fsdp1_peer.py" --config "$out/model/config.json" \
            --data "$out/data.jsonl" --micro-batch 4 --seq 128 --steps "$steps" --threads 1 \
            >"$out/fsdp1.$r.$rank.out" 2>"$out/fsdp1.$r.$rank.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { cat "$out"/fsdp1.$r.*.err >&2; exit 1; }; done
    cat "$out/fsdp1.$r.0.out" >>"$results"
done
python3 "$here/summarize_peers.py" "$out" "$results" "$threads" "$rounds" "$steps"
rm -rf "$out"
