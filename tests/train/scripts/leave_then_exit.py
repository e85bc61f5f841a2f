"""Leave a group of three (generations.leave_group) and end at once, as a member scaled away or at the end of its
training does: the process must end with code 0 while its old group is still being let go of.

Three ranks; rank 0 hosts the store and ends last, once every rank has left."""

import os
import time
from datetime import timedelta

import torch.distributed as dist

from torchjob.train import generations

rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
store = dist.TCPStore("127.0.0.1", port, 3, rank == 0, timeout=timedelta(seconds=60))
dist.init_process_group("gloo", store=dist.PrefixStore("group", store), rank=rank, world_size=3)  # type: ignore[attr-defined]
dist.barrier()
generations.leave_group("gloo", rank, broken=True)
store.add("left", 1)
while rank == 0 and store.add("left", 0) < 3:
    time.sleep(0.01)
print("LEFT", flush=True)
