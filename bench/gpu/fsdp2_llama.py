#!/usr/bin/env python3
"""The PyTorch side of bench/gpu/train_vs_fsdp2.sh: the same model folder (config.json and
model.safetensors as shard-worker init-model wrote them), the same batch (one pre-tokenized
row, repeated) and the same optimizer as the engine, in eager PyTorch with FSDP2's fully_shard
(world size 1, one per block and one for the root, bf16 parameters, fp32 reduce) where this
PyTorch has it. Prints one JSON object: step-1 loss, tokens/s (median after warm-up), peak
allocated and reserved CUDA bytes.

usage: fsdp2_llama.py --model DIR --data JSONL --steps 30 --micro-batch 1 --seq 2048
                      [--precision bf16-mixed|fp32] [--checkpointing none|full]
                      [--device cuda|cpu] [--no-fsdp]
"""
import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

here = os.path.dirname(os.path.abspath(__file__))


def bench_module(name, relpath):
    """A sibling benchmark's Python file as a module (its model and readers are shared)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, "..", relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


eager = bench_module("bench_eager", "engine/bench_eager.py")  # the Llama nn.Module
read_safetensors = bench_module("eager_generate", "generate/eager_generate.py").load_safetensors


def load_model(folder, device):
    c = json.load(open(os.path.join(folder, "config.json")))
    model = eager.Llama(c)  # fp32 parameters (the masters), then the file's values
    weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    state = {}
    for name, t in weights.items():
        key = name[len("model."):] if name.startswith("model.") else name
        state[key] = t.float()
    if c.get("tie_word_embeddings") and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        sys.exit(f"fsdp2_llama: weights do not match the model: missing {missing}, "
                 f"unexpected {unexpected}")
    return c, model.to(device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--precision", default="bf16-mixed", choices=["fp32", "bf16-mixed"])
    ap.add_argument("--checkpointing", default="none", choices=["none", "full"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--no-fsdp", action="store_true", help="plain eager (no fully_shard)")
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.manual_seed(0)
    eager.Attention.sdpa = a.device == "cuda"
    c, model = load_model(a.model, device)
    params = sum(p.numel() for p in model.parameters())

    fsdp = None
    if not a.no_fsdp:
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            fsdp = "unavailable in torch " + torch.__version__
        else:
            import torch.distributed as dist
            store = dist.FileStore(tempfile.mktemp(prefix="fsdp2-store-"), 1)
            dist.init_process_group("nccl" if a.device == "cuda" else "gloo", store=store,
                                    rank=0, world_size=1)
            bf16 = a.precision == "bf16-mixed"
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else torch.float32,
                                      reduce_dtype=torch.float32)
            for block in model.layers:
                fully_shard(block, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
            fsdp = "fully_shard per block and root, world size 1"
    if a.checkpointing == "full":
        from torch.utils.checkpoint import checkpoint
        for block in model.layers:
            block.forward = (lambda f: lambda *xs: checkpoint(f, *xs, use_reentrant=False))(
                block.forward)

    # The engine's AdamW: betas 0.9 / 0.95, eps 1e-8, no weight decay here; clipping at 1.0.
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    rows = [json.loads(line)["input_ids"] for line in open(a.data) if line.strip()]
    ids = torch.tensor([rows[i % len(rows)][: a.seq] for i in range(a.micro_batch)],
                       dtype=torch.long, device=device)
    V = c["vocab_size"]
    autocast = contextlib.nullcontext
    if a.precision == "bf16-mixed" and (fsdp is None or not fsdp.startswith("fully_shard")):
        autocast = lambda: torch.autocast(a.device, dtype=torch.bfloat16)  # noqa: E731
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with autocast():
            logits = model(ids)
            loss = nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, V),
                                               ids[:, 1:].reshape(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # synchronizes
        sync()
        times.append(time.perf_counter() - t0)
    warm = times[3:] if len(times) > 4 else times[1:] or times
    out = {"impl": "pytorch", "torch": torch.__version__, "fsdp": fsdp or "off",
           "device": a.device, "precision": a.precision, "checkpointing": a.checkpointing,
           "params": params, "micro_batch": a.micro_batch, "seq": a.seq, "steps": a.steps,
           "tokens_per_sec": a.micro_batch * a.seq / statistics.median(warm),
           "step_sec_median": statistics.median(warm), "loss_step1": losses[0],
           "losses": losses}
    if a.device == "cuda":
        out["max_allocated"] = torch.cuda.max_memory_allocated()
        out["max_reserved"] = torch.cuda.max_memory_reserved()
        stats = torch.cuda.memory_stats()
        out["num_alloc_retries"] = stats.get("num_alloc_retries", 0)
        out["num_ooms"] = stats.get("num_ooms", 0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
