"""A typed model of TorchElastic's ``ElasticJob`` (``elastic.pytorch.org/v1alpha1``, from the ``kubernetes/``
folder of the public ``pytorch/elastic`` repository), as strict as the PyTorchJob's: unknown fields, wrong types
and values outside their Kubernetes range are errors.

Its spec is Kubeflow's common ``RunPolicy`` (inlined), ``replicaSpecs`` (Workers), ``rdzvEndpoint`` (the etcd
its launcher meets at, ``host:port``) and ``minReplicas``/``maxReplicas``; its status is Kubeflow's common
``JobStatus``. The Pod template stays the raw mapping it was given.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field, StrictStr

from torchjob.api.types import ObjectMeta, PositiveInt32, ReplicaSpec, RunPolicy, _Wire

API_GROUP = "elastic.pytorch.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
ELASTICJOB_KIND: Final = "ElasticJob"
WORKER: Final = "Worker"
# The container TorchElastic's controller names by default (its constants.go), and the launcher its images run
# as their entrypoint: the command of a container that gives none, where there is no image (a local run).
DEFAULT_CONTAINER_NAME = "elasticjob-worker"
LAUNCHER = ("python", "-m", "torch.distributed.run")


class ElasticJobSpec(RunPolicy):
    """Kubeflow common v1's RunPolicy, inlined, and TorchElastic's own fields."""

    replica_specs: dict[StrictStr, ReplicaSpec]
    rdzv_endpoint: Annotated[StrictStr, Field(min_length=1, max_length=261)]
    min_replicas: PositiveInt32 | None = None
    max_replicas: PositiveInt32 | None = None


class ElasticJob(_Wire):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str = ELASTICJOB_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ElasticJobSpec

    @property
    def name(self) -> str:
        return self.metadata.name or ""
