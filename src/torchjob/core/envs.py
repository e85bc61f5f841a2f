"""The environment every replica gets: Kubeflow's contract (MASTER_*, WORLD_SIZE, RANK, PET_*).

Addresses are parameters: on Kubernetes they are Service names and the declared port; locally they are
127.0.0.1 and a free port chosen per attempt. Everything else follows from the job alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob import worker_files
from torchjob.api import extensions
from torchjob.api.quantities import container_cpu
from torchjob.api.types import PyTorchJob
from torchjob.core.replicas import ReplicaId, node_rank, total_replicas

# torchjob's own variables, read by torchjob.train (never needed by a plain Kubeflow script).
# torchrun's default c10d rendezvous port: where a store torchjob hosts listens unless the job says otherwise.
DEFAULT_RDZV_PORT = 29400
ENV_JOB_NAME = "TORCHJOB_JOB_NAME"
ENV_REPLICA = worker_files.ENV_REPLICA
ENV_ATTEMPT = worker_files.ENV_ATTEMPT
ENV_ELASTIC = worker_files.ENV_ELASTIC
ENV_THREADS = "OMP_NUM_THREADS"


@dataclass(frozen=True)
class Addressing:
    """Where the group meets: the master's address and port, and the elastic rendezvous endpoint."""

    master_addr: str
    master_port: int
    rdzv_host: str
    rdzv_port: int
    rdzv_id: str | None = None
    # rdzvConf entries the backend adds where the job sets no value of its own (e.g. the local backend's
    # shorter keep-alive and last-call timeouts, and is_host=false because it hosts the store itself).
    rdzv_conf_defaults: tuple[tuple[str, str], ...] = ()
    # The rendezvous backend, where the backend chose another than the job's (its own c10d store in place of an
    # etcd it cannot reach).
    rdzv_backend: str | None = None


def processes_per_replica(job: PyTorchJob) -> int:
    """``nprocPerNode`` as a count: a number as given; ``auto``, ``cpu`` or ``gpu`` count as one here."""
    nproc = job.spec.nproc_per_node or ""
    return int(nproc) if nproc.isdigit() else 1


