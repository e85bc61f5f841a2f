"""Leaving a collective whose peer went silent: cut this process's connections to its old group.

A rank that dies closes its sockets, and its peers' collective fails within milliseconds. A rank whose node
vanished closes nothing: no reset crosses a dead link, so gloo waits in ``recv`` for the group's whole timeout
(30 minutes by default), and ``ProcessGroupGloo.abort()`` called from another thread does not return
(``NODE_LOSS_PROBE.md``). The socket itself ends the wait: ``shutdown()`` on the connection a collective reads
from makes its ``recv`` return at once, and gloo raises as if the peer had reset it.

So a survivor does this only once the controller has published the group's next membership (the controller
decides who is gone, from beats and the node's state; a member never decides that alone) while its own step
still runs in an older generation: it shuts (the reading half of) every established TCP connection of its
process except those to torchjob's store (which forms the next group) and to the operator's report endpoint.
Those are the old group's connections, which it is about to drop anyway.

Only the reading half is shut (``SHUT_RD``). gloo's TCP pair, once it fails, wakes every receive and every send
still waiting for its peer, except a send whose bytes it had already queued for the socket (in gloo's
asynchronous mode a write that fails with ``EPIPE`` queues without an error, and the failure wakes only the bound
buffers of that queue): such a send waits for the group's whole timeout. Shutting the writing half too made every
send a collective posted between the cut and gloo's reading of it fail with ``EPIPE`` and queue: outside
torchjob, a send posted just after the cut waited out the group's timeout in 3 of 25 trials, and in none of 25
with only the reading half shut (the write then completes, or the pair has failed and the send raises). The
peer still learns at once: gloo closes its descriptor as soon as it reads the end of the connection.

What stays open: a send queued because the socket was full, or written to a peer that died meanwhile, when the
pair then fails. ``in_place.py`` lets a member whose step does not end after it left it fall silent, so that the
controller replaces it.

Linux only: ``/proc/self/fd`` lists this process's descriptors, and each socket says its own ports. Not
``/proc/self/net/tcp``: it lists every connection of the machine's network namespace, and a group of N ranks on one
machine holds N² of them, read by each of the N (at 32 ranks, 2,000 lines each, 0.2 s before the farthest left its
step). Elsewhere nothing is cut (the group's timeout ends the wait, as before).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from torchjob import worker_files


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


_woken_lock = threading.Lock()
_woken: set[threading.Event] = set()  # set at the next cut (woken_by_cut)


@contextlib.contextmanager
def woken_by_cut(event: threading.Event) -> Iterator[None]:
    """Within the block, ``event`` is set as soon as this process cuts its connections: a member waiting for work
    in a thread of its own, which gloo may never wake once cut (shard_copies.py), waits for this event and the
    work's own end together, without looking again and again."""
    with _woken_lock:
        _woken.add(event)
    try:
        yield
    finally:
        with _woken_lock:
            _woken.discard(event)


def cut_group_connections(keep: set[int], only: set[str] | None = None) -> int:
    """Shut the reading half of this process's established TCP connections whose ports are not in ``keep`` (and,
    where ``only`` is given, that are among those ``connection_ids`` named); how many."""
    cut = 0
    for identity, connection in _connections(keep):
        with connection:
            if only is None or identity in only:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RD)  # the reading half only: see the module
                    cut += 1
    with _woken_lock:
        for event in _woken:
            event.set()
    return cut


def connection_ids(keep: set[int]) -> set[str]:
    """The established TCP connections of this process whose ports are not in ``keep``, each named by its socket
    (``socket:[inode]``: a descriptor number can be reused for another connection, an inode cannot while it
    lives). What a group made just now holds is the difference of two calls, around its making."""
    ids = set()
    for identity, connection in _connections(keep):
        connection.close()
        ids.add(identity)
    return ids


def _connections(keep: set[int]) -> Iterator[tuple[str, socket.socket]]:
    """Each established TCP connection whose ports are not in ``keep``: its socket's name, and a socket object
    over a duplicate of its descriptor, for the caller to close (``shutdown()`` acts on the connection both
    descriptors share; closing the duplicate leaves the owner's descriptor, gloo's, to its owner)."""
    for entry in _descriptors():
        try:
            identity = os.readlink(entry)
            if not identity.startswith("socket:["):
                continue
            duplicate = os.dup(int(entry.name))
        except OSError:
            continue  # closed meanwhile
        try:
            connection = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            continue
        try:
            elsewhere = _established_elsewhere(connection, keep)
        except OSError:
            elsewhere = False
        if elsewhere:
            yield identity, connection
        else:
            connection.close()


def _established_elsewhere(connection: socket.socket, keep: set[int]) -> bool:
    """Whether ``connection`` is a connected TCP socket with neither port in ``keep`` (a listening or unconnected
    one has no peer: ``getpeername`` raises)."""
    if connection.family not in (socket.AF_INET, socket.AF_INET6) or connection.type != socket.SOCK_STREAM:
        return False
    local, remote = connection.getsockname()[1], connection.getpeername()[1]
    return local not in keep and remote not in keep


def _descriptors() -> list[Path]:
    try:
        return list(Path("/proc/self/fd").iterdir())
    except OSError:
        return []
