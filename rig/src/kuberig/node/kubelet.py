"""A real node: kubelet, kube-proxy, Debian's containerd + runc + CNI plugins and a minimal CoreDNS, in a network
and mount namespace of its own (``network/namespaces.py``), under a cgroup root of its own (``network/cgroups.py``).

``stop`` is how a spot VM vanishes: the link is cut first (so no reset reaches a peer), then kubelet,
containerd, CoreDNS and every container process are killed at once; nothing is drained. ``start`` brings the
daemons back on the same namespace, and kubelet finds its Pods gone.
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from kuberig import pki, processes, toolchain
from kuberig.kubectl import Kubectl
from kuberig.naming import Slot
from kuberig.network import cgroups, namespaces
from kuberig.node import configs
from kuberig.state import ClusterState, NodeState

DAEMONS = ("containerd", "kubelet", "kube-proxy", "coredns")


@dataclass(frozen=True)
class KubeletNode:
    name: str
    slot: Slot
    directory: Path  # the node's files: configs, logs of its Pods, its containerd's root
    kind: str = "kubelet"

    @property
    def ip(self) -> str:
        return self.slot.node_ip

    def process_name(self, daemon: str) -> str:
        return f"{self.name}-{daemon}"

    def enter(self, state: ClusterState) -> list[str]:
        """The prefix that runs a command inside the node's network and mount namespaces."""
        holder = state.process(self.process_name("namespace"))
        return ["nsenter", "-t", str(holder.pid), "-n", "-m"]

    def command(self, state: ClusterState, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the node (kind's ``Node.Command``)."""
        return subprocess.run([*self.enter(state), *argv], capture_output=True, text=True)

    def container_pids(self, api: Kubectl, namespace: str, pod: str, container: str = "pytorch") -> list[int]:
        """The host pids of a running container's processes."""
        found = api.kubectl_json("get", "pod", pod, "-n", namespace)
        statuses = found.get("status", {}).get("containerStatuses", [])
        container_id = next(s["containerID"] for s in statuses if s["name"] == container).split("://")[1]
        return cgroups.container_pids(self.slot, container_id)


def node_of(state: ClusterState, node: NodeState) -> KubeletNode:
    assert node.slot is not None, f"{node.name} is not a kubelet node"
    return KubeletNode(node.name, Slot(node.slot), Path(state.directory) / "nodes" / node.name)


def _write_configs(node: KubeletNode, cluster_dir: Path, registry: str) -> None:
    d = node.directory
    for sub in ("net.d", "fakes", "pod-logs", "ipam"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for name, content in configs.fake_files().items():
        (d / "fakes" / name).write_text(content)
    default_spec = json.loads(processes.run("ctr", "oci", "spec"))
    configs.write_json(d / "base-spec.json", configs.base_spec(default_spec, sysconfig.get_paths()["purelib"]))
    (d / "containerd.toml").write_text(configs.containerd_toml(d, node.slot.socket, registry))
    configs.write_json(d / "net.d" / "10-pods.conflist", configs.cni_conflist(node.slot, d / "ipam"))
    (d / "resolv.conf").write_text(f"nameserver {node.slot.host_ip}\n")  # nothing answers there: no way out
    configs.write_json(d / "kubelet.yaml", configs.kubelet_config(node.slot, d, cluster_dir / "ca.crt"))
    (d / "Corefile").write_text(configs.corefile(cluster_dir / "admin.kubeconfig", pki.CONTEXT))
    proxy = cluster_dir / f"{node.name}-proxy.kubeconfig"
    configs.write_json(d / "kube-proxy.yaml", configs.kube_proxy_config(node.name, node.slot, proxy))


def provision(state: ClusterState, node: KubeletNode, server: str, timeout: float) -> None:
    """Start the node's namespace holder and daemons; the network namespace exists already."""
    cluster_dir = Path(state.directory)
    _write_configs(node, cluster_dir, state.registry)
    pki.issue_certificate(cluster_dir, node.name, f"system:node:{node.name}", ("system:nodes",))
    pki.write_kubeconfig(cluster_dir, node.name, server)
    # kube-proxy's user: the bootstrap policy binds system:kube-proxy to the node-proxier role.
    pki.issue_certificate(cluster_dir, f"{node.name}-proxy", "system:kube-proxy")
    pki.write_kubeconfig(cluster_dir, f"{node.name}-proxy", server)
    network = namespaces.setup_script(node.slot)
    script = configs.namespace_script(node.directory / "fakes", network)
    holder = ["nsenter", f"--net=/run/netns/{node.slot.name}", "unshare", "--mount", "--propagation", "private"]
    state.add(processes.spawn(state.name, state.logs, node.process_name("namespace"), [*holder, "sh", "-c", script]))
    processes.wait_for(
        "the node's network",
        lambda: node.ip in node.command(state, "ip", "-4", "-o", "addr").stdout,
        30,
        state.processes,
        state.logs,
    )
    cgroups.create(node.slot)
    start_daemons(state, node, cluster_dir)


def _daemon_argv(node: KubeletNode, cluster_dir: Path) -> dict[str, list[str]]:
    d, binaries = node.directory, toolchain.node_bin()
    return {
        "containerd": ["containerd", "--config", str(d / "containerd.toml")],
        "kubelet": [
            str(binaries / "kubelet"),
            f"--config={d}/kubelet.yaml",
            f"--kubeconfig={cluster_dir / node.name}.kubeconfig",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            f"--root-dir={node.slot.kubelet_root}",
            f"--cert-dir={d}/kubelet-pki",
            "--v=1",
        ],
        "kube-proxy": [str(binaries / "kube-proxy"), f"--config={d}/kube-proxy.yaml", "--v=1"],
        "coredns": [str(binaries / "coredns"), "-conf", str(d / "Corefile")],
    }


def start_daemons(state: ClusterState, node: KubeletNode, cluster_dir: Path, only: tuple[str, ...] = DAEMONS) -> None:
    enter = node.enter(state)
    argv = _daemon_argv(node, cluster_dir)
    for daemon in (d for d in DAEMONS if d in only):
        state.add(processes.spawn(state.name, state.logs, node.process_name(daemon), [*enter, *argv[daemon]]))
        if daemon == "containerd":
            processes.wait_for("containerd", lambda: Path(node.slot.socket).exists(), 30, state.processes, state.logs)


def exited(state: ClusterState, node: KubeletNode) -> list[str]:
    """The node's daemons that were started and have since exited (none while it is stopped: ``stop`` forgets them)."""
    started = {p.name: p for p in state.processes}
    return [
        d for d in DAEMONS if node.process_name(d) in started and not processes.alive(started[node.process_name(d)])
    ]


def revive(state: ClusterState, node: KubeletNode) -> list[str]:
    """Start again each of the node's daemons that has exited, as a real node's init system restarts a unit that
    failed (systemd's ``Restart=always`` for kubelet and containerd); the daemons started."""
    dead = exited(state, node)
    if dead:
        state.processes = [p for p in state.processes if p.name not in {node.process_name(d) for d in dead}]
        if "containerd" in dead:
            Path(node.slot.socket).unlink(missing_ok=True)
        start_daemons(state, node, Path(state.directory), only=tuple(dead))
    return dead


def log_tail(state: ClusterState, node: KubeletNode, daemon: str, lines: int = 12) -> list[str]:
    """The last lines of one of the node's daemons' logs (none when it never wrote one)."""
    log = state.logs / f"{node.process_name(daemon)}.log"
    return log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []


def stop(state: ClusterState, node: KubeletNode) -> None:
    """Vanish abruptly: cut the link, then SIGKILL the daemons and every container process of the node."""
    namespaces.cut(node.slot)
    holder = state.process(node.process_name("namespace")).pid
    daemons = [p for p in state.processes if p.name in {node.process_name(d) for d in DAEMONS}]
    for _ in range(10):
        doomed = {p.pid for p in daemons if processes.alive(p)}
        doomed |= cgroups.pids_in(node.slot) | (namespaces.pids_in(node.slot) - {holder})
        if not doomed:
            break
        processes.kill_all(doomed)
        time.sleep(0.3)
    state.processes = [p for p in state.processes if p not in daemons]
    state.save()


def start(state: ClusterState, node: KubeletNode) -> None:
    """Bring a stopped node back: the link up, its daemons started again on the same namespace."""
    namespaces.mend(node.slot)
    (Path(node.slot.socket)).unlink(missing_ok=True)
    start_daemons(state, node, Path(state.directory))
