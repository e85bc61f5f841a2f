"""Whether the operator can still reach a node: the witness of a vanished node that takes a second, not ten.

A node's Lease says its kubelet missed a renewal only 2.5 to 12.5 s after the node vanished (it renews every
10 s). A TCP connection to the node's kubelet port says more, and at once: a host that is up answers within
milliseconds (with its kubelet's accept, or with a refusal when only the kubelet is down: the kernel answers
even on a loaded machine), while a vanished host answers nothing. So, for a node under a Pod that stopped
beating, the operator tries to connect; no answer within ``PROBE_SECONDS`` makes the node *unreachable*, which
``core/policies/node_loss.py`` takes as a second witness beside the process's own silence.

Only a node this operator has reached before counts: where the operator cannot route to nodes at all (a
cluster whose nodes it cannot address), a failed probe proves nothing and the Lease stays the witness. The
probe is the operator's own, so no report, forged or true, can make a healthy node unreachable.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# A host that is up answers a connection in a millisecond or two, even across zones (its kernel answers, however
# loaded); a quarter of a second is a hundred times that, and holds up the pass that asks but briefly.
PROBE_SECONDS = 0.25
# The kubelet's port when a Node does not say (status.daemonEndpoints.kubeletEndpoint.Port).
KUBELET_PORT = 10250
# A node not reached is tried again after this long, not on every pass (each try may wait PROBE_SECONDS).
RETRY_SECONDS = 60.0
# Errors that prove the host answered: a refusal is the host's own kernel speaking.
_ANSWERED = (errno.ECONNREFUSED, errno.ECONNRESET)
# Errors that say nothing answered: the wait ran out, or the way to the host is gone (EINVAL: its route discards
# what is sent, a blackhole). Any other error is this operator's own (out of file descriptors, of memory, of
# ports): it proves nothing about the node.
_SILENT = (errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.EINVAL)

Address = tuple[str, int]


def connect(address: Address, timeout: float) -> bool | None:
    """Whether the host at ``address`` answers a TCP connection within ``timeout`` seconds (accepted or refused);
    None when the connection could not be tried here."""
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except TimeoutError:
        return False
    except OSError as err:
        return True if err.errno in _ANSWERED else False if err.errno in _SILENT else None


def kubelet_address(node: dict[str, Any] | None) -> Address | None:
    """A Node's InternalIP and kubelet port, from its status; None when it has no internal address."""
    status = (node or {}).get("status") or {}
    internal = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"]
    if not internal or not isinstance(internal[0], str):
        return None
    endpoint = (status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}
    port = endpoint.get("Port")
    return internal[0], port if isinstance(port, int) and port > 0 else KUBELET_PORT


class Reachability:
    """Which nodes this operator reached once, and which of those it no longer reaches."""

    def __init__(
        self,
        read_node: Callable[[str], dict[str, Any] | None],
        probe: Callable[[Address, float], bool | None] = connect,
    ) -> None:
        self.read_node = read_node
        self.probe = probe
        self._addresses: dict[str, Address] = {}
        self._reached: set[str] = set()
        self._tried: dict[str, float] = {}  # node → when it was last tried and not reached (monotonic)

    def learn(self, names: Iterable[str]) -> None:
        """Try once each node not reached yet (a node under a running Pod): a later failure then counts."""
        now = time.monotonic()
        unknown = sorted(
            n for n in set(names) - self._reached if now - self._tried.get(n, -RETRY_SECONDS) >= RETRY_SECONDS
        )
        for name, answered in zip(unknown, self._probe_all(unknown), strict=True):
            if answered is True:
                self._reached.add(name)
            else:
                self._tried[name] = now

    def try_again(self, names: Iterable[str]) -> None:
        """Nodes that report again (their kubelet renewed its Lease since they were found silent): the next ``learn``
        tries them at once rather than ``RETRY_SECONDS`` after the try that failed while they were gone."""
        for name in names:
            self._tried.pop(name, None)

    def unreachable(self, names: Iterable[str]) -> set[str]:
        """Among ``names``, the nodes reached before that answer nothing now (probed at once, in parallel)."""
        known = sorted(set(names) & self._reached)
        return {name for name, answered in zip(known, self._probe_all(known), strict=True) if answered is False}

    def _probe_all(self, names: list[str]) -> list[bool | None]:
        if not names:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
            return list(pool.map(self._probe_one, names))

    def _probe_one(self, name: str) -> bool | None:
        """Whether node ``name`` answers; None when it has no address, or could not be tried."""
        address = self._addresses.get(name)
        if address is not None:
            answered = self.probe(address, PROBE_SECONDS)
            if answered is not False:
                return answered
        # Not answered, or never addressed: read the Node again (a node that came back may have a new address).
        fresh = kubelet_address(self.read_node(name))
        if fresh is None:
            return None
        self._addresses[name] = fresh
        return False if fresh == address else self.probe(fresh, PROBE_SECONDS)
