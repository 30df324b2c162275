#!/usr/bin/env bash
# The ZeRO table for a 7B model on 8 x A100 80GB, from DeepSpeed config files: the configs the
# planner exports for ZeRO stages 0-3 and the DeepSpeed configs other projects wrote
# (../shared/fixtures: axolotl's, transformers' test config), each planned with
# `shard plan --deepspeed`. Columns: the ZeRO paper's model states (2+2+K with K = 12, the
# figures the seeds quote), DeepSpeed's own estimator (estimate_zero2/3_model_states_mem_needs),
# the planner's DeepSpeed accounting (model states, then with activations, buckets and
# overhead) and Shard Studio's engine for the same layout. Prints a Markdown table.
#
#   bench/plan/deepspeed_zero_table.sh [BUILD_DIR]   (default build/release; a few seconds)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
shard=$PWD/$build/app/shard
[[ -x $shard ]] || { echo "deepspeed_zero_table: $shard is not built" >&2; exit 1; }
fixtures=$(cd .. && pwd)/shared/fixtures
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

model=llama-2-7b
common=(--model "$model" --gpus 8 --gpu-memory 80 --seq-len 2048 --micro-batch 1
    --checkpointing full --precision bf16-mixed)
# Configs the planner writes for each stage (no offload), then other projects' configs.
for s in ddp zero1 zero2 zero3; do
    "$shard" plan "${common[@]}" --strategy "$s" --export deepspeed --out "$work/export-$s.json" \
        2>/dev/null
done
configs=("$work/export-ddp.json" "$work/export-zero1.json" "$work/export-zero2.json"
    "$work/export-zero3.json")
if [[ -d $fixtures ]]; then
    configs+=("$fixtures/axolotl-ai-cloud__axolotl/zero1.json"
        "$fixtures/axolotl-ai-cloud__axolotl/zero2.json"
        "$fixtures/axolotl-ai-cloud__axolotl/zero3_bf16_cpuoffload_params.json"
        "$fixtures/axolotl-ai-cloud__axolotl/zero3_bf16_cpuoffload_all.json"
        "$fixtures/huggingface__transformers/ds_config_zero3.json")
else
    echo "deepspeed_zero_table: $fixtures is absent; only the exported configs" >&2
fi

# The ZeRO paper's model states for each strategy (zero-paper accounting).
for s in ddp zero1 zero2 zero3; do
    "$shard" plan "${common[@]}" --strategy "$s" --mode zero-paper --json >"$work/paper-$s.json"
done
i=0
for c in "${configs[@]}"; do
    # --micro-batch / --precision fill the configs' "auto"; explicit values must agree.
    args=(--model "$model" --gpus 8 --gpu-memory 80 --seq-len 2048 --checkpointing full)
    grep -q '"train_micro_batch_size_per_gpu": 1\b' "$c" || args+=(--micro-batch 1)
    "$shard" plan --deepspeed "$c" "${args[@]}" --json >"$work/ds-$i.json"
    echo "$c" >"$work/ds-$i.name"
    i=$((i + 1))
done

/usr/bin/python3 - "$work" "$i" <<'EOF'
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
G = 1e9
def gb(b): return f"{b / G:.1f}"
paper = {}
for s in ("ddp", "zero1", "zero2", "zero3"):
    j = json.load(open(f"{work}/paper-{s}.json"))
    m = j["per_device"]
    paper[s] = m["sharded_params"] + m["grads"] + m["optimizer"]
print("| config | stage, offload | ZeRO paper model states | DeepSpeed's estimator (GPU / host per node) "
      "| planner, DeepSpeed: model states | + activations, buckets, overhead = total | fits 80 GB? "
      "| Shard Studio engine total |")
print("|---|---|---:|---:|---:|---:|:-:|---:|")
for i in range(n):
    name = open(f"{work}/ds-{i}.name").read().strip()
    j = json.load(open(f"{work}/ds-{i}.json"))
    c, d, e = j["config"], j["deepspeed"], j["deepspeed_estimator"]
    ds = c["deepspeed"]
    m = d["per_device"]
    states = m["sharded_params"] + m["gathered_params"] + m["grads"] + m["optimizer"]
    rest = m["activations"] + m["logits"] + m["comm_buffers"] + m["overhead"]
    off = "+".join(k for k, on in (("opt", ds["offload_optimizer"]), ("params", ds["offload_param"])) if on) or "none"
    strat = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}[ds["stage"]]
    short = os.path.basename(name) if not name.startswith(work) else "exported " + strat
    if not name.startswith(work):
        short = name.split("/fixtures/")[-1]
    eng = j.get("engine", {}).get("per_device", {}).get("total")
    print(f"| {short} | {ds['stage']}, {off} | {gb(paper[strat]) if off == 'none' else '-'} "
          f"| {gb(e['gpu_bytes'])} / {gb(e['cpu_bytes_per_node'])} | {gb(states)} "
          f"| {gb(rest)} = {gb(m['total'])} | {'yes' if d['fits'] else 'no'} "
          f"| {gb(eng) if eng else '-'} |")
print()
print("GB = 1e9 bytes, per GPU unless said; llama-2-7b (6.74B parameters), 8 GPUs, micro-batch 1 x "
      "2048 tokens, bf16 (fp16 where the config says), activation checkpointing on.")
EOF
