"""Replica identity: which replicas a job has, their names, labels and ranks (the Kubeflow contract)."""

from __future__ import annotations

from dataclasses import dataclass

from torchjob.api.types import DEFAULT_CONTAINER_NAME, PyTorchJob, ReplicaType

LABEL_PREFIX = "training.kubeflow.org/"
OPERATOR_NAME = "pytorchjob-controller"
LABEL_OPERATOR = LABEL_PREFIX + "operator-name"
LABEL_JOB_NAME = LABEL_PREFIX + "job-name"
# The role of the rendezvous store torchjob hosts for an elastic job: its Pod's label, its local log's name.
ROLE_STORE = "rendezvous-store"
ROLE_SPARE = "spare"  # a warm spare of an in-place group: no rank until it is given a lost one's place
# What a job's Pod that is not a replica is for (the rendezvous store, a warm spare).
LABEL_ROLE = "torchjob.io/role"
# Every Pod torchjob makes for a job carries the job's name here: replicas, the rendezvous store, warm spares.
# Kubeflow's job-name label goes on replicas only, since that is what Kubeflow's SDK lists as the job's Pods.
LABEL_JOB = "torchjob.io/job-name"
LABEL_REPLICA_TYPE = LABEL_PREFIX + "replica-type"
LABEL_REPLICA_INDEX = LABEL_PREFIX + "replica-index"
LABEL_JOB_ROLE = LABEL_PREFIX + "job-role"
# torchjob's own: which attempt of the group a replica belongs to.
LABEL_ATTEMPT = "torchjob.io/attempt"

# On the PyTorchJob a TrainJob runs as (controller/trainjobs.py), and on its Pods: those Pods are shaped as Kubeflow
# Trainer's JobSet shapes them, for the tools that read them so (Kubeflow's SDK): the trainer container is named
# `node`, and the JobSet's labels say the job, the replicated job and the node's index.
LABEL_TRAINJOB = "trainer.kubeflow.org/trainjob-name"
TRAINER_CONTAINER = "node"
LABEL_JOBSET = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# On the PyTorchJob an ElasticJob (TorchElastic's) runs as (controller/elasticjobs.py): the ElasticJob's name.
LABEL_ELASTICJOB = "torchjob.io/elasticjob-name"

# Master first, so rank 0 always comes first in every listing.
REPLICA_ORDER = (ReplicaType.MASTER, ReplicaType.WORKER)


@dataclass(frozen=True, order=True)
class ReplicaId:
    """One replica slot of a job, e.g. ``worker-1``; stable across attempts."""

    replica_type: ReplicaType
    index: int

    def __str__(self) -> str:
        return f"{self.replica_type.label}-{self.index}"

    def pod_name(self, job_name: str) -> str:
        return f"{job_name}-{self}"


def expected_replicas(job: PyTorchJob) -> list[ReplicaId]:
    """Every replica slot the job's spec asks for, Master first."""
    slots = []
    for rtype in REPLICA_ORDER:
        spec = job.spec.pytorch_replica_specs.get(rtype)
        if spec is not None:
            slots += [ReplicaId(rtype, i) for i in range(replica_count(job, rtype))]
    return slots


def replica_count(job: PyTorchJob, replica_type: ReplicaType) -> int:
    """How many replicas of a type the job has; an elastic job's Workers stay within [min, max]."""
    spec = job.spec.pytorch_replica_specs.get(replica_type)
    count = (spec.replicas or 0) if spec is not None else 0
    elastic = job.spec.elastic_policy
    if elastic is not None and replica_type is ReplicaType.WORKER and count:
        count = max(elastic.min_replicas or count, min(elastic.max_replicas or count, count))
    return count


def parse_replica_name(text: str) -> ReplicaId | None:
    """``worker-1`` → ReplicaId(WORKER, 1); None when ``text`` is not a replica name."""
    kind, _, index = text.rpartition("-")
    rtype = next((t for t in ReplicaType if t.label == kind), None)
    if rtype is None or not index.isdigit() or (len(index) > 1 and index.startswith("0")):
        return None
    return ReplicaId(rtype, int(index))


