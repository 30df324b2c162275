#!/bin/bash
# Generation speed against llama.cpp on the same weights (issue 34): each model is exported with
# `shard-worker export --format gguf`, then `shard-worker generate` and llama.cpp
# (node-llama-cpp's prebuilt CPU build, fetched by scripts/fetch-fixtures.sh) take the same prompt
# ids and generate the same number of tokens greedily (EOS ignored), alternating, on 1 and 2
# threads; medians of ROUNDS. Engine fp32 against llama.cpp f32, engine bf16 against llama.cpp
# bf16 and f16. Decode is also set against the memory-bandwidth limit: the weights' bytes read
# per token over this machine's measured copy bandwidth. The engine also runs with
# SHARD_MATVEC=aten (every product through ATen's GEMM, as before its decode matrix-vector
# product) in the same rounds.
# usage: bench/generate/vs_llamacpp.sh [BUILD_DIR] [ROUNDS]   (prints a Markdown table)
# Env: BENCH_1B=1 adds a ~1.2B model (llama-3.2-1b preset, random weights); TINY100M_NEW_TOKENS.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup generate-llamacpp 0 "${1:-}"
rounds=${2:-3}
trap 'rm -rf "$out"' EXIT
root=$(cd "$here/../.." && pwd)
npm=$root/third_party/npm
[[ -f $npm/node_modules/node-llama-cpp/dist/index.js ]] \
    || { echo "node-llama-cpp is not under $npm: run scripts/fetch-fixtures.sh (Node.js >= 20)" >&2; exit 1; }
stories=$root/../shared/models/stories260k
results=${BENCH_RESULTS_JSONL:-$out/results.jsonl}
: >"$results"
"$worker" init-model --preset tiny-100m --out "$out/tiny-100m" --seed 1 >/dev/null 2>&1
models=("tiny-100m $out/tiny-100m 64 ${TINY100M_NEW_TOKENS:-32}")
[[ -f $stories/model.safetensors ]] && models=("stories260k $stories 64 256" "${models[@]}")
if [[ ${BENCH_1B:-0} == 1 ]]; then
    "$worker" init-model --preset llama-3.2-1b --out "$out/llama-1b" --seed 1 >/dev/null 2>&1
    models+=("llama-3.2-1b $out/llama-1b 32 8")
fi
# Copy bandwidth (GB/s counting bytes read and written): a memcpy between two preallocated,
# already touched 256 MiB buffers, one thread, the best of 7.
bw=$(python3 - <<'PY'
import time
a = bytearray(256 << 20); b = bytearray(256 << 20); b[:] = a; best = 0
for _ in range(7):
    t = time.perf_counter(); b[:] = a; dt = time.perf_counter() - t
    best = max(best, 2 * len(a) / dt / 1e9)
print(f"{best:.2f}")
PY
)
for m in "${models[@]}"; do
    read -r name dir plen new <<<"$m"
    bench_prompt_of "$plen" >"$out/prompt.txt"
    "$worker" tokenize --tokenizer "$dir" --text-file "$out/prompt.txt" --json \
        | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['ids']))" >"$out/ids.json"
    for t in f32 bf16 f16; do
        "$worker" export --format gguf --model "$dir" --out "$out/$name-$t.gguf" --type "$t" \
            >/dev/null 2>&1
    done
    params=$(python3 -c "
import json; c = json.load(open('$dir/config.json'))
h, L, V, I = c['hidden_size'], c['num_hidden_layers'], c['vocab_size'], c['intermediate_size']
kv = c.get('num_key_value_heads', c['num_attention_heads']) * c.get('head_dim', h // c['num_attention_heads'])
print(L * (2 * h * h + 2 * h * kv + 3 * h * I) + V * h * (1 if c.get('tie_word_embeddings') else 2))")
    for threads in 1 2; do
        for ((r = 0; r < rounds; r++)); do
            for pair in "fp32 f32" "bf16 bf16" "bf16 f16"; do
                read -r dtype gtype <<<"$pair"
                if [[ $gtype != f16 ]]; then
                    # The engine as it decodes (its matrix-vector product), and with every
                    # product through ATen's GEMM (SHARD_MATVEC=aten: the engine before it).
                    for impl in engine engine-aten; do
                        mv=default; [[ $impl == engine-aten ]] && mv=aten
                        SHARD_MATVEC=$mv "$worker" generate --model "$dir" \
                            --prompt-file "$out/prompt.txt" --ignore-eos --max-new-tokens "$new" \
                            --dtype "$dtype" --threads "$threads" 2>/dev/null \
                            | tail -n 1 | python3 -c "
import json, sys
s = json.load(sys.stdin)
print(json.dumps({'model': '$name', 'impl': '$impl', 'type': '$dtype', 'threads': $threads,
    'round': $r, 'params': $params, 'prompt_tokens': s['prompt_tokens'], 'tokens': s['tokens'],
    'prefill_tokens_per_sec': s['prefill_tokens_per_sec'],
    'decode_tokens_per_sec': s['decode_tokens_per_sec']}))" >>"$results"
                    done
                fi
                node "$here/llamacpp_generate.mjs" "$npm" "$out/$name-$gtype.gguf" "$out/ids.json" \
                    "$new" "$threads" | python3 -c "
import json, sys
s = json.load(sys.stdin)
s.update({'model': '$name', 'type': '$gtype', 'threads': $threads, 'round': $r, 'params': $params})
print(json.dumps(s))" >>"$results"
            done
        done
    done
done
python3 - "$results" "$rounds" "$bw" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bw = float(sys.argv[3])
print(f"{sys.argv[2]} alternating rounds, medians; copy bandwidth {bw:.1f} GB/s (one thread)\n")
print("| model | threads | engine | llama.cpp | prompt / new | prefill tok/s engine | prefill tok/s llama.cpp | decode tok/s engine | decode tok/s engine, ATen GEMM | decode tok/s llama.cpp | **decode engine / llama.cpp** | engine decode: weights GB/s (of copy bw) |")
print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
def med(model, impl, typ, threads, field):
    sel = [r[field] for r in rows if (r["model"], r["impl"], r["type"], r["threads"]) == (model, impl, typ, threads)]
    return statistics.median(sel) if sel else None
seen = []
for r in rows:
    k = (r["model"], r["threads"])
    if k not in seen:
        seen.append(k)
for model, threads in seen:
    one = next(r for r in rows if r["model"] == model)
    for etype, ltype in (("fp32", "f32"), ("bf16", "bf16"), ("bf16", "f16")):
        ep, lp = med(model, "engine", etype, threads, "prefill_tokens_per_sec"), med(model, "llama.cpp", ltype, threads, "prefill_tokens_per_sec")
        ed, ld = med(model, "engine", etype, threads, "decode_tokens_per_sec"), med(model, "llama.cpp", ltype, threads, "decode_tokens_per_sec")
        ea = med(model, "engine-aten", etype, threads, "decode_tokens_per_sec")
        if ed is None or ld is None:
            continue
        wbytes = one["params"] * (4 if etype == "fp32" else 2)
        print(f"| {model} | {threads} | {etype} | {ltype} | {one['prompt_tokens']} / {one['tokens']} | {ep:.4g} | {lp:.4g} | {ed:.4g} | {ea:.4g} | {ld:.4g} | "
              f"**{ed / ld:.2f}** | {ed * wbytes / 1e9:.1f} ({100 * ed * wbytes / 1e9 / bw:.0f}%) |")
PY
