"""Connect to the job's store (generations.store_client) before it exists; it starts a moment later.

argv: PORT DELAY. Prints ``CONNECTED <value>`` once a value set through the client reads back."""

import os
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from torchjob import worker_files
from torchjob.train import generations

port, delay = int(sys.argv[1]), float(sys.argv[2])
os.environ[worker_files.ENV_STORE] = f"127.0.0.1:{port}"
hosted = []


def host_later() -> None:
    time.sleep(delay)
    hosted.append(dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False))


threading.Thread(target=host_later, daemon=True).start()
client = generations.store_client(timedelta(seconds=60))
client.set("probe", "here")
print("CONNECTED", client.get("probe").decode(), flush=True)
