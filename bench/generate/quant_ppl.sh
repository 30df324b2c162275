#!/bin/bash
# Quality of the GGUF quantised types on a trained model whose rows are whole k-quant
# super-blocks (issue 34): llama.cpp's perplexity of held-out text under the f32, f16, q8_0, q6_k
# and q4_k_m files `shard-worker export --format gguf` writes, and their sizes.
#
# The model: stories260K's rows (64, 172 values) are not whole 256-value blocks, so its q4_k_m
# is mostly the q5_0 fallback. So a 256-wide Llama (4 layers, intermediate 768, stories260K's
# tokenizer) is trained here on stories stories260K writes (sampled, temperature 1): a
# TinyStories-like distribution it learns in a few minutes on a CPU. Held-out text: stories
# sampled with other seeds. Perplexity = exp of the mean negative log-likelihood llama.cpp
# (node-llama-cpp's prebuilt CPU build, tests/ckpt/reference_gguf.mjs) gives each token after
# the first, per story, averaged over the tokens of all held-out stories.
# usage: bench/generate/quant_ppl.sh [BUILD_DIR] [STEPS]   (prints a Markdown table)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common.sh"
bench_setup quant-ppl 400 "${1:-}" tiny-15m "${2:-}"
trap 'rc=$?; if ((rc)); then echo "quant_ppl: failed (rc $rc); files kept in $out" >&2; else rm -rf "$out"; fi' EXIT
root=$(cd "$here/../.." && pwd)
npm=$root/third_party/npm
stories=$root/../shared/models/stories260k
[[ -f $npm/node_modules/node-llama-cpp/dist/index.js ]] \
    || { echo "node-llama-cpp is not under $npm: run scripts/fetch-fixtures.sh (Node.js >= 20)" >&2; exit 1; }
[[ -f $stories/model.safetensors ]] || { echo "$stories is absent" >&2; exit 1; }

# Stories: 400 for training (BENCH_STORIES), 12 held out (other seeds), 240 new tokens each
# after BOS.
story() { # SEED -> one line of JSON {"text": ...}
    "$worker" generate --model "$stories" --max-new-tokens 240 --temperature 1 --seed "$1" \
        --threads 1 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(json.dumps({"text": next(r["text"] for r in rows if r.get("type") == "summary")}))'
}
export -f story; export worker stories
mkdir -p "$out/stories"
nstories=${BENCH_STORIES:-400}
seq 1 "$nstories" | xargs -P 2 -I{} bash -c 'story {} >"'"$out"'/stories/{}.json"'
seq 100001 100012 | xargs -P 2 -I{} bash -c 'story {} >"'"$out"'/stories/{}.json"'
for s in $(seq 1 "$nstories"); do cat "$out/stories/$s.json"; done >"$out/train.jsonl"
for s in $(seq 100001 100012); do cat "$out/stories/$s.json"; done >"$out/heldout.jsonl"

mkdir -p "$out/config"
cat >"$out/config/config.json" <<'JSON'
{"model_type": "llama", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 512,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
JSON
"$worker" init-model --preset "$out/config" --out "$out/init" --seed 1 --tokenizer "$stories" \
    >/dev/null 2>&1
start=$(date +%s)
"$worker" train --model "$out/init" --data "$out/train.jsonl" --steps "$steps" --micro-batch 8 \
    --seq-len 256 --lr 3e-3 --warmup 20 --packing --no-tensorboard --out "$out/run" \
    >/dev/null 2>"$out/train.err" || { tail -5 "$out/train.err" >&2; exit 1; }
trained=$(( $(date +%s) - start ))
ln -s "$out/run/model" "$out/model" # the run's final weights, as a Hugging Face folder
loss=$(python3 -c "
import json
rows = [json.loads(l) for l in open('$out/run/metrics.jsonl')]
rows = [r for r in rows if r.get('loss') is not None]
print(f\"{rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}\")")

for t in f32 f16 q8_0 q6_k q4_k_m; do
    "$worker" export --format gguf --model "$out/model" --out "$out/m-$t.gguf" --type "$t" \
        2>"$out/export-$t.log" >/dev/null || { tail -5 "$out/export-$t.log" >&2; exit 1; }
done
# The held-out stories as token ids (BOS first), one JSON file per story.
n=0
while IFS= read -r line; do
    n=$((n + 1))
    python3 -c 'import json,sys; print(json.loads(sys.argv[1])["text"], end="")' "$line" \
        >"$out/h$n.txt"
    "$worker" tokenize --tokenizer "$stories" --text-file "$out/h$n.txt" --json \
        | python3 -c "import json,sys; print(json.dumps({'score_ids': json.load(sys.stdin)['ids']}))" \
            >"$out/h$n.json"
done <"$out/heldout.jsonl"

echo "Trained $steps steps (micro-batch 8 x 256, packed) in ${trained} s, loss $loss;" \
    "perplexity of $n held-out stories ($(date -u +%H:%M) UTC)"
echo
echo "| type | file MiB | bits / weight (matrices) | perplexity | vs f16 | tensor types |"
echo "|---|---:|---:|---:|---:|---|"
declare -A ppl
for t in f32 f16 q8_0 q6_k q4_k_m; do
    sum=0; count=0
    for ((i = 1; i <= n; i++)); do
        read -r s c < <(node "$root/tests/ckpt/reference_gguf.mjs" "$npm" "$out/m-$t.gguf" \
            "$out/h$i.json" | python3 -c "import json,sys; o=json.load(sys.stdin); print(o['nll']*o['scored'], o['scored'])")
        sum=$(python3 -c "print($sum + $s)"); count=$((count + c))
    done
    ppl[$t]=$(python3 -c "import math; print(math.exp($sum / $count))")
done
for t in f32 f16 q8_0 q6_k q4_k_m; do
    bytes=$(stat -c %s "$out/m-$t.gguf")
    types=$(grep -o 'tensor types: .*' "$out/export-$t.log" | sed 's/tensor types: //')
    python3 - "$t" "$bytes" "${ppl[$t]}" "${ppl[f16]}" "$types" "$out/model" <<'PY'
import json, sys
t, size, p, f16, types, model = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
c = json.load(open(f"{model}/config.json"))
h, L, V, I = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
params = L * (4 * h * h + 3 * h * I) + 2 * V * h
norms = (2 * L + 1) * h * 4
bits = (size - norms) * 8 / params  # header and norms are small; counted in the file size
print(f"| {t} | {size / 1048576:.2f} | {bits:.2f} | {p:.4f} | {100 * (p / f16 - 1):+.2f}% | {types} |")
PY
done
