"""A real node's cgroup root (cgroup v1): one ``kuberig-node<K>`` folder in every hierarchy, kubelet's
``cgroupRoot``, under which all its Pods' containers live."""

from __future__ import annotations

import contextlib
from pathlib import Path

from kuberig.naming import Slot

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _hierarchies() -> list[Path]:
    return [h for h in CGROUP_ROOT.iterdir() if (h / "cgroup.procs").exists() and h.name != "unified"]


def create(slot: Slot) -> None:
    for hierarchy in _hierarchies():  # kubelet's cgroupRoot must exist in every v1 hierarchy
        (hierarchy / slot.name).mkdir(exist_ok=True)


def pids_in(slot: Slot) -> set[int]:
    pids: set[int] = set()
    for procs in (CGROUP_ROOT / "memory" / slot.name).rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in procs.read_text().split()}
    return pids


def container_pids(slot: Slot, container_id: str) -> list[int]:
    """The host pids of one container, found through its cgroup (named by its ID)."""
    pids: list[int] = []
    for procs in (CGROUP_ROOT / "memory" / slot.name).rglob(f"{container_id}/cgroup.procs"):
        pids += [int(p) for p in procs.read_text().split()]
    return pids


def delete(slot: Slot) -> None:
    for hierarchy in CGROUP_ROOT.iterdir():
        root = hierarchy / slot.name
        if root.is_dir():
            # Deepest first: a cgroup can be removed only once it has no children.
            for leaf in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    leaf.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()
