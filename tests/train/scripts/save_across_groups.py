"""An asynchronous sharded save in flight when the training group changes under it (as an in-place repair changes
it): the save is left unfinished, and the next one is made by the new group over a save group of its own.

Three ranks, argv: CHECKPOINT_DIR. All three save step 1 together. Rank 2 then freezes (SIGSTOP: its connections
stay open, as a vanished node's do) and ranks 0 and 1 save step 2, which waits on it in the background. They
leave their group, form one of 2 under a new prefix, and save step 3. Rank 0 prints ``MANIFESTS <steps>`` and
kills rank 2.

With ``--end-without-waiting`` ranks 0 and 1 end once the new group is formed, with step 2's save still in flight
and no save or wait after the change. Rank 2 stays frozen until a watcher (a plain process, started by rank 0)
sees both gone, or 60 s pass; the watcher then kills it and writes which happened to CHECKPOINT_DIR/watcher."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from torchjob.train import generations
from torchjob.train.context import DistContext
from torchjob.train.sharded_checkpoint import ShardedCheckpointer

_WATCHER = """
import os, signal, sys, time
ends, frozen, verdict = [int(p) for p in sys.argv[1:3]], int(sys.argv[3]), sys.argv[4]

def running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

deadline = time.monotonic() + 60
while any(running(pid) for pid in ends) and time.monotonic() < deadline:
    time.sleep(0.1)
said = "ranks 0 and 1 still ran after 60 s" if any(running(pid) for pid in ends) else "ranks 0 and 1 ended"
open(verdict, "w").write(said)
os.kill(frozen, signal.SIGKILL)
"""

rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
end_without_waiting = "--end-without-waiting" in sys.argv[2:]
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
if end_without_waiting:
    store.set(f"pid-{rank}", str(os.getpid()))
    if rank == 0:
        pids = [store.get(f"pid-{r}").decode() for r in (0, 1)] + [store.get("frozen").decode()]
        subprocess.Popen([sys.executable, "-c", _WATCHER, *pids, os.path.join(sys.argv[1], "watcher")])
    sys.exit(0)
checkpoints.save(3, model, optimizer)
checkpoints.wait()
if rank == 0:
    print(f"MANIFESTS {checkpoints.steps()}", flush=True)
    os.kill(int(store.get("frozen")), signal.SIGKILL)
