"""Typed models of the Kubeflow ``PyTorchJob`` (kubeflow.org/v1) wire format.

Attributes are snake_case in Python and camelCase on the wire (``model_dump(by_alias=True)``). The pod
template is kept as the raw mapping it was given: it is a Kubernetes PodTemplateSpec, and every field of it
(volumes, resources, tolerations, fields newer than this code...) must survive a round trip untouched.
Fields of the job spec itself are strict: a typo there is an error, as with ``kubectl --validate=strict``,
and so is a value of the wrong type (no ``true`` → 1, ``"2"`` → 2 or ``"yes"`` → true) or outside the
range of its Kubernetes type (int32, int64).
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator
from pydantic.alias_generators import to_camel

from torchjob.worker_files import Membership

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
DEFAULT_CONTAINER_NAME = "pytorch"
DEFAULT_PORT_NAME = "pytorchjob-port"
DEFAULT_PORT = 23456

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Integers as Kubernetes types them: no bool or string is taken for a number.
NonNegativeInt32 = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
PositiveInt32 = Annotated[StrictInt, Field(ge=1, le=INT32_MAX)]
PositiveInt64 = Annotated[StrictInt, Field(ge=1, le=INT64_MAX)]


class ReplicaType(str, Enum):
    """The two replica types a PyTorchJob has; the Master is rank 0 when present."""

    MASTER = "Master"
    WORKER = "Worker"

    @property
    def label(self) -> str:
        """The lowercase form used in names and labels: `master`, `worker`."""
        return self.value.lower()


class RestartPolicy(str, Enum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(str, Enum):
    NONE = "None"
    RUNNING = "Running"
    ALL = "All"


class ConditionType(str, Enum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class _Wire(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", use_enum_values=False)


class _OpenWire(_Wire):
    """Base of models whose unknown fields are kept (metadata, status): they belong to someone else."""

    model_config = ConfigDict(extra="allow")


class ReplicaSpec(_Wire):
    replicas: NonNegativeInt32 | None = None
    restart_policy: RestartPolicy | None = None
    template: dict[str, Any] = Field(default_factory=dict)


class SchedulingPolicy(_Wire):
    min_available: NonNegativeInt32 | None = None
    queue: str | None = None
    min_resources: dict[str, Any] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: NonNegativeInt32 | None = None


class RunPolicy(_Wire):
    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: NonNegativeInt32 | None = None
    active_deadline_seconds: PositiveInt64 | None = None
    backoff_limit: NonNegativeInt32 | None = None
    scheduling_policy: SchedulingPolicy | None = None
    suspend: StrictBool | None = None
    managed_by: str | None = None


class RdzvConf(_Wire):
    key: str
    value: str


class ElasticPolicy(_Wire):
    min_replicas: PositiveInt32 | None = None
    max_replicas: PositiveInt32 | None = None
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = None
    rdzv_port: Annotated[StrictInt, Field(ge=1, le=65535)] | None = None
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RdzvConf] | None = None
    standalone: StrictBool | None = None
    n_proc_per_node: PositiveInt32 | None = None
    max_restarts: NonNegativeInt32 | None = None
    metrics: list[dict[str, Any]] | None = None


class PyTorchJobSpec(_Wire):
    pytorch_replica_specs: dict[ReplicaType, ReplicaSpec]
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: str | None = None

    @field_validator("pytorch_replica_specs", mode="before")
    @classmethod
    def _replica_types_are_case_insensitive(cls, value: Any) -> Any:
        # Kubeflow accepts `worker` and `master` as well as the canonical spelling.
        if not isinstance(value, dict):
            return value
        canonical = {t.value.lower(): t.value for t in ReplicaType}
        return {canonical.get(str(k).lower(), k): v for k, v in value.items()}

    @field_validator("nproc_per_node", mode="before")
    @classmethod
    def _nproc_per_node_is_a_string(cls, value: Any) -> Any:
        # The wire type is a string, but YAML authors write `nprocPerNode: 2`.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class ObjectMeta(_OpenWire):
    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    creation_timestamp: str | None = None


class JobCondition(_OpenWire):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_update_time: str | None = None
    last_transition_time: str | None = None


class ReplicaStatus(_OpenWire):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    selector: str | None = None


class AttemptRecord(_OpenWire):
    """One attempt of the whole replica group (a torchjob extension of the status)."""

    attempt: int
    start_time: str
    end_time: str | None = None
    # Why the attempt ended: the root cause of its first failure, or "succeeded".
    outcome: str | None = None
    # Replicas the platform told to stop during this attempt (a Pod's DisruptionTarget: Evicted or Preempted),
    # remembered here because on a real node the Pod is usually gone before the attempt is judged.
    disrupted: dict[str, str] = Field(default_factory=dict)
    # When the group was last repaired in place: it started training again then (hang detection counts it).
    repaired_time: str | None = None
    # When an elastic group's membership last changed (a Worker lost, added or removed): its launcher (torchrun)
    # restarts every worker then, so hang detection treats the group as starting up again.
    regrouped_time: str | None = None
    # When the group began to wait for a warm spare to take a lost member's place, none being ready
    # (``policies/repair.py``); cleared by the repair.
    spare_awaited_time: str | None = None


class GroupMembership(_OpenWire):
    """The membership a group under in-place repair was last told, in the JSON its members read
    (``membership.json`` locally, the operator's ``/membership`` endpoint in a Pod): its generation within the
    attempt, the members in rank order, the replicas that joined in it, and every spare promoted into the
    attempt's group (spare → the replica it became), and the newest generation made because members were lost
    (``worker_files.Membership.lost_in``; None where an older controller kept it: every change counts)."""

    attempt: int
    generation: int
    members: list[str] = Field(default_factory=list)
    joined: list[str] = Field(default_factory=list)
    spares: dict[str, str] = Field(default_factory=dict)
    lost_in: int | None = None

    def to_json(self) -> Membership:
        return Membership(
            attempt=self.attempt,
            generation=self.generation,
            members=list(self.members),
            joined=list(self.joined),
            spares=dict(self.spares),
            lost_in=self.generation if self.lost_in is None else self.lost_in,
        )


class TrainerMetric(_OpenWire):
    """One training metric as last reported, its value as a string (Kubeflow Trainer's ``Metric``)."""

    name: str
    value: str


class TrainerStatus(_OpenWire):
    """How far training has got, as torchjob.train reports it: Kubeflow Trainer's ``trainerStatus`` shape
    (KEP-2779). Absent when the script reports nothing; a field is absent when it is not known."""

    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    metrics: list[TrainerMetric] = Field(default_factory=list)
    last_updated_time: str | None = None


class LearnedDeadlines(_OpenWire):
    """Hang deadlines learned from the job's own step gaps and phases (``core/policies/learned.py``), kept
    so that a restarted attempt, or a new operator, starts with them: seconds, whole, never shrinking."""

    progress_seconds: int | None = None
    # The longest gap between steps seen, that the progress deadline was learned from.
    longest_step_gap_seconds: float | None = None
    # Per named phase (checkpoint-save, checkpoint-load, evaluation, a user's own): its allowance.
    section_seconds: dict[str, int] = Field(default_factory=dict)


class JobStatus(_OpenWire):
    conditions: list[JobCondition] = Field(default_factory=list)
    replica_statuses: dict[ReplicaType, ReplicaStatus] = Field(default_factory=dict)
    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None
    # torchjob extensions; Kubeflow clients ignore them.
    attempt: int = 0
    restart_count: int = 0
    attempts: list[AttemptRecord] = Field(default_factory=list)
    # A crash loop's back-off (core/policies/backoff.py): counted restarts in a row of attempts that failed
    # early, and when the next attempt may start (absent when it may start at once).
    crash_loop_restarts: int = 0
    next_attempt_time: str | None = None
    # Elastic jobs: Workers lost, added or removed while the group ran on (never failures), and when each
    # lost Worker's replacement may start.
    membership_changes: int = 0
    replacement_due: dict[str, str] = Field(default_factory=dict)
    # In-place repairs: lost members replaced by a warm spare while the survivors ran on (never restarts),
    # and the spares ready now.
    repairs: int = 0
    spares_ready: int = 0
    # The membership a group under in-place repair was last told (kept here so that an operator that
    # restarts, or a standby that takes over, tells the group the same).
    membership: GroupMembership | None = None
    # Training progress, from torchjob.train's reports (absent for scripts that report none).
    trainer_status: TrainerStatus | None = None
    # Hang deadlines learned from this job's own steps (absent until a rank has warmed up).
    learned_deadlines: LearnedDeadlines | None = None


class PyTorchJob(_Wire):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: str = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PyTorchJobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    def annotation(self, key: str) -> str | None:
        return (self.metadata.annotations or {}).get(key)

    def to_wire(self) -> dict[str, Any]:
        """The object as Kubeflow writes it: camelCase keys, no nulls."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
