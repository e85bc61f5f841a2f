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

import shutil
from pathlib import Path

from kuberig import toolchain
from kuberig.addons import controllers
from kuberig.cluster.handle import Cluster
from kuberig.ports import free_port

CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert/cert.go: not a flag
INIT_IMAGE = "alpine:3.10"


def binary() -> Path:
    version = toolchain.versions()["KUBEFLOW_OPERATOR_VERSION"]
    return toolchain.cache_dir() / "kubeflow" / f"training-operator-{version}" / "bin" / "training-operator"


def crd_file() -> Path:
    """Kubeflow's PyTorchJob CRD, from the module the operator was built from."""
    version = toolchain.versions()["KUBEFLOW_OPERATOR_VERSION"]
    module = controllers.module_dir("github.com/kubeflow/training-operator", version)
    return module / "manifests" / "base" / "crds" / "kubeflow.org_pytorchjobs.yaml"


def push_init_image(cluster: Cluster) -> None:
    # The init container's whole use of alpine is `sh`, `seq`, `sleep` and an nslookup that succeeds once the
    # master's name resolves. Debian's static busybox fails that nslookup whenever one search domain answers
    # NXDOMAIN, so the stand-in is the node's Debian base with an nslookup that asks the resolver, as libc does.
    nslookup = b"#!/usr/bin/python3\nimport socket, sys\nprint(socket.gethostbyname(sys.argv[1]))\n"
    cluster.push_image(INIT_IMAGE, {"/usr/local/bin/nslookup": nslookup})


def start(rig: Cluster, directory: Path) -> controllers.Controller:
    """Install Kubeflow's CRD and start its operator (PyTorchJob only, one worker thread, as it defaults).
    (On `stop`, v1.8.1 panics with "close of closed channel" after a clean stop, an upstream bug: exit 2 is
    normal.)"""
    controllers.apply_crds(rig, [crd_file()])
    rig.kubectl("create", "namespace", "kubeflow", check=False)
    rig.kubectl("create", "secret", "generic", "training-operator-webhook-cert", "-n", "kubeflow", check=False)
    directory.mkdir(parents=True, exist_ok=True)
    # Any certificate will do: no webhook configuration points the API server at it.
    made_cert_dir = not CERT_DIR.parent.exists()
    controllers.serving_certificate(rig, "kubeflow-webhook", CERT_DIR)
    health = free_port()
    argv = [
        str(binary()),
        f"--kubeconfig={rig.kubeconfig}",
        "--enable-scheme=pytorchjob",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--webhook-server-port={free_port()}",
        "--zap-devel=false",
    ]
    operator = controllers.launch(rig, "kubeflow-operator", argv, directory)
    if made_cert_dir:
        operator.on_stop.append(lambda: shutil.rmtree(CERT_DIR.parent, ignore_errors=True))
    try:
        operator.wait_ready(f"http://127.0.0.1:{health}/readyz", 60)
    except BaseException:
        operator.stop()
        raise
    return operator
