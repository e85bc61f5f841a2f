"""Kueue (sigs.k8s.io/kueue), the Kubernetes job queue, as a plain process beside a cluster: it admits the
suspended jobs of the integrations it is given, as it does on a real cluster (``scripts/build-kueue.sh`` builds
it; ``addons/controllers.py`` says how such a controller runs here).

Kueue's own CRDs and webhooks are read unchanged from its module in the Go module cache, and JobSet's CRD from
JobSet's (Kueue's TrainJob integration watches JobSets). Registered: the webhooks of Kueue's own objects and of
the enabled integrations.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from kuberig import toolchain
from kuberig.addons import controllers
from kuberig.cluster.handle import Cluster
from kuberig.ports import free_port

METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # cmd/kueue/main.go: not a setting
NAMESPACE = "kueue-system"
# The API group each integration's webhooks are registered for (Kueue's framework name -> group).
FRAMEWORK_GROUPS = {"trainer.kubeflow.org/trainjob": "trainer.kubeflow.org", "batch/job": "batch"}


def binary() -> Path:
    version = toolchain.versions()["KUEUE_VERSION"]
    return toolchain.cache_dir() / "kueue" / f"kueue-{version}" / "bin" / "kueue"


def module() -> Path:
    return controllers.module_dir("sigs.k8s.io/kueue", toolchain.versions()["KUEUE_VERSION"])


def crd_files() -> list[Path]:
    """Kueue's CRDs, and JobSet's at the version Kueue's module requires."""
    kueue = module()
    jobset = controllers.module_dir("sigs.k8s.io/jobset", controllers.required_version(kueue, "sigs.k8s.io/jobset"))
    bases = sorted((kueue / "config" / "components" / "crd" / "bases").glob("*.yaml"))
    return [*bases, jobset / "config" / "components" / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml"]


def _configuration(directory: Path, health: int, webhook: int, frameworks: tuple[str, ...]) -> dict[str, Any]:
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
        "integrations": {"frameworks": list(frameworks)},
    }


def start(
    rig: Cluster, directory: Path, frameworks: tuple[str, ...] = ("trainer.kubeflow.org/trainjob",)
) -> controllers.Controller:
    """Install Kueue's CRDs and start Kueue with ``frameworks`` enabled; once it is ready, register its
    webhooks. `stop` on the result ends it and removes them."""
    controllers.apply_crds(rig, crd_files())
    rig.kubectl("create", "namespace", NAMESPACE, check=False)
    made_metrics_dir = not METRICS_CERT_DIR.parents[1].exists()
    controllers.serving_certificate(rig, "kueue-webhook", directory, METRICS_CERT_DIR)
    health, webhook = free_port(), free_port()
    (directory / "config.yaml").write_text(yaml.safe_dump(_configuration(directory, health, webhook, frameworks)))
    # The visibility API (pending workloads, an aggregated API server) wants certificates of its own at a fixed
    # path and an APIService the rig cannot route to: off, as it is where no one asks for it.
    argv = [str(binary()), f"--config={directory / 'config.yaml'}", "--feature-gates=VisibilityOnDemand=false"]
    kueue = controllers.launch(rig, "kueue", argv, directory)
    if made_metrics_dir:
        kueue.on_stop.append(lambda: shutil.rmtree(METRICS_CERT_DIR.parents[1], ignore_errors=True))
    try:
        kueue.wait_ready(f"http://127.0.0.1:{health}/readyz")
        manifests = module() / "config" / "components" / "webhook" / "manifests.yaml"
        groups = {"kueue.x-k8s.io", *(FRAMEWORK_GROUPS[f] for f in frameworks if f in FRAMEWORK_GROUPS)}
        ca = (rig.directory / "ca.crt").read_bytes()
        kueue.register_webhooks(
            controllers.webhook_configurations(manifests, "kuberig-kueue", webhook, ca, groups), directory
        )
    except BaseException:
        kueue.stop()
        raise
    return kueue
