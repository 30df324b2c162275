#!/usr/bin/env bash
# The preference-task benchmark (BENCHMARKS.md, "Preference tuning"), through shard-worker as a
# user runs it: tiny-1m fine-tuned on the copy demo task (supervised, 200 steps), then its own
# wrong answers on 8000 training questions become preference pairs (eval-demo --pairs-out: the
# right answer chosen, the model's rejected) and the model is tuned on them for 1000 steps with
# DPO (full; with the chosen answers' NLL added, full and LoRA), ORPO, and supervised on the
# chosen answers alone as the control. Reports the held-out reward accuracy (5% of the pairs) and
# the greedy accuracy on 1000 held-out questions (seed 1000) of each. About 40 minutes on 2 cores.
#   bench/preference/preference_task.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build/release}
worker=$build/engine/worker/shard-worker
out=$(mktemp -d /tmp/shard-bench-preference-XXXXXX)
common=(--seq-len 64 --threads 2 --seed 1 --log-every 10)

"$worker" init-model --preset tiny-1m --out "$out/init" --seed 1 >/dev/null 2>&1
"$worker" make-data --task copy --count 4000 --seed 1 --out "$out/sft.jsonl" 2>/dev/null
"$worker" train --model "$out/init" --data "$out/sft.jsonl" --out "$out/base" --steps 200 \
    --micro-batch 16 --lr 3e-3 "${common[@]}" >/dev/null 2>&1
"$worker" eval-demo --model "$out/base/model" --task copy --count 8000 --seed 7 \
    --pairs-out "$out/pairs.jsonl" >/dev/null 2>&1
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/chosen.jsonl", "w") as f:
    for line in open(f"{out}/pairs.jsonl"):
        p = json.loads(line)
        f.write(json.dumps({"messages": p["prompt"] + p["chosen"]}) + "\n")
PY

accuracy() {
    "$worker" eval-demo --model "$1" --task copy --count 1000 --seed 1000 --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["accuracy"])'
}
echo "base (supervised, 200 steps): greedy accuracy $(accuracy "$out/base/model");" \
    "$(wc -l <"$out/pairs.jsonl") pairs from its wrong answers on 8000 training questions"
tune=(--steps 1000 --micro-batch 8 --schedule constant "${common[@]}")
"$worker" train --model "$out/base/model" --data "$out/chosen.jsonl" --out "$out/control" \
    --lr 1e-4 "${tune[@]}" >/dev/null 2>&1
echo "control, supervised on the chosen answers: greedy accuracy $(accuracy "$out/control/model")"
lora=(--method lora --lora-rank 16 --lora-targets q,k,v,o,gate,up,down)
for how in "dpo-full|--objective dpo --dpo-beta 0.1 --lr 1e-4" \
    "dpo+nll-full|--objective dpo --dpo-beta 0.1 --dpo-nll-weight 5 --lr 1e-4" \
    "dpo+nll-lora|--objective dpo --dpo-beta 0.1 --dpo-nll-weight 5 --lr 1e-3 ${lora[*]}" \
    "orpo-full|--objective orpo --orpo-lambda 0.5 --lr 1e-4"; do
    name=${how%%|*}
    # shellcheck disable=SC2086
    "$worker" train --model "$out/base/model" --data "$out/pairs.jsonl" --out "$out/$name" \
        --eval-fraction 0.05 --eval-every 1000 ${how#*|} "${tune[@]}" >/dev/null 2>&1
    python3 - "$out/$name" "$name" "$(accuracy "$out/$name/model")" <<'PY'
import json, sys
run, name, acc = sys.argv[1:]
recs = [json.loads(l) for l in open(run + "/metrics.jsonl")]
s = [r["scalars"] for r in recs]
train = sum(x["rewards/accuracies"] for x in s[-3:]) / 3
print(f"{name}: greedy accuracy {acc}; reward accuracy train {train:.3f} (last 3 records), "
      f"held-out {s[-1]['eval/rewards/accuracies']:.3f}; chosen log-prob "
      f"{s[0]['logps/chosen']:.2f} -> {s[-1]['logps/chosen']:.2f}, rejected "
      f"{s[0]['logps/rejected']:.2f} -> {s[-1]['logps/rejected']:.2f}")
PY
done
echo "runs in $out"
