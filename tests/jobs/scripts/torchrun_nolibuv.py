# torchrun for a PyTorch built without libuv (Debian 13's 2.6): its elastic agent creates its
# TCPStore with libuv whatever USE_LIBUV says (static_tcp_rendezvous.py and
# c10d_rendezvous_backend.py pass no use_libuv), so `torchrun` cannot start there (the ranks
# that join its store have the same problem: torchrun_train.py mends it on its side). Under
# USE_LIBUV=0 this makes TCPStore default to use_libuv=False, then runs torchrun unchanged with
# the same arguments. Elsewhere (PyTorch 1.13, no use_libuv at all) it is plain torchrun.
import importlib
import os
import runpy
import sys

import torch.distributed as dist

if os.environ.get("USE_LIBUV") == "0" and "use_libuv" in (dist.TCPStore.__init__.__doc__ or ""):
    _TCPStore = dist.TCPStore

    class TCPStore(_TCPStore):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    dist.TCPStore = TCPStore
    for name in ("torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
                 "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
                 "torch.distributed.elastic.utils.distributed"):
        module = importlib.import_module(name)
        if hasattr(module, "TCPStore"):
            module.TCPStore = TCPStore

sys.argv = ["torchrun"] + sys.argv[1:]
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
