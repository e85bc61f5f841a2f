"""Hosts the c10d rendezvous store of one attempt of an elastic job, outside every replica.

torchrun's c10d rendezvous keeps its state in a TCPStore that one of the agents hosts, so losing that agent
ends the rendezvous for all the others ("The connection to the C10d store has failed"), and an elastic job
cannot survive the loss of that one member. torchjob runs this instead, and tells the agents that none of
them is the host (``is_host=false``), so any member can be lost: the local backend as a process of the job,
the operator as the Pod ``<job>-rdzv``.

Usage: ``python -m torchjob.train.store_server PORT``, or ``python -c "$(cat store_server.py)" PORT`` (the
operator's Pod does this, so the image needs torch but not torchjob: this file imports nothing else). It
listens on every interface and serves until it is stopped.
"""

from __future__ import annotations

import signal
import sys
from datetime import timedelta

from torch.distributed import TCPStore  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m torchjob.train.store_server PORT", file=sys.stderr)
        return 2
    port = int(argv[0])
    # Held in a variable for the life of the process: the server goes when the object does.
    # The server listens on every interface; the host named here is only where its own client connects.
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    print(f"rendezvous store serving on port {port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    del store
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    sys.exit(main(sys.argv[1:]))
