"""The torchjob operator as a real process on the host, running as the least-privilege account deploy/
creates: the CRD, namespace and RBAC applied as they ship, and a token kubeconfig for its ServiceAccount."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kuberig import Cluster
from kuberig.pki import write_token_kubeconfig
from tests.support.paths import DEPLOY
from tests.support.servers import free_port


class OperatorProcess:
    """``torchjob operator`` as a process, with its health port on loopback."""

    def __init__(self, kubeconfig: Path, log: Path, args: tuple[str, ...] = ("--all-namespaces",)) -> None:
        self.kubeconfig, self.log, self.args = kubeconfig, log, args
        self.health_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torchjob.cli.main",
                    "operator",
                    *self.args,
                    f"--kubeconfig={self.kubeconfig}",
                    f"--health-port={self.health_port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self.ready():
            assert self.process.poll() is None, f"the operator exited: {self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "the operator never became ready"
            time.sleep(0.1)

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as answer:
            return bytes(answer.read())

    def ready(self) -> bool:
        try:
            self._get("/readyz")
            return True
        except OSError:
            return False

    def counters(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self._get("/counters"))
        return data

    def prometheus(self) -> str:
        """The operator's /metrics, as Prometheus scrapes it."""
        return self._get("/metrics").decode()

    def kill(self) -> None:
        """SIGKILL: no chance to tidy up, as when its node dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def install(cluster: Cluster) -> None:
    """deploy/'s namespace, CRDs (PyTorchJob, Trainer's for TrainJobs, TorchElastic's ElasticJob) and RBAC, as they
    ship."""
    for manifest in ("namespace.yaml", "crd.yaml", "trainer-crds.yaml", "elasticjob-crd.yaml", "rbac.yaml"):
        cluster.kubectl("apply", "-f", str(DEPLOY / manifest))
    crds = ["crd/pytorchjobs.kubeflow.org", "crd/elasticjobs.elastic.pytorch.org"]
    crds += [
        f"crd/{plural}.trainer.kubeflow.org" for plural in ("trainjobs", "clustertrainingruntimes", "trainingruntimes")
    ]
    cluster.kubectl("wait", "--for=condition=Established", *crds, "--timeout=60s")


def operator_kubeconfig(cluster: Cluster, path: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount (a token, as a Pod of its Deployment would hold)."""
    token = cluster.kubectl("create", "token", "torchjob-operator", "-n", "torchjob-system", "--duration=4h").stdout
    return write_token_kubeconfig(path, "torchjob-operator", cluster.server, cluster.directory / "ca.crt", token)


def deploy_operator(cluster: Cluster, directory: Path, *args: str) -> OperatorProcess:
    """The CRD, namespace and RBAC from deploy/ applied as they ship, and the operator running with them."""
    directory.mkdir(parents=True, exist_ok=True)
    install(cluster)
    kubeconfig = operator_kubeconfig(cluster, directory / "operator.kubeconfig")
    process = OperatorProcess(kubeconfig, directory / "operator.log", ("--all-namespaces", *args))
    process.start()
    return process
