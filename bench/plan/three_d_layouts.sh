#!/usr/bin/env bash
# The seeds' layouts for large models, planned (issue 29): "7B on 8 GPUs: DP=8; 13B on 16: DP=8,
# TP=2; 70B on 64: DP=8, TP=4, PP=2", each on 80 GB GPUs in nodes of 8 with ZeRO-1 (Megatron-LM's
# distributed optimizer) inside the data-parallel group, bf16, sequence 4096, global batch
# 1,024 sequences (micro-batch 1), full activation checkpointing (so the data-parallel rows,
# whose paper accounting keeps attention scores, and the tensor-parallel ones, planned with
# fused attention, count activations alike: 2*s*b*h per layer, /tp); and each model with data
# parallelism alone, and 70B with TP 8, for comparison; Llama-3.1-70B and 405B on H100-class
# 80 GB GPUs. `shard plan --tp --pp` in the zero-paper accounting (1F1B), with Megatron-LM's
# theoretical_memory_usage formula beside each row (`--recommend-layout --json`'s "megatron":
# the distributed optimizer, sequence parallelism and selective recomputation, as that formula
# assumes), then `shard plan --recommend-layout`'s pick for each model and GPU count. Prints two
# Markdown tables. Predictions only: none of these ran (no GPU).
#
#   bench/plan/three_d_layouts.sh [BUILD_DIR]   (default build/release; a few seconds)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
shard=$PWD/$build/app/shard
[[ -x $shard ]] || { echo "three_d_layouts: $shard is not built" >&2; exit 1; }

flags() { # model nodes tp pp
    local model=$1 nodes=$2 tp=$3 pp=$4
    local dp=$((nodes * 8 / (tp * pp)))
    echo --model "$model" --gpus 8 --nodes "$nodes" --tp "$tp" --pp "$pp" --strategy zero1 \
        --mode zero-paper --gpu-memory 80 --seq-len 4096 --micro-batch 1 --checkpointing full \
        --grad-accum $((1024 / dp))
}

row() { # model nodes tp pp
    local tp=$3 pp=$4
    # shellcheck disable=SC2046
    { "$shard" plan $(flags "$@") --json; "$shard" plan $(flags "$@") --recommend-layout --json; } |
        python3 -c '
import json, sys
text = sys.stdin.read()
dec = json.JSONDecoder()
j, end = dec.raw_decode(text)
layouts, _ = dec.raw_decode(text[end:].lstrip())
tp, pp = int(sys.argv[1]), int(sys.argv[2])
meg = next(l["megatron"] for l in layouts["layouts"] if l["tp"] == tp and l["pp"] == pp)
m = j.get("mesh", {"pp": 1, "dp_replicate": 1, "dp_shard": j["shard_degree"], "tp": 1})
d = j["per_device"]
gib = lambda b: b / 2**30
states = d["sharded_params"] + d["grads"] + d["optimizer"]
print("| %s | %d | DP %d, TP %d, PP %d | %.1f | %.1f | %.1f | %.1f | %s | %.0f%% | %.2f | %.0f | %.1f | %.1f |" % (
    j["model"], j["gpus"], m["dp_shard"] * m["dp_replicate"], m["tp"], m["pp"],
    j.get("stage_params_per_gpu", j["params"]) / 1e9, gib(states), gib(d["activations"]),
    gib(d["total"]), "yes" if j["fits"] else "no", 100 * j.get("bubble_fraction", 0),
    j["step_time"]["step_s"], j["step_time"]["tokens_per_s"] / 1000,
    gib(meg["weight_and_optimizer"]), gib(meg["activations"])))' "$tp" "$pp"
}

recommend() { # model nodes
    # shellcheck disable=SC2046
    "$shard" plan $(flags "$1" "$2" 1 1) --recommend-layout --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
b = j["best"]
pick = "DP %d, TP %d, PP %d" % (b["dp"], b["tp"], b["pp"]) if b else "none fits"
print("| %s | %d | %s | %s |" % (j["model"], j["gpus"], pick, j["reason"]))'
}

echo "| model | GPUs | layout | params per GPU (B) | model states (GiB) | activations (GiB) | total (GiB) | fits 80 GB | bubble | step (s) | tokens/s (K) | Megatron: weights + optimizer (GiB) | Megatron: activations, selective (GiB) |"
echo "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"
row llama-2-7b 1 1 1
row llama-2-13b 2 2 1
row llama-2-13b 2 1 1
row llama-2-70b 8 4 2
row llama-2-70b 8 1 1
row llama-2-70b 8 8 1
row llama-3.1-70b 8 4 2
row llama-3.1-405b 32 8 4
row llama-3.1-405b 32 8 8
echo
echo "| model | GPUs | recommended (\`shard plan --recommend-layout\`) | why |"
echo "|---|---:|---|---|"
recommend llama-2-7b 1
recommend llama-2-13b 2
recommend llama-2-70b 8
recommend llama-3.1-70b 8
recommend llama-3.1-405b 32
