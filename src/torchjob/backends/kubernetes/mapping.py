"""Pure mapping from the planner's world to Kubernetes objects: the Pod and Service manifests of a replica and
of the rendezvous store. No I/O, so it is golden-tested; ``observing.py`` reads Pods back.

Names, labels, env and ownerReferences follow Kubeflow's contract (``<job>-master-0``, ``<job>-worker-<i>``,
one headless Service per Pod with the Pod's name). Two deliberate differences, both invisible to training
scripts and to clients that read Kubeflow's fields:

- Pods get ``restartPolicy: Never`` whatever the replica's restartPolicy says. The replica's policy is
  applied by the planner to the whole DDP group (a new attempt), because a container restarted in place
  cannot rejoin a static DDP group (kubeflow/trainer #1478) and resets the restart count backoffLimit needs
  (#2045).
- The ``pytorch`` container gets ``terminationMessagePolicy: FallbackToLogsOnError`` unless it sets one, so
  the kubelet keeps the last lines of a crash in the Pod status, and the job's Failed condition can say why
  (see ``observing.py``).
"""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.types import DEFAULT_CONTAINER_NAME, DEFAULT_PORT, DEFAULT_PORT_NAME, PyTorchJob, ReplicaType
from torchjob.backends.kubernetes import autoreport_boot, warm_pods
from torchjob.core import replicas
from torchjob.core.envs import DEFAULT_RDZV_PORT, ENV_THREADS, Addressing, replica_env, threads_per_process
from torchjob.core.replicas import ReplicaId

STORE_PORT = DEFAULT_RDZV_PORT
LABEL_ROLE = replicas.LABEL_ROLE
# What the store Pod takes from the Workers' pod template: where it may run and how to pull the image.
_STORE_POD_FIELDS = ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName")


def declared_port(job: PyTorchJob, replica_type: ReplicaType | None = None) -> int:
    """The ``pytorchjob-port`` the replica's ``pytorch`` container declares (defaulting adds 23456)."""
    rtype = replica_type or replicas.rendezvous_replica(job).replica_type
    container = pytorch_container(job.spec.pytorch_replica_specs[rtype].template)
    for port in (container or {}).get("ports") or []:
        if isinstance(port, dict) and port.get("name") == DEFAULT_PORT_NAME and port.get("containerPort"):
            return int(port["containerPort"])
    return DEFAULT_PORT


def addressing(job: PyTorchJob, attempt: int, at_store: bool) -> Addressing:
    """Where the group meets on a cluster: the rendezvous replica's Service name and its declared port.

    ``at_store`` (the planner's decision, ``CreateReplica.rendezvous_at_store``): an elastic c10d job meets at
    torchjob's rendezvous store (``<job>-rdzv``), so that any member can be lost; Kubeflow points it at
    worker-0, whose loss ends the rendezvous for everyone.
    """
    master = replicas.rendezvous_replica(job).pod_name(job.name)
    port = declared_port(job)
    elastic = job.spec.elastic_policy
    rdzv_host = (elastic.rdzv_host if elastic else None) or f"{job.name}-worker-0"
    rdzv_port = (elastic.rdzv_port if elastic else None) or port
    conf: tuple[tuple[str, str], ...] = ()
    if at_store:
        rdzv_host, rdzv_port, conf = store_name(job), store_port(job), (("is_host", "false"),)
    # A fresh rendezvous id per attempt: a restarted group never meets stragglers of the last one.
    rdzv_id = (elastic.rdzv_id if elastic and elastic.rdzv_id else job.name) + f"-{attempt}"
    return Addressing(master, port, rdzv_host, rdzv_port, rdzv_id, rdzv_conf_defaults=conf)


def store_name(job: PyTorchJob) -> str:
    """The rendezvous store's Pod and Service: ``<job>-rdzv`` (no replica is ever named so)."""
    return f"{job.name}-rdzv"


