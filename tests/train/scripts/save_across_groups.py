"""An asynchronous sharded save in flight when the training group changes under it (as an in-place repair changes
it): the save is left unfinished, and the next one is made by the new group over a save group of its own.

Three ranks, argv: CHECKPOINT_DIR. All three save step 1 together. Rank 2 then freezes (SIGSTOP: its connections
stay open, as a vanished node's do) and ranks 0 and 1 save step 2, which waits on it in the background. They
leave their group, form one of 2 under a new prefix, and save step 3. Rank 0 prints ``MANIFESTS <steps>`` and
kills rank 2."""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchjob.train import generations
from torchjob.train.context import DistContext
from torchjob.train.sharded_checkpoint import ShardedCheckpointer

rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
store = dist.TCPStore("127.0.0.1", port, 3, rank == 0, timeout=timedelta(seconds=60))
dist.init_process_group("gloo", store=dist.PrefixStore("first", store), rank=rank, world_size=3)  # type: ignore[attr-defined]
torch.manual_seed(0)
model = nn.Linear(256, 256)
optimizer = torch.optim.Adam(model.parameters())
context = DistContext(rank, rank, 3, torch.device("cpu"), "gloo", "test")
checkpoints = ShardedCheckpointer(sys.argv[1], context, async_save=True)
checkpoints.save(1, model, optimizer)
checkpoints.wait()
if rank == 2:
    store.set("frozen", str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(3)  # never reached: rank 0 kills it
store.wait(["frozen"])
checkpoints.save(2, model, optimizer)  # its background collectives wait on the frozen rank
# A repair usually finds the save's thread inside its collectives; one that had not reached them yet fails as the
# group is left, and is reported the same way.
time.sleep(0.5)
generations.leave_group("gloo", rank, broken=True)  # as a repair leaves the group
dist.init_process_group("gloo", store=dist.PrefixStore("second", store), rank=rank, world_size=2)  # type: ignore[attr-defined]
checkpoints.save(3, model, optimizer)
checkpoints.wait()
if rank == 0:
    print(f"MANIFESTS {checkpoints.steps()}", flush=True)
    os.kill(int(store.get("frozen")), signal.SIGKILL)
