"""Typed models of Kubeflow Trainer's ``TrainJob``, ``TrainingRuntime`` and ``ClusterTrainingRuntime``
(``trainer.kubeflow.org/v1alpha1``), as strict as the PyTorchJob's (``torchjob.api.types``): unknown fields,
wrong types and values outside their Kubernetes range are errors.

Only what a torch job needs is typed; the runtime's JobSet spec and the Pod template inside it stay the raw
mappings they were given (a JobSet and a PodTemplateSpec: every field must survive untouched), and
``torchjob.api.trainjob.lowering`` reads what it needs from them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictStr
from pydantic_core import PydanticCustomError

from torchjob.api.types import INT32_MAX, NonNegativeInt32, ObjectMeta, PositiveInt32, PositiveInt64, _Wire

API_GROUP = "trainer.kubeflow.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
TRAINJOB_KIND: Final = "TrainJob"
CLUSTER_RUNTIME_KIND: Final = "ClusterTrainingRuntime"
RUNTIME_KIND: Final = "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_RUNTIME_KIND, RUNTIME_KIND)
# The values Trainer allows for spec.managedBy: its own controller (torchjob stands in for it) or MultiKueue.
TRAINJOB_CONTROLLER = f"{API_GROUP}/trainjob-controller"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
# The replicated job of a runtime's JobSet that runs the trainer, and its container.
NODE = "node"

Name = Annotated[StrictStr, Field(min_length=1, max_length=253)]
EnvList = Annotated[list[dict[str, Any]], Field(max_length=128)]


def _a_process_count(value: Any) -> Any:
    """An IntOrString on the wire: a positive count (``"2"`` is 2, as Kubernetes reads it) or a word torchrun
    knows; one error line for anything else."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if value in ("auto", "cpu", "gpu") or (type(value) is int and 0 < value <= INT32_MAX):
        return value
    raise PydanticCustomError("process_count", "must be auto, cpu, gpu or a positive integer")


ProcsPerNode = Annotated[int | str, BeforeValidator(_a_process_count)]


class RuntimeRef(_Wire):
    name: Name
    api_group: Annotated[StrictStr, Field(max_length=253)] | None = None
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] | None = None


class Trainer(_Wire):
    image: Annotated[StrictStr, Field(max_length=500)] | None = None
    command: Annotated[list[StrictStr], Field(max_length=128)] | None = None
    args: Annotated[list[StrictStr], Field(max_length=128)] | None = None
    env: EnvList | None = None
    num_nodes: PositiveInt32 | None = None
    resources_per_node: dict[str, Any] | None = None
    num_proc_per_node: ProcsPerNode | None = None


class ContainerPatch(_Wire):
    name: Name
    env: EnvList | None = None
    volume_mounts: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None


class PodSpecPatch(_Wire):
    service_account_name: StrictStr | None = None
    volumes: list[dict[str, Any]] | None = None
    init_containers: list[ContainerPatch] | None = None
    containers: list[ContainerPatch] | None = None
    image_pull_secrets: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None
    node_selector: dict[str, StrictStr] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None


class LabelsAndAnnotations(_Wire):
    """The metadata a runtime patch may set: labels and annotations only."""

    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None


class PodTemplatePatch(_Wire):
    metadata: LabelsAndAnnotations | None = None
    spec: PodSpecPatch | None = None


class JobSpecPatch(_Wire):
    template: PodTemplatePatch | None = None


class JobTemplatePatch(_Wire):
    metadata: LabelsAndAnnotations | None = None
    spec: JobSpecPatch | None = None


class ReplicatedJobPatch(_Wire):
    name: Name
    template: JobTemplatePatch | None = None


class JobSetSpecPatch(_Wire):
    replicated_jobs: Annotated[list[ReplicatedJobPatch], Field(max_length=100)] | None = None


class JobSetTemplatePatch(_Wire):
    metadata: LabelsAndAnnotations | None = None
    spec: JobSetSpecPatch | None = None


class TrainingRuntimeSpecPatch(_Wire):
    template: JobSetTemplatePatch | None = None


class RuntimePatch(_Wire):
    manager: Name
    time: StrictStr | None = None
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None


class TrainJobSpec(_Wire):
    runtime_ref: RuntimeRef
    initializer: dict[str, Any] | None = None
    trainer: Trainer | None = None
    runtime_patches: Annotated[list[RuntimePatch], Field(max_length=16)] | None = None
    suspend: StrictBool | None = None
    active_deadline_seconds: PositiveInt64 | None = None
    managed_by: Literal["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"] | None = None
    # Trainer v2.0–v2.1 wrote these on the spec (later releases moved them to runtime patches).
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None


class TrainJob(_Wire):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["TrainJob"] = TRAINJOB_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainJobSpec

    @property
    def name(self) -> str:
        return self.metadata.name or ""


class TorchElasticPolicy(_Wire):
    max_restarts: NonNegativeInt32 | None = None
    min_nodes: PositiveInt32 | None = None
    max_nodes: PositiveInt32 | None = None
    metrics: list[dict[str, Any]] | None = None


class TorchPolicy(_Wire):
    num_proc_per_node: ProcsPerNode | None = None
    elastic_policy: TorchElasticPolicy | None = None


class MLPolicy(_Wire):
    num_nodes: PositiveInt32 | None = None
    torch: TorchPolicy | None = None
    mpi: dict[str, Any] | None = None
    flux: dict[str, Any] | None = None


class JobSetTemplate(_Wire):
    metadata: LabelsAndAnnotations | None = None
    spec: dict[str, Any] = Field(default_factory=dict)


class TrainingRuntimeSpec(_Wire):
    ml_policy: MLPolicy | None = None
    pod_group_policy: dict[str, Any] | None = None
    template: JobSetTemplate = Field(default_factory=JobSetTemplate)


class TrainingRuntime(_Wire):
    """A ClusterTrainingRuntime or a (namespaced) TrainingRuntime: the same spec."""

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = CLUSTER_RUNTIME_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainingRuntimeSpec = Field(default_factory=TrainingRuntimeSpec)

    @property
    def name(self) -> str:
        return self.metadata.name or ""
