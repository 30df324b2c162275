#!/usr/bin/env bash
# The planner's Llama-3.1-8B full / LoRA / QLoRA prediction on one 24 GiB GPU (batch 2, sequence
# 2048, bf16-mixed, ddp on 1 GPU), with and without activation checkpointing, as a Markdown table
# of the main categories. Usage: bench/plan/lora_vs_torchtune.sh [path/to/shard]
set -euo pipefail
SHARD=${1:-build/release/app/shard}
echo "| method | checkpointing | base (frozen / NF4 / trained) | gathered + dequantised | adapters + grads + AdamW | grads + AdamW (full) | activations | logits | overhead | total | fits 24 GiB |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for ckpt in full none; do
    for method in full lora qlora; do
        "$SHARD" plan --model llama-3.1-8b --gpus 1 --strategy ddp --gpu-memory 24 \
            --micro-batch 2 --seq-len 2048 --precision bf16-mixed --checkpointing "$ckpt" \
            --method "$method" --json |
            python3 -c '
import json, sys
j = json.load(sys.stdin); p = j["per_device"]; G = 2 ** 30
g = lambda *k: "%.2f" % (sum(p[x] for x in k) / G)
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | **%s** | %s |" % (j["method"], j["checkpointing"],
    g("frozen_base", "quantized_base", "sharded_params"), g("gathered_params"),
    g("adapters", "adapter_grads", "adapter_optimizer"), g("grads", "optimizer", "comm_buffers"),
    g("activations"), g("logits"), g("overhead"), "%.2f" % (p["total"] / G),
    "yes" if j["fits"] else "no"))'
    done
done
