#!/usr/bin/env bash
# Engine vs eager PyTorch 1.13 training throughput on the 112M Llama of issue 17 (hidden 768, 10
# layers, 12 heads / 4 KV heads, vocabulary 32000, intermediate 2048), batch 4 x 256, AdamW, in one
# run: alternating rounds of the product path, `shard-worker train` at one rank (fp32, bf16-mixed;
# what `shard run`, the studio and the demo start: the primary figures), the in-process harness
# bench_engine_train (fp32, bf16-mixed; a secondary row), the engine as it was before the speed
# work (fp32; SHARD_BF16_GEMM=native SHARD_ALLOC_CACHE_MB=0 restore its ATen bf16 GEMM and plain
# allocator) and eager PyTorch (fp32, bf16 autocast), so load from other processes hits all alike;
# then an op profile of each, and zero3 vs ddp at 2 ranks and zero3 at 2 ranks vs 1 rank on the
# same total threads. Writes bench/engine/RESULTS.md.
# usage: bench/engine/run_bench.sh [BUILD_DIR] [THREADS] [ROUNDS]
# On a CPU without AVX-512, eager bf16 multiplies with ATen's scalar bf16 loop (~1-4 GFLOP/s: about
# 10 minutes per 4 x 256 step), so it runs only once, on batch 1 x 256, next to the engine on the same
# batch (engine-bf16-b1); BENCH_BEFORE_BF16=1 adds the engine's old bf16 path there (as slow).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/release}
threads=${2:-2}
rounds=${3:-2}
engine=$build/bench/engine/bench_engine_train
worker=$build/engine/worker/shard-worker
out=$(mktemp -d /tmp/shard-bench-engine-XXXXXX)
trap 'rm -rf "$out"' EXIT
results=$out/results.jsonl
: > "$results"
shape=(--batch 4 --seq 256 --threads "$threads")
model=(--preset tiny-100m --layers 10 --vocab 32000)
steps=3
"$engine" "${model[@]}" "${shape[@]}" --steps "$steps" --model-out "$out/m112" 2>/dev/null
echo "{\"load_start\": \"$(uptime)\"}" > "$out/load.json"

tag() { sed "s/^{/{\"round\":$1,\"variant\":\"$2\",/" >> "$results"; }
eng() { # round variant precision [env...]
    local r=$1 v=$2 p=$3
    shift 3
    env "$@" "$engine" "${model[@]}" "${shape[@]}" --steps $steps --precision "$p" 2>/dev/null | tag "$r" "$v"
}
# The product path: `shard-worker train` at one rank with its default strategy; the first step is
# excluded, like the harness's; tokens per CPU-second from the records' cpu_time (rank 0's
# process CPU seconds), the whole process (loading included) from /usr/bin/time.
wrk() { # round variant precision [extra]
    local r=$1 v=$2 p=$3
    shift 3
    rm -rf "$out/wrk"
    /usr/bin/time -f '%e %U %S' -o "$out/wrk.time" "$worker" train --model "$out/m112" \
        --data "$out/m112/data.jsonl" --steps $((steps + 1)) --seq-len 256 --micro-batch 4 \
        --threads "$threads" --precision "$p" --lr 1e-4 --no-shuffle --log-every 1 \
        --out "$out/wrk" "$@" >/dev/null 2>"$out/wrk.err"
    python3 - "$out/wrk/metrics.jsonl" "$out/wrk.time" "$p" <<'PY' | tag "$r" "$v"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
wall, user, sys_ = (float(x) for x in open(sys.argv[2]).read().split()[-3:])
a, b = recs[0], recs[-1]
tokens = b["tokens"] - a["tokens"]  # a record's tokens count the run's tokens so far
print(json.dumps({"impl": "worker", "precision": sys.argv[3], "steps": len(recs) - 1,
                  "tokens_per_sec": tokens / (b["wall_time"] - a["wall_time"]),
                  "cpu_tokens_per_sec": tokens / (b["cpu_time"] - a["cpu_time"]),
                  "host_reads_per_step": b.get("host_reads", -1),
                  "process_wall_s": wall, "process_cpu_s": user + sys_}))
PY
}
eager() { # round variant precision steps [extra]
    local r=$1 v=$2 p=$3 s=$4
    shift 4
    /usr/bin/python3 "$here/bench_eager.py" --config "$out/m112/config.json" "${shape[@]}" \
        --steps "$s" --precision "$p" "$@" | tag "$r" "$v"
}
b1=(--batch 1 --seq 256 --threads "$threads")
# Eager PyTorch 2.6 (python3-torch in the Debian 13 root of scripts/ci-roots.sh) in the same
# rounds, when this runs as root and that root is made (`scripts/ci-roots.sh prepare trixie-cpu`);
# BENCH_EAGER26=0 leaves it out. The model's config goes in through the command line (the root
# sees only the repository, read-only).
repo=$(cd "$here/../.." && pwd)
eager26_on=0
if [[ ${BENCH_EAGER26:-1} == 1 && $(id -u) == 0 ]] \
    && compgen -G "${SHARD_CI_CACHE:-/var/cache/shard-studio-ci}/trixie-cpu-*.tar.zst" >/dev/null; then
    eager26_on=1