def store_port(job: PyTorchJob) -> int:
    elastic = job.spec.elastic_policy
    return (elastic.rdzv_port if elastic else None) or STORE_PORT


def store_labels(job: PyTorchJob) -> dict[str, str]:
    """Selected by the job's Pod listing (torchjob's job label, operator-name) but with no replica labels, nor
    Kubeflow's job-name label: never a replica, and never one of the job's Pods to Kubeflow's SDK."""
    return {
        replicas.LABEL_OPERATOR: replicas.OPERATOR_NAME,
        replicas.LABEL_JOB: job.name,
        LABEL_ROLE: replicas.ROLE_STORE,
    }


def store_pod_manifest(job: PyTorchJob) -> dict[str, Any]:
    """The Pod that hosts an elastic c10d job's rendezvous store, for every attempt of the job.

    It runs ``torchjob/train/store_server.py`` through ``python -c``, with the Workers' image (which has
    torch, since it runs torchrun) and their scheduling constraints, so it needs nothing of torchjob installed.
    """
    worker = job.spec.pytorch_replica_specs[ReplicaType.WORKER].template
    pod = worker.get("spec") or {}
    container = pytorch_container(worker) or {}
    port = store_port(job)
    spec: dict[str, Any] = {k: copy.deepcopy(pod[k]) for k in _STORE_POD_FIELDS if k in pod}
    # Where the Workers may run, not how they spread: a pod anti-affinity among the ranks, copied to the store,
    # would keep every rank off the store's node (the scheduler honours existing Pods' anti-affinity too).
    node_affinity = (pod.get("affinity") or {}).get("nodeAffinity")
    if node_affinity:
        spec["affinity"] = {"nodeAffinity": copy.deepcopy(node_affinity)}
    spec["restartPolicy"] = "Always"
    spec["containers"] = [
        {
            "name": replicas.ROLE_STORE,
            "image": container.get("image", ""),
            **({"imagePullPolicy": container["imagePullPolicy"]} if "imagePullPolicy" in container else {}),
            "command": ["python", "-c", _store_server_source(), str(port)],
            "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": ENV_THREADS, "value": "1"}],
            "ports": [{"name": "c10d", "containerPort": port, "protocol": "TCP"}],
            # importing torch takes a few hundred MB; the store itself needs next to nothing.
            "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
        }
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": store_name(job),
            "namespace": job.namespace,
            "labels": store_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def store_service_manifest(job: PyTorchJob) -> dict[str, Any]:
    port = store_port(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": store_name(job),
            "namespace": job.namespace,
            "labels": store_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": store_labels(job),
            "ports": [{"name": "c10d", "port": port, "targetPort": port}],
            "publishNotReadyAddresses": True,
        },
    }


def _store_server_source() -> str:
    # Read as text, never imported: the controller side does not import torch.
    return (resources.files("torchjob") / "train" / "store_server.py").read_text()


def owner_reference(job: PyTorchJob) -> dict[str, Any]:
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def service_labels(job: PyTorchJob, replica: ReplicaId) -> dict[str, str]:
    """What a replica's Service selects: its labels without the attempt, so it serves every attempt's Pod."""
    labels = replicas.labels(job, replica, attempt=0)
    labels.pop(replicas.LABEL_ATTEMPT, None)
    return labels


