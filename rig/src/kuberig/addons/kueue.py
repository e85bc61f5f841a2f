"""Kueue (sigs.k8s.io/kueue), the Kubernetes job queue, as a plain process beside a cluster: it admits the
suspended jobs of the integrations it is given, as it does on a real cluster (``scripts/build-kueue.sh`` builds
it).

What its Deployment would have is given in its stead: Kueue's own CRDs and webhooks, read unchanged from the
Kueue module in the Go module cache (the JobSet CRD from JobSet's module: Kueue's TrainJob integration watches
JobSets); the webhooks reach the process at a ``url`` on the host's loopback, where the API server runs, with a
certificate from the cluster's CA. Only the webhooks of Kueue's own objects and of the enabled integrations are
registered, so nothing else in the cluster waits on Kueue, and `stop` removes them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kuberig import pki, processes, toolchain
from kuberig.cluster.controlplane import free_port
from kuberig.cluster.handle import Cluster
from kuberig.images.registry import serving_http

METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go: not a setting
NAMESPACE = "kueue-system"
WEBHOOK_CONFIG = "kuberig-kueue"  # the name of the webhook configurations this module registers
# The API group each integration's webhooks are registered for (Kueue's framework name -> group).
FRAMEWORK_GROUPS = {"trainer.kubeflow.org/trainjob": "trainer.kubeflow.org", "batch/job": "batch"}


def binary() -> Path:
    version = toolchain.versions()["KUEUE_VERSION"]
    return toolchain.cache_dir() / "kueue" / f"kueue-{version}" / "bin" / "kueue"


def module_dir(module: str, version: str) -> Path:
    """Where the Go module cache holds ``module@version`` (downloaded by the build)."""
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOPATH": str(toolchain.gopath())},
    )
    return Path(json.loads(found.stdout)["Dir"])


def crd_files() -> list[Path]:
    """Kueue's CRDs, and JobSet's at the version Kueue's module requires."""
    kueue = module_dir("sigs.k8s.io/kueue", toolchain.versions()["KUEUE_VERSION"])
    required = (kueue / "go.mod").read_text().split("sigs.k8s.io/jobset ", 1)[1].split()[0]
    jobset = module_dir("sigs.k8s.io/jobset", required)
    bases = sorted((kueue / "config" / "components" / "crd" / "bases").glob("*.yaml"))
    return [*bases, jobset / "config" / "components" / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml"]


def webhook_configurations(port: int, ca_bundle: bytes, groups: set[str]) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, with only the webhooks of ``groups`` (Kueue's own group is always
    kept), each reaching ``https://127.0.0.1:PORT`` at its own path."""
    kueue = module_dir("sigs.k8s.io/kueue", toolchain.versions()["KUEUE_VERSION"])
    manifests = kueue / "config" / "components" / "webhook" / "manifests.yaml"
    wanted = {"kueue.x-k8s.io", *groups}
    found = []
    for document in yaml.safe_load_all(manifests.read_text()):
        kept = []
        for hook in document.get("webhooks") or []:
            hook_groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if hook_groups and hook_groups <= wanted:
                path = hook["clientConfig"]["service"]["path"]
                url = f"https://127.0.0.1:{port}{path}"
                kept.append({**hook, "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()}})
        suffix = "mutating" if document["kind"].startswith("Mutating") else "validating"
        metadata = {"name": f"{WEBHOOK_CONFIG}-{suffix}"}
        found.append(
            {"apiVersion": document["apiVersion"], "kind": document["kind"], "metadata": metadata, "webhooks": kept}
        )
    return found


@dataclass
class Kueue:
    rig: Cluster
    process: subprocess.Popen[bytes]
    log: Path
    made_metrics_dir: bool
    webhooks: list[str] = field(default_factory=list)

    def stop(self) -> None:
        for kind_and_name in self.webhooks:
            self.rig.kubectl("delete", kind_and_name, "--ignore-not-found", check=False)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        if self.made_metrics_dir:
            shutil.rmtree(METRICS_CERT_DIR.parents[1], ignore_errors=True)


def _configuration(directory: Path, health: int, webhook: int) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
        "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(directory)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
    }


def start(rig: Cluster, directory: Path, frameworks: tuple[str, ...] = ("trainer.kubeflow.org/trainjob",)) -> Kueue:
    """Install Kueue's CRDs and webhooks and start Kueue with ``frameworks`` enabled; wait until it is ready
    and its webhooks answer."""
    for crd in crd_files():
        rig.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    rig.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    rig.kubectl("create", "namespace", NAMESPACE, check=False)
    directory.mkdir(parents=True, exist_ok=True)
    pki.issue_certificate(rig.directory, "kueue-webhook", "kueue-webhook", server_ips=("127.0.0.1",))
    shutil.copy(rig.directory / "kueue-webhook.crt", directory / "tls.crt")
    shutil.copy(rig.directory / "kueue-webhook.key", directory / "tls.key")
    made_metrics_dir = not METRICS_CERT_DIR.parents[1].exists()
    METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        shutil.copy(directory / name, METRICS_CERT_DIR / name)
    health, webhook = free_port(), free_port()
    config = {**_configuration(directory, health, webhook), "integrations": {"frameworks": list(frameworks)}}
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    log = directory / "kueue.log"
    env = {**os.environ, "KUBECONFIG": str(rig.kubeconfig)}
    # The visibility API (pending workloads, an aggregated API server) wants certificates of its own at a fixed
    # path and an APIService the rig cannot route to: off, as it is where no one asks for it.
    argv = [str(binary()), f"--config={directory / 'config.yaml'}", "--feature-gates=VisibilityOnDemand=false"]
    with open(log, "ab") as out:
        process = subprocess.Popen([*argv, "--zap-log-level=2"], stdout=out, stderr=subprocess.STDOUT, env=env)
    kueue = Kueue(rig, process, log, made_metrics_dir)
    try:
        processes.wait_for("Kueue's /readyz", lambda: _ready(kueue, health), 120)
        groups = {FRAMEWORK_GROUPS[f] for f in frameworks if f in FRAMEWORK_GROUPS}
        for configuration in webhook_configurations(webhook, (rig.directory / "ca.crt").read_bytes(), groups):
            path = directory / f"{configuration['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(configuration))
            rig.kubectl("apply", "-f", str(path))
            kueue.webhooks.append(f"{configuration['kind'].lower()}/{configuration['metadata']['name']}")
    except BaseException:
        kueue.stop()
        raise
    return kueue


def _ready(kueue: Kueue, health: int) -> bool:
    if kueue.process.poll() is not None:
        raise RuntimeError(f"Kueue exited: {kueue.log.read_text()[-3000:]}")
    with contextlib.suppress(OSError):
        return serving_http(f"http://127.0.0.1:{health}/readyz")
    return False
