#!/usr/bin/env bash
# Two builds of bench_engine_train side by side, alternating rounds in one run (an A/B of an
# engine change): the same preset, batch, sequence, threads and precision. Prints one JSON line
# per run and, at the end, a Markdown table of median tokens/s and peak memory per build.
# Usage: bench/engine/ab_binaries.sh A_BINARY B_BINARY ROUNDS -- BENCH_ARGS...
#   e.g. bench/engine/ab_binaries.sh /tmp/before build/release/bench/engine/bench_engine_train 3 \
#          -- --preset tiny-100m --layers 10 --vocab 32000 --batch 2 --seq 128 --steps 3
# (each run adds --precision fp32 and --precision bf16-mixed in turn).
set -euo pipefail
a=$1 b=$2 rounds=$3
shift 3
[[ ${1:-} == -- ]] && shift
out=$(mktemp)
for ((r = 0; r < rounds; r++)); do
    for precision in fp32 bf16-mixed; do
        for side in A B; do
            bin=$a
            [[ $side == B ]] && bin=$b
            "$bin" "$@" --precision "$precision" 2>/dev/null |
                python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); j["side"]=sys.argv[1]; print(json.dumps(j))' "$side" |
                tee -a "$out"
        done
    done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| precision | build | tokens/s (median) | spread | peak MiB (median) |")
print("|---|---|---:|---:|---:|")
for prec in ("fp32", "bf16-mixed"):
    med = {}
    for side in ("A", "B"):
        r = [x for x in rows if x["precision"] == prec and x["side"] == side]
        t = [x["tokens_per_sec"] for x in r]
        med[side] = statistics.median(t)
        print("| %s | %s | %.1f | %.1f-%.1f | %.1f |" % (prec, side, med[side], min(t), max(t),
              statistics.median(x["peak_bytes"] for x in r) / 2**20))
    print("| %s | B / A | %.3f | | |" % (prec, med["B"] / med["A"]))
PY
rm -f "$out"
