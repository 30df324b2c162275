#!/usr/bin/env bash
# The seeds' layouts for large models, planned (issue 29): "7B on 8 GPUs: DP=8; 13B on 16: DP=8,
# TP=2; 70B on 64: DP=8, TP=4, PP=2", each on 80 GB GPUs in nodes of 8 with ZeRO-1 (Megatron-LM's
# distributed optimizer) inside the data-parallel group, bf16, sequence 4096, global batch
# 1,024 sequences (micro-batch 1), full activation checkpointing (so the data-parallel rows,
# whose paper accounting keeps attention scores, and the tensor-parallel ones, planned with
# fused attention, count activations alike: 2*s*b*h per layer, /tp); and each model with data
# parallelism alone, and 70B with TP 8, for comparison. `shard plan --tp --pp` in the zero-paper
# accounting (1F1B). Prints a Markdown table. Predictions only: none of these ran (no GPU).
#
#   bench/plan/three_d_layouts.sh [BUILD_DIR]   (default build/release; a few seconds)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
shard=$PWD/$build/app/shard
[[ -x $shard ]] || { echo "three_d_layouts: $shard is not built" >&2; exit 1; }

row() { # model nodes tp pp
    local model=$1 nodes=$2 tp=$3 pp=$4
    local gpus=$((nodes * 8)) dp=$((nodes * 8 / (tp * pp)))
    local accum=$((1024 / dp))
    "$shard" plan --model "$model" --gpus 8 --nodes "$nodes" --tp "$tp" --pp "$pp" \
        --strategy zero1 --mode zero-paper --gpu-memory 80 --seq-len 4096 --micro-batch 1 \
        --checkpointing full \
        --grad-accum "$accum" --json |
        python3 -c '
import json, sys
j = json.load(sys.stdin)
m = j.get("mesh", {"pp": 1, "dp_replicate": 1, "dp_shard": j["shard_degree"], "tp": 1})
d = j["per_device"]
gib = lambda b: b / 2**30
states = d["sharded_params"] + d["grads"] + d["optimizer"]
print("| %s | %d | DP %d, TP %d, PP %d | %.1f | %.1f | %.1f | %.1f | %s | %.0f%% | %.2f | %.0f |" % (
    j["model"], j["gpus"], m["dp_shard"] * m["dp_replicate"], m["tp"], m["pp"],
    j.get("stage_params_per_gpu", j["params"]) / 1e9, gib(states), gib(d["activations"]),
    gib(d["total"]), "yes" if j["fits"] else "no", 100 * j.get("bubble_fraction", 0),
    j["step_time"]["step_s"], j["step_time"]["tokens_per_s"] / 1000))'
}

echo "| model | GPUs | layout | params per GPU (B) | model states (GiB) | activations (GiB) | total (GiB) | fits 80 GB | bubble | step (s) | tokens/s (K) |"
echo "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"
row llama-2-7b 1 1 1
row llama-2-13b 2 2 1
row llama-2-13b 2 1 1
row llama-2-70b 8 4 2
row llama-2-70b 8 1 1
row llama-2-70b 8 8 1
