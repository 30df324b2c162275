#!/usr/bin/env bash
# The preference-task benchmark (BENCHMARKS.md, "Preference tuning"): a tiny model fine-tuned on
# the arithmetic demo task (supervised), then tuned with DPO and ORPO on pairs where the right
# answer is chosen over a wrong one (make-data --format preference). Reports the reward accuracy
# on held-out pairs and the greedy accuracy on 200 held-out questions (eval-demo) of the base and
# of each tuned model, all through shard-worker as a user runs it.
#   bench/preference/arith_dpo.sh [BUILD_DIR] [SFT_STEPS] [PREF_STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build/release}
sft_steps=${2:-150}
pref_steps=${3:-120}
worker=$build/engine/worker/shard-worker
out=$(mktemp -d /tmp/shard-bench-preference-XXXXXX)
common=(--seq-len 64 --threads 2 --seed 1 --log-every 10)

"$worker" init-model --preset tiny-1m --out "$out/init" --seed 1 >/dev/null 2>&1
"$worker" make-data --task arithmetic --count 2000 --seed 1 --out "$out/sft.jsonl" 2>/dev/null
"$worker" make-data --task arithmetic --format preference --count 2000 --seed 7 \
    --out "$out/pairs.jsonl" 2>/dev/null
"$worker" train --model "$out/init" --data "$out/sft.jsonl" --out "$out/sft" \
    --steps "$sft_steps" --micro-batch 8 --lr 3e-3 "${common[@]}" >/dev/null 2>&1

accuracy() { # MODEL_DIR -> greedy accuracy on 200 held-out questions (seed 1000)
    "$worker" eval-demo --model "$1" --task arithmetic --count 200 --seed 1000 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["accuracy"])'
}
summary() { # RUN_DIR -> train reward accuracy (last 3 records), eval reward accuracy, margin
    python3 - "$1" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
s = [r["scalars"] for r in recs]
train = sum(x["rewards/accuracies"] for x in s[-3:]) / 3
ev = [x["eval/rewards/accuracies"] for x in s if "eval/rewards/accuracies" in x]
print(f"train reward accuracy {train:.3f}, held-out reward accuracy {ev[0]:.3f} -> {ev[-1]:.3f}, "
      f"margin {s[-1]['rewards/margins']:.3f}, loss {recs[0]['loss']:.4f} -> {recs[-1]['loss']:.4f}")
PY
}

base=$(accuracy "$out/sft/model")
echo "base (supervised, $sft_steps steps): greedy accuracy $base"
pref=(--data "$out/pairs.jsonl" --steps "$pref_steps" --micro-batch 8 --eval-fraction 0.05
    --eval-every "$pref_steps" --schedule constant "${common[@]}")
for how in "dpo-lora|--objective dpo --dpo-beta 0.5 --method lora --lora-rank 16 --lora-targets q,k,v,o,gate,up,down --lr 5e-3" \
    "dpo-full|--objective dpo --dpo-beta 0.5 --lr 5e-4" \
    "orpo-full|--objective orpo --orpo-lambda 0.5 --lr 5e-4"; do
    name=${how%%|*}
    # shellcheck disable=SC2086
    "$worker" train --model "$out/sft/model" --out "$out/$name" ${how#*|} "${pref[@]}" \
        >/dev/null 2>&1
    echo "$name ($pref_steps steps): greedy accuracy $(accuracy "$out/$name/model"); $(summary "$out/$name")"
done
echo "runs in $out"