def replica_slots(job: PyTorchJob) -> dict[ReplicaType, int]:
    """How many replicas of each type the job may ever have (an elastic job's Workers: up to max)."""
    slots = {rtype: replica_count(job, rtype) for rtype in REPLICA_ORDER if rtype in job.spec.pytorch_replica_specs}
    elastic = job.spec.elastic_policy
    if elastic is not None and ReplicaType.WORKER in slots:
        slots[ReplicaType.WORKER] = max(slots[ReplicaType.WORKER], elastic.max_replicas or 0)
    return slots


def describe_slots(job: PyTorchJob) -> str:
    """The replica names a job may have, e.g. ``master-0, worker-0…worker-3``."""
    parts = []
    for rtype, count in replica_slots(job).items():
        if count == 1:
            parts.append(f"{rtype.label}-0")
        elif count > 1:
            parts.append(f"{rtype.label}-0…{rtype.label}-{count - 1}")
    return ", ".join(parts)


def unknown_replica_problem(job: PyTorchJob, text: str) -> str | None:
    """Why ``text`` names no replica the job has or may have, or None."""
    slot = parse_replica_name(text)
    if slot is None or slot.index >= replica_slots(job).get(slot.replica_type, 0):
        return f"job {job.name!r} has no replica {text!r}; it has {describe_slots(job)}"
    return None


def total_replicas(job: PyTorchJob) -> int:
    return sum(spec.replicas or 0 for spec in job.spec.pytorch_replica_specs.values())


def has_master(job: PyTorchJob) -> bool:
    return ReplicaType.MASTER in job.spec.pytorch_replica_specs


def rendezvous_replica(job: PyTorchJob) -> ReplicaId:
    """The replica whose address is MASTER_ADDR: master-0, or worker-0 in a worker-only job.

    Kubeflow gives a worker-only job no MASTER_ADDR at all (kubeflow/trainer #1988); torchjob makes
    worker-0 the master then, which is what such scripts expect of torchrun.
    """
    return ReplicaId(ReplicaType.MASTER if has_master(job) else ReplicaType.WORKER, 0)


def node_rank(job: PyTorchJob, replica: ReplicaId) -> int:
    """Master is 0; Worker i is i+1 behind a Master, i in a worker-only job."""
    if replica.replica_type is ReplicaType.MASTER:
        return 0
    return replica.index + 1 if has_master(job) else replica.index


def labels(job: PyTorchJob, replica: ReplicaId, attempt: int) -> dict[str, str]:
    result = {
        LABEL_OPERATOR: OPERATOR_NAME,
        LABEL_JOB_NAME: job.name,
        LABEL_JOB: job.name,
        LABEL_REPLICA_TYPE: replica.replica_type.label,
        LABEL_REPLICA_INDEX: str(replica.index),
        LABEL_ATTEMPT: str(attempt),
    }
    if replica == rendezvous_replica(job):
        result[LABEL_JOB_ROLE] = "master"
    if runs_a_trainjob(job):
        result[LABEL_TRAINJOB] = result[LABEL_JOBSET] = job.name
        result[LABEL_REPLICATED_JOB] = TRAINER_CONTAINER
        result[LABEL_COMPLETION_INDEX] = str(node_rank(job, replica))
    return result


def runs_a_trainjob(job: PyTorchJob) -> bool:
    """Whether the job is the one a TrainJob runs as."""
    return LABEL_TRAINJOB in (job.metadata.labels or {})


def container_name(job: PyTorchJob) -> str:
    """The trainer container's name in the job's Pods: ``pytorch``, or Trainer's ``node`` for a TrainJob's."""
    return TRAINER_CONTAINER if runs_a_trainjob(job) else DEFAULT_CONTAINER_NAME


def selector(job: PyTorchJob, replica_type: ReplicaType) -> str:
    """The label selector string Kubeflow writes into ``status.replicaStatuses.<type>.selector``."""
    return ",".join(
        f"{k}={v}"
        for k, v in (
            (LABEL_JOB_NAME, job.name),
            (LABEL_OPERATOR, OPERATOR_NAME),
            (LABEL_REPLICA_TYPE, replica_type.label),
        )
    )
