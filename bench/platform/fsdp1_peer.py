#!/usr/bin/python3
"""PyTorch FSDP1 peer of the engine's zero3: FullyShardedDataParallel (FULL_SHARD, one unit per
decoder block plus the root, Gloo, CPU, fp32) on the Hugging Face style Llama of
bench/engine/bench_eager.py, trained on the same data.jsonl rows, micro-batch and sequence
length as `shard-worker train`. One process per rank, started by hand (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, USE_LIBUV=0: Debian's torchrun needs libuv, which its build lacks).
Rank 0 prints one JSON object (median tokens/s of steps 2..N over all ranks' rows).

usage: RANK=r WORLD_SIZE=2 ... fsdp1_peer.py --config CONFIG --data DATA --micro-batch 4
       --seq 128 --steps 8 --threads 1
"""
import argparse
import functools
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine"))
from bench_eager import Block, Llama  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    c = json.load(open(a.config))
    model = FSDP(Llama(c), sharding_strategy=ShardingStrategy.FULL_SHARD,
                 auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                    transformer_layer_cls={Block}),
                 device_id=torch.device("cpu"), use_orig_params=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    rows = [json.loads(line)["input_ids"][: a.seq] for line in open(a.data)]
    V = c["vocab_size"]
    times = []
    for step in range(a.steps):
        first = (step * world + rank) * a.micro_batch
        ids = torch.tensor(rows[first: first + a.micro_batch])
        dist.barrier()
        t0 = time.perf_counter()
        logits = model(ids)
        loss = nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, V),
                                           ids[:, 1:].reshape(-1))
        loss.backward()
        model.clip_grad_norm_(1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    timed = times[1:] if len(times) > 1 else times
    tokens = world * a.micro_batch * a.seq
    if rank == 0:
        print(json.dumps({"impl": "fsdp1", "torch": torch.__version__, "ranks": world,
                          "tokens_per_sec": statistics.median(tokens / t for t in timed),
                          "step_sec": statistics.median(timed)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
