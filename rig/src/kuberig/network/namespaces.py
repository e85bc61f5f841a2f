"""A real node's network: a network namespace of its own, linked to the host by a veth pair.

The host side holds ``10.99.<K>.1`` (the control plane and the registry listen there), the node ``10.99.<K>.2``.
Pods of different nodes reach each other through the host, as through a router: each node routes the other
nodes' links (``10.99.0.0/16``) and Pod subnets (``10.244.0.0/16``) to its host end, and the host routes each
node's Pod subnet to that node and forwards packets that arrive on a node's link (only those: the per-link
``forwarding`` switch, not the machine's). Nothing is routed anywhere else: a node has no default route, so test
traffic stays on this machine. Cutting the host's end of the link (``cut``) is how a vanished node goes silent:
no reset crosses it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from kuberig.naming import NODE_LINKS, POD_NETWORK, Slot
from kuberig.processes import run


def _route_pods(slot: Slot) -> None:
    run("ip", "route", "replace", slot.pod_subnet, "via", slot.node_ip, "dev", slot.host_veth, "onlink")


def create(slot: Slot) -> None:
    run("ip", "netns", "add", slot.name)
    run("ip", "link", "add", slot.host_veth, "type", "veth", "peer", "name", slot.node_veth, "netns", slot.name)
    run("ip", "addr", "add", f"{slot.host_ip}/24", "dev", slot.host_veth)
    run("ip", "link", "set", slot.host_veth, "up")
    Path(f"/proc/sys/net/ipv4/conf/{slot.host_veth}/forwarding").write_text("1\n")
    # The node's end comes up later, in its namespace: until then the route waits on a link with no carrier.
    _route_pods(slot)


def delete(slot: Slot) -> None:
    """Remove the namespace and the link; quiet about what is already gone."""
    subprocess.run(["ip", "netns", "del", slot.name], capture_output=True)
    subprocess.run(["ip", "link", "del", slot.host_veth], capture_output=True)  # gone with its peer, unless half made
    _unblackhole(slot)


def cut(slot: Slot) -> None:
    """The node's link goes: its packets go nowhere, and nobody is told. The kernel drops every route through
    a link taken down, so the node's addresses would fall to the host's default route and leave this machine
    (and a gateway's ICMP reply would tell the peers what a vanished node never tells): blackhole routes take
    their place first, which drop them in silence."""
    for subnet in (slot.link_subnet, slot.pod_subnet):
        run("ip", "route", "replace", "blackhole", subnet)
    run("ip", "link", "set", slot.host_veth, "down")


def mend(slot: Slot) -> None:
    """The link back, with the routes the kernel dropped with it (the link's own comes back with its address)."""
    _unblackhole(slot)
    run("ip", "link", "set", slot.host_veth, "up")
    _route_pods(slot)


def _unblackhole(slot: Slot) -> None:
    for subnet in (slot.link_subnet, slot.pod_subnet):
        subprocess.run(["ip", "route", "del", "blackhole", subnet], capture_output=True)  # quiet when none


def setup_script(slot: Slot) -> list[str]:
    """Shell lines, run inside the new namespace, that give the node its address and its routes to the others."""
    return [
        "ip link set lo up",
        f"ip link set {slot.node_veth} name eth0",
        f"ip addr add {slot.node_ip}/24 dev eth0",
        "ip link set eth0 up",
        f"ip route add {NODE_LINKS} via {slot.host_ip}",  # the other nodes, through the host
        f"ip route add {POD_NETWORK} via {slot.host_ip}",  # their Pods (this node's own subnet is on cni0)
        "echo 1 > /proc/sys/net/ipv4/ip_forward",  # this namespace's own: pods reach the node and each other
    ]


def pids_in(slot: Slot) -> set[int]:
    """Every process in the node's network namespace (its shims, its namespace holder, its daemons)."""
    try:
        inode = os.stat(f"/run/netns/{slot.name}").st_ino
    except OSError:
        return set()
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino == inode:
                    pids.add(int(entry.name))
    return pids
