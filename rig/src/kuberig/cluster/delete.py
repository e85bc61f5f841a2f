"""Delete a cluster: everything it started and everything it made, found by its name even without its state
file (kind's ``delete.Cluster``): processes by the mark in their environment, real nodes by their slot's owner
file (simulated nodes' addresses too), containers by their node's namespace and cgroup."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from kuberig import naming, processes, state
from kuberig.cluster.handle import Cluster
from kuberig.network import addresses, cgroups, namespaces


def delete(name: str, directory: Path | None = None) -> None:
    """Stop and remove the cluster ``name`` (its files in ``directory`` too, when given); quiet about what is
    already gone, so it is safe after a half-finished create."""
    found = state.load(directory) if directory and state.exists(directory) else None
    if found and any(n.kind == "kubelet" for n in found.nodes):
        with contextlib.suppress(Exception):  # a half-started cluster may have no API server to ask
            # While kubelet still runs, it stops the containers and releases each Pod's network (CNI DEL).
            Cluster(Path(found.directory)).kubectl(
                "delete", "pods", "--all", "-A", "--grace-period=1", "--timeout=30s", check=False, timeout=40
            )
    if found:
        processes.stop(reversed(found.processes))
    processes.kill_all(processes.marked(name))
    for slot in naming.owned_by(name):
        # Container shims live in the node's network namespace, containers in its cgroup root: both are ours.
        for _ in range(10):
            leftovers = cgroups.pids_in(slot) | namespaces.pids_in(slot)
            if not leftovers:
                break
            processes.kill_all(leftovers)
            time.sleep(0.3)
        namespaces.delete(slot)
        addresses.release(slot)  # a slot of simulated nodes
        cgroups.delete(slot)
        shutil.rmtree(slot.short_dir, ignore_errors=True)
    for etcd_data in Path("/dev/shm").glob(f"kuberig-{name}-etcd-*"):
        shutil.rmtree(etcd_data, ignore_errors=True)
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