fi
eager26() { # round variant precision steps
    local cfg
    cfg=$(base64 -w0 "$out/m112/config.json")
    bash "$repo/scripts/ci-roots.sh" run trixie-cpu "echo $cfg | base64 -d >/tmp/config.json &&
        python3 bench/engine/bench_eager.py --config /tmp/config.json ${shape[*]} --steps $4 \
        --precision $3" 2>>"$out/eager26.err" | tail -1 | tag "$1" "$2"
}
# With AVX-512 LibTorch 1.13 multiplies bf16 through oneDNN: eager bf16 then runs at 4 x 256 in
# the rounds too, like for like with the engine.
eager_bf16=0
grep -qw avx512bw /proc/cpuinfo && eager_bf16=1
for ((r = 0; r < rounds; ++r)); do
    wrk $r worker-fp32 fp32
    eng $r engine-fp32 fp32
    eager $r eager-fp32 fp32 $steps
    ((eager26_on)) && eager26 $r eager26-fp32 fp32 $steps
    wrk $r worker-bf16 bf16-mixed
    eng $r engine-bf16 bf16-mixed
    ((eager_bf16)) && eager $r eager-bf16 bf16-mixed $steps
    ((eager26_on)) && eager26 $r eager26-bf16 bf16-mixed $steps
    eng $r before-fp32 fp32 SHARD_BF16_GEMM=native SHARD_ALLOC_CACHE_MB=0
done
# bf16 at batch 1 x 256: the engine (3 steps, the first excluded), eager (1 step).
"$engine" "${model[@]}" "${b1[@]}" --steps $steps --precision bf16-mixed 2>/dev/null \
    | tag 0 engine-bf16-b1
/usr/bin/python3 "$here/bench_eager.py" --config "$out/m112/config.json" "${b1[@]}" --steps 1 \
    --precision bf16-mixed | tag 0 eager-bf16-b1
if [[ ${BENCH_BEFORE_BF16:-0} == 1 ]]; then
    SHARD_BF16_GEMM=native SHARD_ALLOC_CACHE_MB=0 "$engine" "${model[@]}" "${b1[@]}" --steps 2 \
        --precision bf16-mixed 2>/dev/null | tag 0 before-bf16-b1
fi
# Op profiles (one extra profiled step each).
"$engine" "${model[@]}" "${shape[@]}" --steps 1 --profile-steps 1 2>/dev/null | tag 0 prof-engine-fp32
"$engine" "${model[@]}" "${shape[@]}" --steps 1 --profile-steps 1 --precision bf16-mixed \
    2>/dev/null | tag 0 prof-engine-bf16
SHARD_BF16_GEMM=native SHARD_ALLOC_CACHE_MB=0 "$engine" "${model[@]}" "${shape[@]}" --steps 1 \
    --profile-steps 1 2>/dev/null | tag 0 prof-before-fp32
eager 0 prof-eager-fp32 fp32 1 --profile-steps 1

# Ranks: global batch 4 x 256 per step, $threads threads in total; the median of the steps after
# the first (three of them).
train() { # name ranks strategy precision
    local name=$1 ranks=$2 strategy=$3 precision=$4 t=$((threads / $2))
    ((t < 1)) && t=1
    local args=(train --model "$out/m112" --data "$out/m112/data.jsonl" --steps $((steps + 1))
        --seq-len 256 --micro-batch $((4 / ranks)) --strategy "$strategy" --threads $t
        --precision "$precision" --lr 1e-4 --no-shuffle --log-every 1 --out "$out/$name")
    if ((ranks == 1)); then
        "$worker" "${args[@]}" >/dev/null 2>"$out/$name.err"
    else
        "$worker" launch --nproc-per-node "$ranks" -- "${args[@]}" --nproc-per-node "$ranks" \
            >/dev/null 2>"$out/$name.err"
    fi
    python3 - "$out/$name/metrics.jsonl" "$name" "$ranks" "$strategy" "$precision" >> "$results" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tps = [r["tokens_per_sec"] for r in recs[1:]] or [recs[0]["tokens_per_sec"]]
print(json.dumps({"variant": "ranks", "name": sys.argv[2], "ranks": int(sys.argv[3]),
                  "strategy": sys.argv[4], "precision": sys.argv[5],
                  "tokens_per_sec": statistics.median(tps), "all": tps}))
PY
}
for p in fp32 bf16-mixed; do
    train "ddp-2-$p" 2 ddp $p
    train "zero3-2-$p" 2 zero3 $p
    train "zero3-1-$p" 1 zero3 $p
done
echo "{\"load_end\": \"$(uptime)\"}" >> "$out/load.json"
cp "$results" "${BENCH_RESULTS_JSONL:-/dev/null}" 2>/dev/null || true
/usr/bin/python3 "$here/summarize.py" "$results" "$out/load.json" "$here/RESULTS.md" "$threads" "$rounds"
