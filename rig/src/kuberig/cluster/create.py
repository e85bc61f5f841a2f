"""Create a cluster: one ordered list of steps (kind's ``create.Cluster``). Steps do not tidy up after
themselves: if any fails, ``delete`` removes whatever the earlier ones made."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kuberig import naming, pki, processes, toolchain
from kuberig.cluster import controlplane
from kuberig.cluster.delete import delete
from kuberig.cluster.handle import Cluster
from kuberig.config import ClusterConfig
from kuberig.images import registry
from kuberig.network import addresses, namespaces
from kuberig.node import kubelet, kwok, resources
from kuberig.node.configs import PAUSE_IMAGE
from kuberig.ports import free_port
from kuberig.state import ClusterState, NodeState

CLIENTS = ("admin", "controller-manager", "scheduler", "kwok")


@dataclass
class _Context:
    config: ClusterConfig
    state: ClusterState
    timeout: float

    @property
    def directory(self) -> Path:
        return Path(self.state.directory)

    @property
    def server(self) -> str:
        return f"https://{self.state.address}:{self.state.ports['apiserver']}"

    def wait(self, what: str, check: processes.Check, timeout: float | None = None) -> None:
        processes.wait_for(what, check, timeout or self.timeout, self.state.processes, self.state.logs)


def _check_binaries(ctx: _Context) -> None:
    missing = toolchain.missing_control_plane() + (toolchain.missing_node() if ctx.config.kubelets else [])
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)} in {toolchain.cache_dir()}: run `kube-rig build`")


def _claim_slots(ctx: _Context) -> None:
    """Each real node gets a slot and a network namespace; the API server listens on the first node's link."""
    taken = processes.run("ip", "-4", "-o", "addr")
    for i in range(ctx.config.kubelets):
        slot = naming.claim(ctx.state.name, taken)
        gpus = next(n.gpus for n in ctx.config.nodes if n.kind == "kubelet")
        ctx.state.nodes.append(NodeState(f"kubelet-node-{i}", "kubelet", slot.node_ip, slot.index, gpus))
        ctx.state.save()
        namespaces.create(slot)
    first = next((n.slot for n in ctx.state.nodes if n.slot is not None), None)
    if first is not None:
        slot = naming.Slot(first)
        ctx.state.address = ctx.state.host_ip = slot.host_ip
        ctx.state.registry = f"{slot.host_ip}:{free_port(slot.host_ip)}"
        ctx.state.save()


def _certificates(ctx: _Context) -> None:
    pki.control_plane_certificates(ctx.directory, ctx.state.address)
    for name in CLIENTS:
        pki.write_kubeconfig(ctx.directory, name, ctx.server)


def _control_plane(ctx: _Context) -> None:
    controlplane.start(ctx.state, ctx.config.component_args(), ctx.timeout)


def _kwok_nodes(ctx: _Context) -> None:
    if not ctx.config.kwoks:
        return
    cluster = Cluster(ctx.directory)
    cluster.kubectl("apply", "--server-side", "-f", str(kwok.logs_crd()))
    argv = kwok.controller_argv(ctx.directory, ctx.state.ports["kwok"])
    ctx.state.add(processes.spawn(ctx.state.name, ctx.state.logs, "kwok", argv))
    gpus = next(n.gpus for n in ctx.config.nodes if n.kind == "kwok")
    # Addresses of their own (network/addresses.py), from a slot of their own: deleted with the cluster's slots.
    slot = None
    if os.geteuid() == 0:
        slot = naming.claim(ctx.state.name, processes.run("ip", "-4", "-o", "addr"))
    else:
        print(f"kube-rig: not root: the simulated nodes share {addresses.SHARED} and cannot vanish", file=sys.stderr)
    for i, address in enumerate(addresses.for_nodes(slot, ctx.config.kwoks)):
        name = f"kwok-node-{i}"
        if slot is not None:
            addresses.assign(slot, address)
        ctx.state.nodes.append(NodeState(name, "kwok", address, slot.index if slot else None, gpus=gpus))
        cluster.apply(kwok.node_object(name, address))
    ctx.state.save()


def _registry(ctx: _Context) -> None:
    if not ctx.state.registry:
        return
    storage = ctx.directory / "registry"
    (ctx.directory / "registry.yaml").write_text(registry.config(ctx.state.registry, storage))
    argv = [str(toolchain.node_bin() / "registry"), "serve", str(ctx.directory / "registry.yaml")]
    ctx.state.add(processes.spawn(ctx.state.name, ctx.state.logs, "registry", argv))
    ctx.wait("the registry", lambda: registry.serving(ctx.state.registry), 30)
    pause = toolchain.node_bin() / "pause"
    Cluster(ctx.directory).push_image(PAUSE_IMAGE, {"/pause": pause}, base=False, entrypoint=["/pause"])


def _kubelet_nodes(ctx: _Context) -> None:
    for node in ctx.state.nodes:
        if node.kind == "kubelet":
            kubelet.provision(ctx.state, kubelet.node_of(ctx.state, node), ctx.server, ctx.timeout)


def _ready(ctx: _Context) -> None:
    cluster = Cluster(ctx.directory)
    expected = len(ctx.state.nodes)

    def nodes_ready() -> bool:
        items = cluster.kubectl_json("get", "nodes")["items"]
        conditions = (n.get("status", {}).get("conditions", []) for n in items)
        return sum(any(c["type"] == "Ready" and c["status"] == "True" for c in cs) for cs in conditions) == expected

    def default_service_account() -> bool:
        return cluster.kubectl("get", "serviceaccount", "default", check=False).returncode == 0

    ctx.wait(f"{expected} Ready nodes", nodes_ready)
    ctx.wait("the default service account", default_service_account)
    for node in ctx.state.nodes:
        if node.gpus:
            resources.advertise(cluster, node.name, resources.GPU, node.gpus)


STEPS: tuple[Callable[[_Context], None], ...] = (
    _check_binaries,
    _claim_slots,
    _certificates,
    _control_plane,
    _kwok_nodes,
    _registry,
    _kubelet_nodes,
    _ready,
)


def create(config: ClusterConfig, directory: Path | None = None, timeout: float = 120) -> Cluster:
    """Create the cluster ``config`` describes, its files in ``directory`` (a new temporary folder unless
    given); on any failure, delete what was made and raise."""
    config.validate()
    directory = Path(directory or tempfile.mkdtemp(prefix=f"kuberig-{config.name}-"))
    directory.mkdir(parents=True, exist_ok=True)
    shm = Path("/dev/shm")
    etcd_data = tempfile.mkdtemp(
        prefix=f"kuberig-{config.name}-etcd-", dir=shm if os.access(shm, os.W_OK) else directory
    )
    ports = {n: free_port("0.0.0.0" if n == "kwok" else "127.0.0.1") for n in controlplane.PORTS}
    ctx = _Context(config, ClusterState(config.name, str(directory), etcd_data, ports), timeout)
    ctx.state.save()
    try:
        for step in STEPS:
            step(ctx)
    except BaseException:
        delete(config.name, directory)
        raise
    return Cluster(directory)