def pod_manifest(
    job: PyTorchJob,
    replica: ReplicaId,
    attempt: int,
    report_url: str | None = None,
    at_store: bool = False,
    report_ca: str | None = None,
) -> dict[str, Any]:
    """The Pod of one replica for one attempt; with ``report_url`` (the operator's report endpoint, see
    ``with_report_channel``), its containers can send torchjob.train's progress there. ``at_store``: see
    ``addressing``."""
    template = copy.deepcopy(job.spec.pytorch_replica_specs[replica.replica_type].template)
    metadata = template.get("metadata") or {}
    spec = template.get("spec") or {}
    spec["restartPolicy"] = "Never"
    grace = job.annotation(extensions.TERMINATION_GRACE)
    if grace is not None and "terminationGracePeriodSeconds" not in spec:
        spec["terminationGracePeriodSeconds"] = int(float(grace))
    env = [{"name": k, "value": v} for k, v in replica_env(job, replica, attempt, addressing(job, attempt, at_store))]
    for container in spec.get("containers") or []:
        names = {e.get("name") for e in container.get("env") or []}
        # The contract appends; a variable the template sets itself wins (as with Kubeflow's operator).
        container["env"] = [*(container.get("env") or []), *(e for e in env if e["name"] not in names)]
        if container.get("name") == DEFAULT_CONTAINER_NAME:
            if ENV_THREADS not in names:
                container["env"].append({"name": ENV_THREADS, "value": threads_per_process(job, container)})
            container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
            container["name"] = replicas.container_name(job)
    if report_url:
        spec = with_report_channel(spec, worker_files.report_url(report_url, job.namespace, job.name), report_ca)
        if autoreport_boot.wanted(job):  # scripts that never import torchjob report through the same channel
            spec = autoreport_boot.with_autoreport(spec, job)
        spec = warm_pods.with_launcher(spec, job)  # its restart orders come through the same channel
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": replica.pod_name(job.name),
            "namespace": job.namespace,
            "labels": {**(metadata.get("labels") or {}), **replicas.labels(job, replica, attempt)},
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


REPORT_TOKEN_VOLUME = "torchjob-report-token"
REPORT_TOKEN_DIR = "/var/run/secrets/torchjob.io/reports"


def with_report_channel(spec: dict[str, Any], url: str, ca: str | None = None) -> dict[str, Any]:
    """A Pod spec whose containers may report progress: the endpoint's URL, a projected service-account token
    for the report audience only (it opens nothing on the API server; the kubelet rotates it), and the CA that
    an https endpoint's certificate must chain to (public: a certificate, not a key)."""
    spec.setdefault("volumes", []).append(
        {
            "name": REPORT_TOKEN_VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": worker_files.REPORT_AUDIENCE,
                            "expirationSeconds": 3600,
                            "path": "token",
                        }
                    }
                ]
            },
        }
    )
    env = {worker_files.ENV_REPORT_URL: url, worker_files.ENV_REPORT_TOKEN_FILE: f"{REPORT_TOKEN_DIR}/token"}
    if ca:
        env[worker_files.ENV_REPORT_CA] = ca
    for container in spec.get("containers") or []:
        container.setdefault("env", []).extend({"name": k, "value": v} for k, v in env.items())
        mount = {"name": REPORT_TOKEN_VOLUME, "mountPath": REPORT_TOKEN_DIR, "readOnly": True}
        container.setdefault("volumeMounts", []).append(mount)
    return spec


def service_manifest(job: PyTorchJob, replica: ReplicaId) -> dict[str, Any]:
    """The headless Service that gives a replica's Pod a stable DNS name (the Pod's own name)."""
    container = pytorch_container(job.spec.pytorch_replica_specs[replica.replica_type].template) or {}
    ports = [
        {"name": p["name"], "port": int(p["containerPort"]), "targetPort": int(p["containerPort"])}
        for p in container.get("ports") or []
        if isinstance(p, dict) and p.get("name") and p.get("containerPort")
    ] or [{"name": DEFAULT_PORT_NAME, "port": DEFAULT_PORT, "targetPort": DEFAULT_PORT}]
    labels = service_labels(job, replica)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica.pod_name(job.name),
            "namespace": job.namespace,
            "labels": dict(labels),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {"clusterIP": "None", "selector": labels, "ports": ports, "publishNotReadyAddresses": True},
    }


def pytorch_container(template: dict[str, Any]) -> dict[str, Any] | None:
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") == DEFAULT_CONTAINER_NAME:
            return dict(container)
    return None
