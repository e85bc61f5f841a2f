"""A running cluster, found by its directory: the API (kubectl), its nodes and registry, and the small verbs
tests and benchmarks use on it (namespaces, volumes, images, processes, logs)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from kuberig import processes, state
from kuberig.images import load
from kuberig.kubectl import Kubectl
from kuberig.naming import Slot
from kuberig.network import addresses
from kuberig.node import kwok
from kuberig.node.kubelet import KubeletNode, node_of
from kuberig.node.kwok import KwokNode


class Cluster(Kubectl):
    """The handle of the cluster kept in ``directory`` (its state file says what runs)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory / "admin.kubeconfig")
        self.directory = directory

    @property
    def state(self) -> state.ClusterState:
        return state.load(self.directory)

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def server(self) -> str:
        found = self.state
        return f"https://{found.address}:{found.ports['apiserver']}"

    @property
    def host_ip(self) -> str:
        """The host's address on the nodes' network: where Pods reach a process that runs on the host."""
        return self.state.host_ip or "127.0.0.1"

    @property
    def registry(self) -> str:
        return self.state.registry

    @property
    def nodes(self) -> list[KwokNode | KubeletNode]:
        found = self.state
        return [node_of(found, n) if n.kind == "kubelet" else KwokNode(n.name, n.ip, n.slot) for n in found.nodes]

    def kubelet_nodes(self) -> list[KubeletNode]:
        return [n for n in self.nodes if isinstance(n, KubeletNode)]

    def node(self, name: str) -> KwokNode | KubeletNode:
        found = [n for n in self.nodes if n.name == name]
        if not found:
            raise RuntimeError(f"no node {name} (nodes: {', '.join(n.name for n in self.nodes) or 'none'})")
        return found[0]

    # -- namespaces, volumes, images ------------------------------------------------------------------------

    def namespace(self, name: str) -> str:
        """Create namespace ``name`` unless it exists, and wait for its default ServiceAccount (Pods need it)."""
        self.kubectl("create", "namespace", name, check=False)
        processes.wait_for(
            f"the default service account of {name}",
            lambda: self.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
            60,
        )
        return name

    def claim(self, namespace: str, name: str) -> Path:
        """A PersistentVolumeClaim ``name`` in ``namespace``, bound to a hostPath volume (a static
        PersistentVolume: there is no provisioner). Returns the folder the Pods' files land in."""
        volume = f"{namespace}-{name}"
        folder = self.directory / "volumes" / volume
        folder.mkdir(parents=True, exist_ok=True)
        common = {"accessModes": ["ReadWriteMany"], "storageClassName": "node-local"}
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {**common, "capacity": {"storage": "1Gi"}, "hostPath": {"path": str(folder)}},
            }
        )
        claim_spec = {**common, "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}}
        self.apply(
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": claim_spec},
            namespace=namespace,
        )
        return folder

    def push_image(
        self,
        image: str,
        files: dict[str, Path | bytes],
        links: dict[str, str] | None = None,
        base: bool = True,
        **config: Any,
    ) -> str:
        """Publish ``image`` to the cluster's registry under its own name (see ``images/load.py``)."""
        if not self.registry:
            raise RuntimeError("this cluster has no registry (it has no kubelet node)")
        return load.push_image(self.registry, self.directory / "layers", image, files, links, base, **config)

    def container_pids(self, namespace: str, pod: str, container: str = "pytorch") -> list[int]:
        """The host pids of a running container's processes, on whichever node runs the Pod."""
        node_name = self.kubectl_json("get", "pod", pod, "-n", namespace)["spec"]["nodeName"]
        node = self.node(node_name)
        if not isinstance(node, KubeletNode):
            raise RuntimeError(f"pod {pod} runs on {node_name}, a simulated node: it has no processes")
        return node.container_pids(self, namespace, pod, container)

    # -- simulated Pods (kwok nodes) ------------------------------------------------------------------------

    def end_pod(self, namespace: str, pod: str, exit_code: int, reason: str | None = None) -> None:
        kwok.end_pod(self, namespace, pod, exit_code, reason)

    def vanish(self, node: str) -> None:
        """Simulated node ``node`` vanishes as a host does: nothing answers at its address, nobody is told
        (``network/addresses.py``). Its Pods, its Lease and its status stay as kwok keeps them."""
        addresses.vanish(self._own_address(node)[1])

    def mend(self, node: str) -> None:
        """Simulated node ``node`` answers at its address again."""
        addresses.assign(*self._own_address(node))

    def _own_address(self, name: str) -> tuple[Slot, str]:
        """A simulated node's slot and address of its own; an error for a real node, or one without (not root)."""
        node = self.node(name)
        if not isinstance(node, KwokNode):
            raise RuntimeError(f"{name} is a real node: kubelet.stop and kubelet.start make it vanish and return")
        if node.slot is None:
            raise RuntimeError(
                f"{name} shares {node.ip} with the other simulated nodes (made without root): it cannot vanish"
            )
        return Slot(node.slot), node.ip

    def serve_logs(
        self, namespace: str, pod: str, container: str, lines: list[str], logs_file: Path, wait: bool = True
    ) -> None:
        """``kwok.serve_logs``: ``wait`` False where the Pod is not created yet."""
        kwok.serve_logs(self, namespace, pod, container, lines, logs_file, wait)

    # -- the cluster's own processes ------------------------------------------------------------------------

    def stop_process(self, name: str, timeout: float = 60) -> list[str]:
        """Stop one of the cluster's processes (SIGTERM, verified by pid and start time); returns its argv."""
        found = self.state
        process = next(p for p in found.processes if p.name == name and processes.alive(p))
        os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while processes.alive(process) and time.monotonic() < deadline:
            time.sleep(0.1)
        found.processes.remove(process)
        found.save()
        return process.argv

    def start_process(self, name: str, argv: list[str]) -> None:
        """Start a process that belongs to the cluster (stopped by ``delete`` with the rest)."""
        found = self.state
        found.add(processes.spawn(found.name, found.logs, name, argv))

    def restart_process(self, name: str, timeout: float = 60) -> None:
        """Stop one of the cluster's processes (SIGTERM) and start it again as it was (e.g. kube-apiserver)."""
        self.start_process(name, self.stop_process(name, timeout))
        found = self.state
        if name == "kube-apiserver":
            processes.wait_for("the API server after its restart", self.ready, timeout, found.processes, found.logs)

    def export_logs(self, destination: Path) -> Path:
        """Copy the cluster's logs (its processes', and the Pods' of every real node) into ``destination``."""
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.state.logs, destination / "processes", dirs_exist_ok=True)
        for node in self.kubelet_nodes():
            pods = node.directory / "pod-logs"
            if pods.is_dir():
                shutil.copytree(pods, destination / "nodes" / node.name, dirs_exist_ok=True, symlinks=False)
        return destination
