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
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import torch

from torchjob import worker_files
from torchjob.train import state_transfer


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
_cut_since_formed = False  # this process's group connections were cut, and no group has formed since (formed)


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


def formed() -> None:
    """A new group is forming: a wait in it is left behind at its own next cut only (``done_or_left``)."""
    global _cut_since_formed
    with _woken_lock:
        _cut_since_formed = False


# How long after a cut a wait may still end by itself (its receive fails at once where gloo wakes it) before it is
# left behind: the step fails no sooner. Each plain-FSDP kill of bench.state lands in a neighbours' exchange, and
# the survivors found their step failed 0.44-0.47 s after it with 0.25 s here, 0.16-0.22 s with 0.05 s (5 trials).
_GRACE_AFTER_CUT = 0.05
# Waits left behind, stuck in a send: kept, with the tensors they send, for as long as the process lives.
_LEFT_BEHIND: list[threading.Thread] = []


def done_or_left(wait: Callable[[], None], device: torch.device, what: str) -> None:
    """Run ``wait`` in a thread of its own and wait for it; its error, if any, is raised here. A message larger than
    the socket's buffer is most of the time partly queued; where its peer then dies or leaves the step (its
    connections cut), gloo never wakes that send (above) and the member would wait where nothing reaches it (seen in
    bench.state: the neighbours' copies of the lost rank's keeper, and an HSDP survivor's all-gather sending to the
    killed rank, each waiting until a spare replaced it). So once this process's own connections were cut (the group
    was repaired around a lost peer: in_place.py) and ``wait`` has not ended within ``_GRACE_AFTER_CUT``, it is left
    behind (a daemon thread, blocked in gloo without the GIL) and ``RuntimeError("<what> left behind: ...")`` is
    raised here, failing the step as a failed collective does.

    The caller sleeps on one event, set by the wait's end or by the cut: looking every 5 ms instead cost plain FSDP's
    steady step ~0.5 s (by hand: 5.6-5.7 s against 5.0-5.1 s; why, not traced)."""
    woken = threading.Event()

    def work() -> None:
        try:
            wait()
        finally:
            woken.set()

    with woken_by_cut(woken):
        if _cut_since_formed:  # posted after the cut, on connections already cut: gloo may never wake it either
            woken.set()
        thread, failed = state_transfer.in_thread(device, work, "torchjob-left-on-cut")
        woken.wait()
    thread.join(_GRACE_AFTER_CUT)
    if thread.is_alive():
        _LEFT_BEHIND.append(thread)
        raise RuntimeError(f"{what} left behind: the group was repaired around a lost peer")
    if failed:
        raise failed[0]


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
    global _cut_since_formed
    with _woken_lock:
        _cut_since_formed = _cut_since_formed or only is None
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
