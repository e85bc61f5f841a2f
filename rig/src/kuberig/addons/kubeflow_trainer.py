"""Kubeflow Trainer v2's controller manager and the JobSet controller it drives, as plain processes beside a
cluster: the anchor a TrainJob controller is measured beside (``scripts/build-kubeflow-trainer.sh`` builds
them; ``addons/controllers.py`` says how such a controller runs here).

Trainer's and JobSet's CRDs are read unchanged from their modules in the Go module cache. JobSet's webhooks for
JobSets are registered (its defaulting makes the Jobs valid: a Job's Pods restart OnFailure); its Pod webhooks
and Trainer's own validating webhooks are not, so nothing else in the cluster waits on them. Only one TrainJob
controller may run at a time: `start` installs Trainer's CRDs, and another controller's must be applied again
afterwards.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kuberig import toolchain
from kuberig.addons import controllers
from kuberig.cluster.handle import Cluster
from kuberig.ports import free_port

CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # controller-runtime's default: not a Trainer setting
NAMESPACE = "kubeflow-system"


def _versions() -> tuple[str, str]:
    found = toolchain.versions()
    return found["KUBEFLOW_TRAINER_VERSION"], found["JOBSET_VERSION"]


def binaries() -> tuple[Path, Path]:
    trainer, jobset = _versions()
    cache = toolchain.cache_dir()
    return (
        cache / "kubeflow" / f"trainer-{trainer}" / "bin" / "trainer-controller-manager",
        cache / "jobset" / f"jobset-{jobset}" / "bin" / "jobset",
    )


def modules() -> tuple[Path, Path]:
    trainer, jobset = _versions()
    return (
        controllers.module_dir("github.com/kubeflow/trainer/v2", trainer),
        controllers.module_dir("sigs.k8s.io/jobset", jobset),
    )


def crd_files() -> list[Path]:
    trainer, jobset = modules()
    return [
        *sorted((trainer / "manifests" / "base" / "crds").glob("trainer.kubeflow.org_*.yaml")),
        jobset / "config" / "components" / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml",
    ]


@dataclass
class KubeflowTrainer:
    trainer: controllers.Controller
    jobset: controllers.Controller

    def stop(self) -> None:
        self.trainer.stop()
        self.jobset.stop()


def _jobset_config(directory: Path, health: int, webhook: int) -> dict[str, Any]:
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(directory)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def _trainer_config(health: int) -> dict[str, Any]:
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port(), "host": "127.0.0.1"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "statusServer": {"port": free_port()},
    }


def start(rig: Cluster, directory: Path) -> KubeflowTrainer:
    """Install Trainer's and JobSet's CRDs, start JobSet (and register its JobSet webhooks), then Trainer."""
    controllers.apply_crds(rig, crd_files())
    rig.kubectl("create", "namespace", NAMESPACE, check=False)
    made_cert_dir = not CERT_DIR.parent.exists()
    controllers.serving_certificate(rig, "kubeflow-trainer-webhook", directory, CERT_DIR)
    jobset_health, jobset_webhook, trainer_health = free_port(), free_port(), free_port()
    (directory / "jobset.yaml").write_text(yaml.safe_dump(_jobset_config(directory, jobset_health, jobset_webhook)))
    (directory / "trainer.yaml").write_text(yaml.safe_dump(_trainer_config(trainer_health)))
    trainer_binary, jobset_binary = binaries()
    jobset = controllers.launch(rig, "jobset", [str(jobset_binary), f"--config={directory / 'jobset.yaml'}"], directory)
    started = [jobset]
    try:
        jobset.wait_ready(f"http://127.0.0.1:{jobset_health}/readyz")
        manifests = modules()[1] / "config" / "components" / "webhook" / "manifests.yaml"
        ca = (rig.directory / "ca.crt").read_bytes()
        hooks = controllers.webhook_configurations(manifests, "kuberig-jobset", jobset_webhook, ca, {"jobset.x-k8s.io"})
        jobset.register_webhooks(hooks, directory)
        argv = [str(trainer_binary), f"--config={directory / 'trainer.yaml'}"]
        trainer = controllers.launch(rig, "kubeflow-trainer", argv, directory)
        started.append(trainer)
        if made_cert_dir:
            trainer.on_stop.append(lambda: shutil.rmtree(CERT_DIR.parent, ignore_errors=True))
        trainer.wait_ready(f"http://127.0.0.1:{trainer_health}/readyz")
    except BaseException:
        for controller in reversed(started):
            controller.stop()
        raise
    return KubeflowTrainer(trainer, jobset)
