"""A real node's network: a network namespace of its own, linked to the host by a veth pair.

The host side holds ``10.99.<K>.1`` (the control plane and the registry listen there), the node ``10.99.<K>.2``.
Nothing is routed anywhere else: the namespace has no default route, so test traffic stays on this machine.
Cutting the host's end of the link (``cut``) is how a vanished node goes silent: no reset crosses it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from kuberig.naming import Slot
from kuberig.processes import run


def create(slot: Slot) -> None:
    run("ip", "netns", "add", slot.name)
    run("ip", "link", "add", slot.host_veth, "type", "veth", "peer", "name", slot.node_veth, "netns", slot.name)
    run("ip", "addr", "add", f"{slot.host_ip}/24", "dev", slot.host_veth)
    run("ip", "link", "set", slot.host_veth, "up")


def delete(slot: Slot) -> None:
    """Remove the namespace and the link; quiet about what is already gone."""
    subprocess.run(["ip", "netns", "del", slot.name], capture_output=True)
    subprocess.run(["ip", "link", "del", slot.host_veth], capture_output=True)  # gone with its peer, unless half made


def cut(slot: Slot) -> None:
    """Take the host's end of the link down: the node's packets go nowhere, and nobody is told."""
    run("ip", "link", "set", slot.host_veth, "down")


def mend(slot: Slot) -> None:
    run("ip", "link", "set", slot.host_veth, "up")


def setup_script(veth: str, node_ip: str) -> list[str]:
    """Shell lines, run inside the new namespace, that give the node its address."""
    return [
        "ip link set lo up",
        f"ip link set {veth} name eth0",
        f"ip addr add {node_ip}/24 dev eth0",
        "ip link set eth0 up",
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
