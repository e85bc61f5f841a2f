"""Simulated nodes' addresses: each kwok node an address of its own on the host, that can vanish.

kwok runs no kubelet, and by default gives every node one address (``--node-ip``). A controller that probes a
node (a TCP connection to its kubelet port, as torchjob's operator does to tell a vanished host from a stopped
kubelet) then cannot tell one simulated node from another. So a cluster's kwok nodes share a slot of their own
(``naming.claim``: its ``10.99.<K>.0/24`` is free on this machine), and node ``i`` holds ``10.99.<K>.<i+1>`` on
the host's loopback, labelled ``lo:kr<K>``. The host answers a connection there at once, from the host and from
every real node's namespace (which routes ``10.99.0.0/16`` to the host), as a live host does: kwok's kubelet server
(listening on every address) at the node's kubelet port, the kernel's refusal at any other. A node that vanishes
loses its address, and a blackhole route takes its place: a connection then gets no answer at all, as for a host
that is gone (``network/namespaces.cut`` does the same for a real node's link), and the API server cannot reach its
"kubelet" either (``kubectl logs`` of its Pods fails, as for a real vanished node).
"""

from __future__ import annotations

import subprocess

from kuberig.naming import Slot
from kuberig.processes import run

MOST_NODES = 254  # the host numbers of one /24
# kwok's own, for every node, where addresses of their own cannot be made (not root): such nodes cannot vanish.
SHARED = "127.0.0.1"


def for_nodes(slot: Slot | None, count: int) -> list[str]:
    """The addresses of ``count`` simulated nodes: their own in ``slot``, or ``SHARED`` by all without one."""
    return [of_node(slot, i) if slot is not None else SHARED for i in range(count)]


def of_node(slot: Slot, index: int) -> str:
    if not 0 <= index < MOST_NODES:
        raise ValueError(f"kwok node {index}: at most {MOST_NODES} simulated nodes have addresses of their own")
    return f"10.99.{slot.index}.{index + 1}"


def _label(slot: Slot) -> str:
    return f"lo:kr{slot.index}"


def assign(slot: Slot, address: str) -> None:
    """``address`` on the host's loopback, answering (or back, after ``vanish``)."""
    subprocess.run(["ip", "route", "del", "blackhole", f"{address}/32"], capture_output=True)  # quiet when none
    run("ip", "addr", "replace", f"{address}/32", "dev", "lo", "label", _label(slot))


def vanish(address: str) -> None:
    """Nothing answers at ``address`` any more, and nobody is told: the blackhole route first (a packet for an
    address that is not the host's own would follow the host's default route off this machine), then the
    address goes."""
    run("ip", "route", "replace", "blackhole", f"{address}/32")
    run("ip", "addr", "del", f"{address}/32", "dev", "lo")


def release(slot: Slot) -> None:
    """Every address and blackhole route of ``slot``'s simulated nodes gone; quiet about what is already gone."""
    subprocess.run(["ip", "addr", "flush", "dev", "lo", "label", _label(slot)], capture_output=True)
    subprocess.run(["ip", "route", "flush", "root", slot.link_subnet, "type", "blackhole"], capture_output=True)
