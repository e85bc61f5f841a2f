"""A send posted right after this process cut its group's connections (peers.cut_group_connections) completes or
raises at once: it never waits out the group's timeout (gloo queues a send that fails with EPIPE, and its pair's
failure never wakes it).

Two ranks, argv: TRIALS. Each trial forms a group with a 3 s timeout; rank 1 posts a receive from rank 0; rank 0
cuts its connections and sends at once. Rank 0 prints ``TRIAL <i> <sent|raised> <seconds>`` per trial and exits
with 1 when any send took the timeout."""

import contextlib
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from torchjob.train import peers

trials = int(sys.argv[1])
rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timedelta(seconds=60))
waited = []
for trial in range(trials):
    group_store = dist.PrefixStore(f"trial-{trial}", store)  # type: ignore[attr-defined]
    dist.init_process_group("gloo", store=group_store, rank=rank, world_size=2, timeout=timedelta(seconds=3))
    dist.all_reduce(torch.ones(8))  # every pair connected and used
    if rank == 1:
        receiving = dist.irecv(torch.empty(1000), src=0)
        group_store.set("posted", "1")
        with contextlib.suppress(RuntimeError):  # rank 0's cut can end the pair before its bytes are read
            receiving.wait()
    else:
        group_store.wait(["posted"])
        time.sleep(0.1)  # rank 1's notice of its receive has arrived: rank 0's send goes straight to the socket
        peers.cut_group_connections({port})
        started = time.monotonic()
        try:
            dist.send(torch.ones(1000), dst=1)
            outcome = "sent"
        except RuntimeError:
            outcome = "raised"
        took = time.monotonic() - started
        print(f"TRIAL {trial} {outcome} {took:.3f}", flush=True)
        if took > 2.0:
            waited.append(trial)
    store.add(f"done-{trial}", 1)
    while store.add(f"done-{trial}", 0) < 2:  # neither leaves the group while the other still uses it
        time.sleep(0.01)
    dist.destroy_process_group()
# Rank 0 hosts the store: it leaves only after rank 1's last use of it has been answered.
if rank == 1:
    store.add("left", 1)
else:
    while store.add("left", 0) < 1:
        time.sleep(0.01)
    time.sleep(0.5)
if waited:
    print(f"sends after the cut waited out the group's timeout in trials {waited}", flush=True)
    sys.exit(1)
