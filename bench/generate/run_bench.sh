#!/bin/bash
# Generation throughput: `shard-worker generate` (KV cache) vs an eager PyTorch 1.13 generate-style
# loop with a KV cache (eager_generate.py) on the same weights, batch 1, CPU, fp32 and bf16;
# alternating engine / eager rounds in one run, medians. Prefill = prompt tokens per second of the
# prompt's forward; decode = one-token steps per second after it (greedy, EOS ignored).
# usage: bench/generate/run_bench.sh [BUILD_DIR] [THREADS] [ROUNDS]   (prints a Markdown table;
# $BENCH_RESULTS_JSONL keeps the raw records, $TINY100M_NEW_TOKENS sets tiny-100m's decode length)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup generate 0 "${1:-}"
threads=${2:-1}
rounds=${3:-3}
trap 'rm -rf "$out"' EXIT
stories=$here/../../../shared/models/stories260k
results=${BENCH_RESULTS_JSONL:-$out/results.jsonl}
: >"$results"
"$worker" init-model --preset tiny-100m --out "$out/tiny-100m" --seed 1 >/dev/null 2>&1
models=("tiny-100m $out/tiny-100m 64 ${TINY100M_NEW_TOKENS:-16}")
if [[ -f $stories/model.safetensors ]]; then
    models=("stories260k $stories 64 256" "${models[@]}")
else
    echo "stories260k absent ($stories): measuring tiny-100m only" >&2
fi
for m in "${models[@]}"; do
    read -r name dir plen new <<<"$m"
    bench_prompt_of "$plen" >"$out/prompt.txt"
    for dtype in fp32 bf16; do
        for ((r = 0; r < rounds; r++)); do
            "$worker" generate --model "$dir" --prompt-file "$out/prompt.txt" --ignore-eos \
                --max-new-tokens "$new" --dtype "$dtype" --threads "$threads" 2>/dev/null \
                | tail -n 1 | python3 -c "
import json, sys
s = json.load(sys.stdin)
print(json.dumps({'model': '$name', 'impl': 'engine', 'dtype': '$dtype', 'round': $r,
    'prompt_tokens': s['prompt_tokens'], 'tokens': s['tokens'],
    'prefill_tokens_per_sec': s['prefill_tokens_per_sec'],
    'decode_tokens_per_sec': s['decode_tokens_per_sec']}))" >>"$results"
            ptoks=$(tail -n 1 "$results" | python3 -c "import json,sys; print(json.load(sys.stdin)['prompt_tokens'])")
            /usr/bin/python3 "$here/eager_generate.py" --model "$dir" --prompt-tokens "$ptoks" \
                --new-tokens "$new" --dtype "$dtype" --threads "$threads" \
                | sed "s/^{/{\"model\":\"$name\",\"round\":$r,/" >>"$results"
        done
    done
done
python3 - "$results" "$threads" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"threads {sys.argv[2]}, {sys.argv[3]} alternating rounds, medians\n")
print("| model | dtype | prompt | new | engine prefill tok/s | eager prefill tok/s | engine decode tok/s | eager decode tok/s | **decode engine / eager** |")
print("|---|---|---|---|---|---|---|---|---|")
keys = []
for r in rows:
    k = (r["model"], r["dtype"])
    if k not in keys:
        keys.append(k)
for model, dtype in keys:
    med = {}
    for impl in ("engine", "eager"):
        sel = [r for r in rows if (r["model"], r["dtype"], r["impl"]) == (model, dtype, impl)]
        med[impl] = {f: statistics.median(r[f] for r in sel) for f in ("prefill_tokens_per_sec", "decode_tokens_per_sec")}
        n = sel[0]
    e, p = med["engine"], med["eager"]
    print(f"| {model} | {dtype} | {n['prompt_tokens']} | {n['tokens']} | {e['prefill_tokens_per_sec']:.3g} | "
          f"{p['prefill_tokens_per_sec']:.3g} | {e['decode_tokens_per_sec']:.3g} | {p['decode_tokens_per_sec']:.3g} | "
          f"**{e['decode_tokens_per_sec'] / p['decode_tokens_per_sec']:.2f}** |")
print("\nPer round (prefill, decode tok/s):\n")
for r in rows:
    print(f"- {r['model']} {r['dtype']} {r['impl']} round {r['round']}: "
          f"{r['prefill_tokens_per_sec']:.3g}, {r['decode_tokens_per_sec']:.3g}")
PY
