"""Simulated nodes: kwok's controller moves their Pods Pending → Running and ends one on an annotation
(``kwok-stages.yaml``); its kubelet server answers ``pods/log`` from a file (``serve_logs``).

Pods never run code on these nodes: they are for tests of controllers (and for many jobs at once).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kuberig import toolchain
from kuberig.kubectl import Kubectl

EXIT_CODE_ANNOTATION = "kwok.kuberig.io/exit-code"
REASON_ANNOTATION = "kwok.kuberig.io/reason"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
STAGES = Path(__file__).with_name("kwok-stages.yaml")
LOGS_SERVED_WITHIN = 30.0  # seconds


@dataclass(frozen=True)
class KwokNode:
    name: str
    ip: str
    slot: int | None = None  # the slot of its address of its own (``network/addresses.py``); None: kwok's shared one
    kind: str = "kwok"


def logs_crd() -> Path:
    """kwok's Logs CRD, from its module (downloaded once into the Go module cache)."""
    version = toolchain.versions()["KWOK_VERSION"]
    module = toolchain.gopath() / "pkg" / "mod" / "sigs.k8s.io" / f"kwok@{version}"
    crd = module / "kustomize" / "crd" / "bases" / "kwok.x-k8s.io_logs.yaml"
    if not crd.exists():
        subprocess.run(
            ["go", "mod", "download", f"sigs.k8s.io/kwok@{version}"],
            check=True,
            env={**os.environ, "GOPATH": str(toolchain.gopath())},
            capture_output=True,
        )
    return crd


def controller_argv(directory: Path, port: int) -> list[str]:
    """kwok's controller, managing only the nodes annotated as fake, its kubelet server on ``port`` of every address
    of this machine: the API server reaches a node's kubelet (``pods/log``) at the node's own address
    (``network/addresses.py``, ``--kubelet-preferred-address-types=InternalIP``), and one server stands for every
    simulated node's kubelet."""
    d = directory
    return [
        str(toolchain.control_plane_bin() / "kwok"),
        f"--kubeconfig={d}/kwok.kubeconfig",
        f"--config={STAGES}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
        "--node-ip=127.0.0.1",
        f"--node-port={port}",
        f"--server-address=0.0.0.0:{port}",
        f"--tls-cert-file={d}/kwok-server.crt",
        f"--tls-private-key-file={d}/kwok-server.key",
        "--cidr=10.244.0.0/16",
        "--node-lease-duration-seconds=40",
        "--enable-crds=Logs",
    ]


def node_object(name: str, address: str) -> dict[str, Any]:
    """A simulated node, at an address of its own (``network/addresses.py``): kwok's node stages keep the
    addresses a Node already has, and give ``--node-ip`` only to one with none."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "status": {"addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]},
    }


def end_pod(api: Kubectl, namespace: str, pod: str, exit_code: int, reason: str | None = None) -> None:
    """Make a running Pod's containers terminate with ``exit_code`` (the ``pod-exit-on-annotation`` stage)."""
    extra = [f"{REASON_ANNOTATION}={reason}"] if reason else []
    api.kubectl("annotate", "-n", namespace, "pod", pod, f"{EXIT_CODE_ANNOTATION}={exit_code}", *extra)


def serve_logs(
    api: Kubectl, namespace: str, pod: str, container: str, lines: list[str], logs_file: Path, wait: bool = True
) -> None:
    """Have kwok's kubelet server answer ``pods/log`` for this container with ``lines`` (followable: lines
    added later with :func:`append_log_lines` reach a ``kubectl logs -f``). With ``wait`` (the Pod exists), it
    returns once they are served: kwok takes up its ``Logs`` object a moment after it is created, and a read
    before that is refused ("no logs found")."""
    logs_file.write_text("")
    append_log_lines(logs_file, lines)
    api.apply(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [{"containers": [container], "logsFile": str(logs_file), "follow": True}]},
        }
    )
    deadline = time.monotonic() + LOGS_SERVED_WITHIN
    while wait:
        read = api.kubectl("logs", "-n", namespace, pod, "-c", container, check=False)
        if read.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"kwok never served the logs of {namespace}/{pod} ({container}): {read.stderr.strip()}")
        time.sleep(0.2)


def append_log_lines(logs_file: Path, lines: list[str]) -> None:
    """Append lines in the CRI log format kwok serves (``<RFC3339Nano> stdout F <line>``)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with open(logs_file, "a") as f:
        f.writelines(f"{stamp} stdout F {line}\n" for line in lines)
