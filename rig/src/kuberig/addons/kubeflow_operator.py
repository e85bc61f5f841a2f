"""Kubeflow's own training-operator (v1) as a plain process against a cluster: the anchor a PyTorchJob
operator is measured beside, on the same nodes (``scripts/build-kubeflow-operator.sh`` builds it).

Run out of cluster, it needs what its Deployment would have mounted: the Secret its certificate rotator fills
(in namespace ``kubeflow``) and a serving certificate in the directory its code hard-codes. Without a
ValidatingWebhookConfiguration the API server never calls its webhook, so none is installed. Only one
PyTorchJob operator may run at a time: `start` installs Kubeflow's CRD, and another operator's CRD must be
applied again afterwards (Kubeflow's schema prunes status fields it does not know).

Worker Pods get Kubeflow's init container, which loops on ``nslookup <job>-master-0`` in ``alpine:3.10``;
`push_init_image` publishes a stand-in under that name to the cluster's registry.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kuberig import pki, processes, toolchain
from kuberig.cluster.controlplane import free_port
from kuberig.cluster.handle import Cluster
from kuberig.images.registry import serving_http

CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert/cert.go: not a flag
INIT_IMAGE = "alpine:3.10"


def binary() -> Path:
    version = toolchain.versions()["KUBEFLOW_OPERATOR_VERSION"]
    return toolchain.cache_dir() / "kubeflow" / f"training-operator-{version}" / "bin" / "training-operator"


def crd_file() -> Path:
    """Kubeflow's PyTorchJob CRD, from the module the operator was built from."""
    version = toolchain.versions()["KUBEFLOW_OPERATOR_VERSION"]
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"github.com/kubeflow/training-operator@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOPATH": str(toolchain.cache_dir() / "gopath")},
    )
    return Path(json.loads(found.stdout)["Dir"]) / "manifests" / "base" / "crds" / "kubeflow.org_pytorchjobs.yaml"


def push_init_image(cluster: Cluster) -> None:
    # The init container's whole use of alpine is `sh`, `seq`, `sleep` and an nslookup that succeeds once the
    # master's name resolves. Debian's static busybox fails that nslookup whenever one search domain answers
    # NXDOMAIN, so the stand-in is the node's Debian base with an nslookup that asks the resolver, as libc does.
    nslookup = b"#!/usr/bin/python3\nimport socket, sys\nprint(socket.gethostbyname(sys.argv[1]))\n"
    cluster.push_image(INIT_IMAGE, {"/usr/local/bin/nslookup": nslookup})


@dataclass
class KubeflowOperator:
    process: subprocess.Popen[bytes]
    log: Path
    made_cert_dir: bool

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            # v1.8.1 panics with "close of closed channel" after a clean stop (upstream bug): exit 2 is normal.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        if self.made_cert_dir:
            shutil.rmtree(CERT_DIR.parent, ignore_errors=True)


def start(rig: Cluster, directory: Path) -> KubeflowOperator:
    """Install Kubeflow's CRD and start its operator (PyTorchJob only, one worker thread, as it defaults)."""
    rig.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd_file()))
    rig.kubectl("wait", "--for=condition=Established", "crd/pytorchjobs.kubeflow.org", "--timeout=60s")
    rig.kubectl("create", "namespace", "kubeflow", check=False)
    rig.kubectl("create", "secret", "generic", "training-operator-webhook-cert", "-n", "kubeflow", check=False)
    directory.mkdir(parents=True, exist_ok=True)
    # Any certificate will do: no webhook configuration points the API server at it.
    name = "kubeflow-webhook"
    pki.issue_certificate(rig.directory, name, "training-operator.kubeflow.svc", server_ips=("127.0.0.1",))
    made_cert_dir = not CERT_DIR.parent.exists()
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy(rig.directory / f"{name}.crt", CERT_DIR / "tls.crt")
    shutil.copy(rig.directory / f"{name}.key", CERT_DIR / "tls.key")
    health = free_port()
    log = directory / "kubeflow-operator.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                str(binary()),
                f"--kubeconfig={rig.kubeconfig}",
                "--enable-scheme=pytorchjob",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--webhook-server-port={free_port()}",
                "--zap-devel=false",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    operator = KubeflowOperator(process, log, made_cert_dir)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"Kubeflow's operator exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            return serving_http(f"http://127.0.0.1:{health}/readyz")
        return False

    try:
        processes.wait_for("Kubeflow's operator /readyz", ready, 60)
    except BaseException:
        operator.stop()
        raise
    return operator
