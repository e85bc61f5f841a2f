"""The control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler as plain processes.

Security is real: TLS with the cluster's CA, client-certificate authentication, RBAC, service-account tokens.
Ports are picked free at start (``ports.py``: outside the range outbound connections take theirs from), so two
clusters on one machine never collide.
"""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path

from kuberig import processes, toolchain
from kuberig.state import ClusterState

PORTS = ("etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok")
SERVICE_RANGE = "10.0.0.0/24"


def etcd_argv(data: str, ports: dict[str, int]) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['etcd_peer']}"
    return [
        str(toolchain.control_plane_bin() / "etcd"),
        "--name=rig",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=rig={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_argv(d: Path, address: str, ports: dict[str, int], extra: tuple[str, ...] = ()) -> list[str]:
    return [
        str(toolchain.control_plane_bin() / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        f"--bind-address={address}",
        f"--advertise-address={address}",
        f"--secure-port={ports['apiserver']}",
        f"--cert-dir={d}",
        f"--tls-cert-file={d}/apiserver.crt",
        f"--tls-private-key-file={d}/apiserver.key",
        f"--client-ca-file={d}/ca.crt",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={d}/sa.pub",
        f"--service-account-signing-key-file={d}/sa.key",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={d}/apiserver-kubelet-client.crt",
        f"--kubelet-client-key={d}/apiserver-kubelet-client.key",
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
        "--v=0",
        *extra,
    ]


def _component_argv(binary: str, kubeconfig: Path, port: int, *flags: str) -> list[str]:
    auth = (f"--{k}={kubeconfig}" for k in ("kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"))
    return [
        str(toolchain.control_plane_bin() / binary),
        *auth,
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        "--v=0",
        *flags,
    ]


def controller_manager_argv(d: Path, ports: dict[str, int], extra: tuple[str, ...] = ()) -> list[str]:
    return _component_argv(
        "kube-controller-manager",
        d / "controller-manager.kubeconfig",
        ports["controller_manager"],
        f"--service-account-private-key-file={d}/sa.key",
        f"--root-ca-file={d}/ca.crt",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={d}/ca.crt",
        f"--cluster-signing-key-file={d}/ca.key",
        *extra,
    )


def scheduler_argv(d: Path, ports: dict[str, int], extra: tuple[str, ...] = ()) -> list[str]:
    return _component_argv("kube-scheduler", d / "scheduler.kubeconfig", ports["scheduler"], *extra)


def api_ready(d: Path, server: str) -> bool:
    context = ssl.create_default_context(cafile=str(d / "ca.crt"))
    context.load_cert_chain(str(d / "admin.crt"), str(d / "admin.key"))
    with urllib.request.urlopen(server + "/readyz", context=context, timeout=5) as answer:
        return bool(answer.read() == b"ok")


def start(state: ClusterState, extra: dict[str, tuple[str, ...]], timeout: float) -> None:
    """Start the four components in order, each once the one it needs answers."""
    d, ports = Path(state.directory), state.ports

    def spawn(name: str, argv: list[str]) -> None:
        state.add(processes.spawn(state.name, state.logs, name, argv))

    def wait(what: str, check: processes.Check) -> None:
        processes.wait_for(what, check, timeout, state.processes, state.logs)

    spawn("etcd", etcd_argv(state.etcd_data, ports))
    etcd = f"http://127.0.0.1:{ports['etcd']}/health"
    wait("etcd", lambda: b"true" in urllib.request.urlopen(etcd, timeout=2).read())
    spawn("kube-apiserver", apiserver_argv(d, state.address, ports, extra.get("kube-apiserver", ())))
    server = f"https://{state.address}:{ports['apiserver']}"
    wait("the API server's /readyz", lambda: api_ready(d, server))
    spawn("kube-controller-manager", controller_manager_argv(d, ports, extra.get("kube-controller-manager", ())))
    spawn("kube-scheduler", scheduler_argv(d, ports, extra.get("kube-scheduler", ())))
