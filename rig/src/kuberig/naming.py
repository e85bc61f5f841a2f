"""Every name and address of a real node, from one number: its slot K (a cluster's simulated nodes share one slot
for their addresses, ``network/addresses.py``).

A slot is claimed by creating its folder ``/var/lib/kuberig/slot<K>`` (mkdir is atomic, so two clusters
starting at once never pick the same), and the folder holds a ``cluster`` file naming its owner, so that
``delete`` finds a cluster's slots by name even without its state file.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

SLOTS = Path("/var/lib/kuberig")
POD_NETWORK = "10.244.0.0/16"
NODE_LINKS = "10.99.0.0/16"  # every slot's link to the host
# The node lends its Python environment to every container, as a GPU node lends its driver: containerd mounts
# it read-only here (images put it on their path). A multi-GB torch layer per image would cost minutes of
# tarring and unpacking per run for no more truth.
RUNTIME_MOUNT = "/opt/torchjob/site-packages"


@dataclass(frozen=True)
class Slot:
    """A node's network namespace and cgroup root (``kuberig-node<K>``), its link ``10.99.<K>.0/24`` to the
    host (veth ``krh<K>``/``krn<K>``), its Pod subnet ``10.244.<K>.0/24``, and a short folder for what holds unix
    sockets (containerd's, kubelet's root): a socket's path must stay under 104 bytes."""

    index: int

    @property
    def name(self) -> str:
        return f"kuberig-node{self.index}"

    @property
    def host_ip(self) -> str:
        return f"10.99.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.99.{self.index}.2"

    @property
    def link_subnet(self) -> str:
        return f"10.99.{self.index}.0/24"

    @property
    def host_veth(self) -> str:
        return f"krh{self.index}"

    @property
    def node_veth(self) -> str:
        return f"krn{self.index}"

    @property
    def pod_subnet(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.244.{self.index}.1"

    @property
    def short_dir(self) -> Path:
        return SLOTS / f"slot{self.index}"

    @property
    def socket(self) -> str:
        return f"{self.short_dir}/containerd.sock"

    @property
    def kubelet_root(self) -> str:
        return f"{self.short_dir}/kubelet"

    def owner(self) -> str | None:
        with contextlib.suppress(OSError):
            return (self.short_dir / "cluster").read_text().strip()
        return None


def claim(cluster: str, taken_addresses: str) -> Slot:
    """The first free slot (no namespace, no host address, no folder), claimed for ``cluster``."""
    SLOTS.mkdir(parents=True, exist_ok=True)
    for k in range(1, 250):
        slot = Slot(k)
        if Path(f"/run/netns/{slot.name}").exists() or f" {slot.host_ip}/" in taken_addresses:
            continue
        try:
            slot.short_dir.mkdir()
        except FileExistsError:
            continue
        (slot.short_dir / "cluster").write_text(cluster)
        return slot
    raise RuntimeError("no free 10.99.K.0/24 subnet for a real node")


def owned_by(cluster: str) -> list[Slot]:
    """The slots whose folder names ``cluster`` as their owner."""
    if not SLOTS.is_dir():
        return []
    found = (Slot(int(p.name[4:])) for p in SLOTS.glob("slot*") if p.name[4:].isdigit())
    return sorted((s for s in found if s.owner() == cluster), key=lambda s: s.index)
