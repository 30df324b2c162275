# Shared by the engine benchmark scripts (bench/dist/run_bench.sh, bench/plan/measure_memory.sh);
# source it, it runs nothing by itself. Every function reports failure through set -e.

# bench_setup NAME DEFAULT_STEPS [BUILD_DIR] [PRESET] [STEPS]: the scripts' common arguments.
# Sets build, preset, steps, worker (shard-worker), predict (plan_predict) and out (a fresh
# temporary directory named after NAME).
bench_setup() {
    local name=$1 default_steps=$2 root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    build=${3:-$root/build/release}
    preset=${4:-tiny-15m}
    steps=${5:-$default_steps}
    worker=$build/engine/worker/shard-worker
    predict=$build/bench/dist/plan_predict
    out=$(mktemp -d "/tmp/shard-bench-$name-XXXXXX")
}

# bench_model_and_data ROWS: $out/model (preset $preset, seed 1) and $out/data.jsonl, ROWS records
# of 128 random token ids below the model's vocabulary size (seeded, the same every run).
bench_model_and_data() {
    "$worker" init-model --preset "$preset" --out "$out/model" --seed 1 >/dev/null 2>&1
    python3 - "$out" "$1" <<'PY'
import json, random, sys
out, rows = sys.argv[1], int(sys.argv[2])
vocab = json.load(open(f"{out}/model/config.json"))["vocab_size"]
r = random.Random(0)
with open(f"{out}/data.jsonl", "w") as f:
    for _ in range(rows):
        f.write(json.dumps({"input_ids": [r.randrange(vocab) for _ in range(128)]}) + "\n")
PY
}

# bench_train NAME RANKS TRAIN_ARGS...: one training run into $out/NAME (stderr in
# $out/NAME.err, stdout dropped); more than one rank runs through `shard-worker launch`.
bench_train() {
    local name=$1 ranks=$2
    shift 2
    if (( ranks == 1 )); then
        "$worker" train "$@" --out "$out/$name" >/dev/null 2>"$out/$name.err"
    else
        "$worker" launch --nproc-per-node "$ranks" -- train "$@" --nproc-per-node "$ranks" \
            --out "$out/$name" >/dev/null 2>"$out/$name.err"
    fi
}

# bench_prompt_of N: a prompt of exactly N tokens on stdout: N-1 words after BOS ("a" is one
# token in every tokenizer the generation benchmarks use).
bench_prompt_of() {
    python3 -c "import sys; print(' '.join(['a'] * (int(sys.argv[1]) - 1)), end='')" "$1"
}
