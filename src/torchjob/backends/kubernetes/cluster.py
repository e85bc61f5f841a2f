"""Connecting to a cluster: the API client, the PyTorchJob resource and Kubeflow Trainer's (TrainJob, runtimes).

lightkube is used because it is small, typed and fast to import (the operator image carries no torch and
starts in well under a second); its watch handles 410 Gone by starting again from a fresh list.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from lightkube import Client, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from torchjob.backends.kubernetes import crd

JobKey = tuple[str, str]  # a job on the cluster, (namespace, name): how the operator's work queue keys jobs
PyTorchJobResource: Any = create_namespaced_resource(crd.GROUP, crd.VERSION, crd.KIND, crd.PLURAL)
_TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TrainJobResource: Any = create_namespaced_resource(*_TRAINER, "TrainJob", "trainjobs")
ClusterRuntimeResource: Any = create_global_resource(*_TRAINER, "ClusterTrainingRuntime", "clustertrainingruntimes")
RuntimeResource: Any = create_namespaced_resource(*_TRAINER, "TrainingRuntime", "trainingruntimes")
ElasticJobResource: Any = create_namespaced_resource("elastic.pytorch.org", "v1alpha1", "ElasticJob", "elasticjobs")


def connect(
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    field_manager: str = "torchjob",
    timeout: httpx.Timeout | None = None,
) -> Client:
    """A client for the cluster of ``kubeconfig`` (else $KUBECONFIG, ~/.kube/config, or the in-cluster account);
    ``timeout`` replaces lightkube's default of 10 s for every phase of a request."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        config = KubeConfig.from_file(path.split(os.pathsep)[0]).get(context_name=context)
    elif os.path.exists(os.path.expanduser("~/.kube/config")):
        config = KubeConfig.from_file(os.path.expanduser("~/.kube/config")).get(context_name=context)
    else:
        config = KubeConfig.from_service_account().get()
    return Client(config, namespace=namespace, field_manager=field_manager, timeout=timeout)


def as_dict(obj: Any) -> dict[str, Any]:
    """A lightkube object (typed model or generic resource) as the plain mapping the pure code works on."""
    return obj if isinstance(obj, dict) else obj.to_dict()
