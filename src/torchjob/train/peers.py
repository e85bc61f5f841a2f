"""Leaving a collective whose peer went silent: cut this process's connections to its old group.

A rank that dies closes its sockets, and its peers' collective fails within milliseconds. A rank whose node
vanished closes nothing: no reset crosses a dead link, so gloo waits in ``recv`` for the group's whole timeout
(30 minutes by default), and ``ProcessGroupGloo.abort()`` called from another thread does not return
(``NODE_LOSS_PROBE.md``). The socket itself ends the wait: ``shutdown()`` on the connection a collective reads
from makes its ``recv`` return at once, and gloo raises as if the peer had reset it.

So a survivor does this only once the controller has published the group's next membership (the controller
decides who is gone, from beats and the node's state; a member never decides that alone) while its own step
still runs in an older generation: it shuts down every established TCP connection of its process except those to
torchjob's store (which forms the next group) and to the operator's report endpoint. Those are the old group's
connections, which it is about to drop anyway.

Linux only (``/proc``): ``/proc/self/net/tcp{,6}`` lists connections by inode with their ports and state, and
``/proc/self/fd`` maps inodes to this process's descriptors. Elsewhere nothing is cut (the group's timeout ends
the wait, as before).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from torchjob import worker_files

_ESTABLISHED = "01"  # the kernel's TCP state code in /proc/net/tcp


def kept_ports() -> set[int]:
    """The ports of the connections a survivor keeps: torchjob's store and the operator's report endpoint."""
    ports = set()
    store = os.environ.get(worker_files.ENV_STORE, "")
    if store.rpartition(":")[2].isdigit():
        ports.add(int(store.rpartition(":")[2]))
    url = os.environ.get(worker_files.ENV_REPORT_URL)
    if url:
        parts = urlsplit(url)
        with contextlib.suppress(ValueError):
            ports.add(parts.port or (443 if parts.scheme == "https" else 80))
    return ports


def cut_group_connections(keep: set[int]) -> int:
    """Shut down this process's established TCP connections whose ports are not in ``keep``; how many."""
    doomed = _established_inodes(keep)
    cut = 0
    for entry in _descriptors():
        try:
            target = os.readlink(entry)
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("socket:[") or int(target[8:-1]) not in doomed:
            continue
        try:
            duplicate = os.dup(int(entry.name))
        except OSError:
            continue
        # A socket object over a duplicate: shutdown() acts on the connection both descriptors share, and
        # closing the duplicate leaves gloo's own descriptor to gloo.
        try:
            connection = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            continue
        with connection, contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
            cut += 1
    return cut


def _descriptors() -> list[Path]:
    try:
        return list(Path("/proc/self/fd").iterdir())
    except OSError:
        return []


def _established_inodes(keep: set[int]) -> set[int]:
    found = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _ESTABLISHED:
                continue
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            if local not in keep and remote not in keep:
                found.add(int(fields[9]))
    return found