def threads_per_process(job: PyTorchJob, container: dict[str, Any]) -> str:
    """``OMP_NUM_THREADS`` for a replica whose container sets none: its CPU (limit, else request) shared among
    its processes, whole and at least 1; 1 where it names no CPU, as torchrun gives each of several processes.
    Without it torch starts a thread per core of the machine in every process, and the ranks on one node (or
    the Pods on one Kubernetes node) fight for the cores (the README's job, three ranks on 2 cores: 81 s at 2
    threads a process, 21 s at 1)."""
    cores = container_cpu(container)
    return str(max(1, int(cores // processes_per_replica(job)))) if cores else "1"


def in_place(job: PyTorchJob) -> bool:
    """Whether the job's group trains under torchjob.train's in-place loop and is repaired in place: it asks
    for spares (``torchjob.io/spares``), or, elastic, names the annotation at all (``"0"``: no idle spare; a
    lost member leaves at once, and the spare started then joins when it is warm). A replica of several
    processes is lost, and replaced, as a whole (``torchjob.train.local_ranks``)."""
    value = job.annotation(extensions.SPARES)
    if not value or not value.isdigit():
        return False
    return job.spec.elastic_policy is not None or int(value) > 0


def spare_wait(job: PyTorchJob) -> float:
    """How long a group that lost a member with no spare ready waits for one (``torchjob.io/spare-wait-seconds``)."""
    value = job.annotation(extensions.SPARE_WAIT)
    return float(value) if value else extensions.DEFAULT_SPARE_WAIT


def repair_timeout(job: PyTorchJob) -> float:
    """``TORCHJOB_REPAIR_TIMEOUT``: the survivors outwait the planner's wait for a spare, and that spare's joining."""
    return max(worker_files.DEFAULT_REPAIR_TIMEOUT, spare_wait(job) + worker_files.REPAIR_MARGIN)


def world_size(job: PyTorchJob) -> int:
    return total_replicas(job) * processes_per_replica(job)


# The variables that give a replica its place in the group. A warm spare runs a replica's program and
# environment without them (it gets a place only when it takes a lost replica's).
_PLACE_VARIABLES = frozenset(
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", ENV_REPLICA}
)


def holds_a_place(name: str) -> bool:
    """Whether the variable ``name`` is part of a replica's place in the group (a spare must not have it)."""
    return name in _PLACE_VARIABLES or name.startswith("PET_")


def replica_env(job: PyTorchJob, replica: ReplicaId, attempt: int, addressing: Addressing) -> list[tuple[str, str]]:
    """The contract variables for one replica, in the order they are appended to the container's env."""
    env: list[tuple[str, str]] = [
        ("PYTHONUNBUFFERED", "1"),
        ("MASTER_ADDR", addressing.master_addr),
        ("PET_MASTER_ADDR", addressing.master_addr),
        ("MASTER_PORT", str(addressing.master_port)),
        ("PET_MASTER_PORT", str(addressing.master_port)),
    ]
    elastic = job.spec.elastic_policy
    if elastic is None or in_place(job):
        # An elastic group under in-place repair is formed by torchjob, not by torchrun agents: it starts
        # with the target count, and later changes reach its members as memberships (torchjob.train.in_place).
        rank = node_rank(job, replica)
        env += [
            ("WORLD_SIZE", str(world_size(job))),
            ("RANK", str(rank)),
            ("PET_NODE_RANK", str(rank)),
            ("PET_NNODES", str(total_replicas(job))),
        ]
        if elastic is not None:
            env.append((ENV_ELASTIC, "1"))
    else:
        # Ranks of an elastic job are assigned by the rendezvous, not by the controller.
        env += [
            ("PET_NNODES", f"{elastic.min_replicas}:{elastic.max_replicas}"),
            ("PET_RDZV_ENDPOINT", f"{addressing.rdzv_host}:{addressing.rdzv_port}"),
            ("PET_RDZV_BACKEND", addressing.rdzv_backend or elastic.rdzv_backend or "c10d"),
        ]
        if elastic.max_restarts is not None:
            env.append(("PET_MAX_RESTARTS", str(elastic.max_restarts)))
        rdzv_id = addressing.rdzv_id or elastic.rdzv_id
        if rdzv_id:
            env.append(("PET_RDZV_ID", rdzv_id))
        conf = [(c.key, c.value) for c in elastic.rdzv_conf or []]
        conf += [(k, v) for k, v in addressing.rdzv_conf_defaults if k not in {key for key, _ in conf}]
        if conf:
            env.append(("PET_RDZV_CONF", ",".join(f"{k}={v}" for k, v in conf)))
        if elastic.standalone:
            env.append(("PET_STANDALONE", ""))
        # Since torch 2.5 torchrun hands its rendezvous store to the workers, and a worker group restarted
        # after a membership change can then wait forever for keys the new rank 0 never writes
        # (pytorch/pytorch#135712). The per-round store of earlier releases has no such problem.
        env.append(("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"))
    if in_place(job):
        env.append((worker_files.ENV_REPAIR_TIMEOUT, f"{repair_timeout(job):g}"))
    nproc = job.spec.nproc_per_node
    if nproc is None and elastic is not None and elastic.n_proc_per_node is not None:
        nproc = str(elastic.n_proc_per_node)
    if nproc is not None:
        env.append(("PET_NPROC_PER_NODE", nproc))
    processes = processes_per_replica(job)
    if processes > 1:
        env.append((worker_files.ENV_REPLICA_PROCESSES, str(processes)))
    env += [
        (ENV_JOB_NAME, job.name),
        (ENV_REPLICA, str(replica)),
        (ENV_ATTEMPT, str(attempt)),
    ]
    return env
