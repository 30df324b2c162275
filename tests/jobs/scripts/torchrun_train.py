# A small regression model trained under torchrun on CPU ranks over Gloo, wrapped in PyTorch
# FSDP (FULL_SHARD) where this PyTorch can (Debian 12's 1.13 cannot import FSDP under Python
# 3.11: then DDP), logging as the Hugging Face Trainer does on stdout. For tst_command_run.
#   STEPS (default 20), STEP_SLEEP seconds (0), FAIL_RANK / FAIL_STEP: that rank exits 3 there.
import os
import sys
import time

import torch
import torch.distributed as dist

if os.environ.get("USE_LIBUV") == "0" and "use_libuv" in (dist.TCPStore.__init__.__doc__ or ""):
    # A PyTorch built without libuv (Debian 13's 2.6): a rank joining torchrun's store asks for
    # libuv whatever USE_LIBUV says (torch/distributed/rendezvous.py, agent store).
    import importlib

    # (not `import ... as`: torch.distributed.rendezvous is also a function of that package)
    rendezvous = importlib.import_module("torch.distributed.rendezvous")

    class TCPStore(dist.TCPStore):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    rendezvous.TCPStore = TCPStore
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
try:
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

    model = FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                     device_id=torch.device("cpu"))
    wrapper = "FSDP(FULL_SHARD)"
except Exception as e:  # noqa: BLE001 - any import failure falls back the same way
    model = torch.nn.parallel.DistributedDataParallel(model)
    wrapper = "DDP (FSDP unavailable: %s)" % type(e).__name__
if rank == 0:
    print("wrapper: %s, world %d" % (wrapper, world), flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
steps = int(os.environ.get("STEPS", "20"))
sleep = float(os.environ.get("STEP_SLEEP", "0"))
fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
fail_step = int(os.environ.get("FAIL_STEP", "-1"))
data = torch.Generator().manual_seed(1 + rank)
for step in range(1, steps + 1):
    x = torch.randn(32, 16, generator=data)
    y = x.sum(1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == fail_rank and step == fail_step:
        print("rank %d fails on purpose at step %d" % (rank, step), file=sys.stderr, flush=True)
        sys.stdout.flush()
        # os._exit, not sys.exit: interpreter teardown with a live Gloo group can abort (SIGABRT,
        # exit -6 under Debian 13's PyTorch 2.6) before the 3 is returned; a crashed rank is the case.
        os._exit(3)
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    mean /= world
    if rank == 0:
        print({"loss": round(mean.item(), 4), "learning_rate": 0.01,
               "epoch": round(step / steps, 4)}, flush=True)
    if sleep:
        time.sleep(sleep)
dist.destroy_process_group()
