"""The env contract each replica gets, for Kubernetes addressing (Service names) and locally."""

from __future__ import annotations

from typing import Any

import pytest

from torchjob import worker_files
from torchjob.api.loading import job_from_mapping
from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes.mapping import pod_manifest
from torchjob.backends.local.mapping import process_spec
from torchjob.core.envs import Addressing, replica_env
from torchjob.core.replicas import ReplicaId, labels, rendezvous_replica
from torchjob.testing import make_job
from torchjob.testing.builders import JobBuilder

MASTER, W0, W1 = (
    ReplicaId(ReplicaType.MASTER, 0),
    ReplicaId(ReplicaType.WORKER, 0),
    ReplicaId(ReplicaType.WORKER, 1),
)


def kube_addressing(job_name: str, master: str) -> Addressing:
    return Addressing(f"{job_name}-{master}", 23456, f"{job_name}-worker-0", 23456)


def test_master_and_workers_get_kubeflow_env() -> None:
    job = make_job("mnist").master().workers(2).build()
    env = dict(replica_env(job, W1, 0, kube_addressing("mnist", "master-0")))
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "mnist-master-0"
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
    assert env["WORLD_SIZE"] == "3"
    assert env["RANK"] == env["PET_NODE_RANK"] == "2"
    assert env["PET_NNODES"] == "3"
    assert env["PET_NPROC_PER_NODE"] == "auto"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert dict(replica_env(job, MASTER, 0, kube_addressing("mnist", "master-0")))["RANK"] == "0"


def test_worker_only_job_makes_worker_0_the_master() -> None:
    job = make_job("w").workers(3).build()
    assert rendezvous_replica(job) == W0
    env = dict(replica_env(job, W1, 0, kube_addressing("w", "worker-0")))
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == "w-worker-0"
    assert labels(job, W0, 0)["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in labels(job, W1, 0)


def test_integer_nproc_per_node_multiplies_world_size() -> None:
    job = make_job("n").master().workers(1).spec(nprocPerNode=4).build()
    env = dict(replica_env(job, W0, 0, kube_addressing("n", "master-0")))
    assert env["WORLD_SIZE"] == "8" and env["PET_NPROC_PER_NODE"] == "4"


def test_an_in_place_group_is_told_how_long_its_survivors_wait_for_a_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    """The survivors outwait the planner's wait for a spare (``torchjob.io/spare-wait-seconds``) by 15 s, and never
    wait less than 60 s; a group that does not repair in place is told nothing, and its scripts keep the default."""
    addressing = kube_addressing("m", "master-0")

    def told(**annotations: str) -> str | None:
        job = make_job("m").master().workers(1).annotate(**annotations).build()
        return dict(replica_env(job, W0, 0, addressing)).get(worker_files.ENV_REPAIR_TIMEOUT)

    assert told(**{"torchjob.io/spares": "1"}) == "60"
    assert told(**{"torchjob.io/spares": "1", "torchjob.io/spare-wait-seconds": "300"}) == "315"
    assert told(**{"torchjob.io/spares": "1", "torchjob.io/spare-wait-seconds": "0"}) == "60"
    assert told() is None
    for value, seconds in (("315", 315.0), (None, 60.0), ("nan", 60.0), ("-1", 60.0), ("x", 60.0)):
        if value is None:
            monkeypatch.delenv(worker_files.ENV_REPAIR_TIMEOUT, raising=False)
        else:
            monkeypatch.setenv(worker_files.ENV_REPAIR_TIMEOUT, value)
        assert worker_files.repair_timeout() == seconds, value


def test_elastic_env() -> None:
    job = (
        make_job("e")
        .workers(2)
        .elastic(
            minReplicas=1,
            maxReplicas=3,
            maxRestarts=5,
            rdzvConf=[{"key": "a", "value": "1"}, {"key": "b", "value": "2"}],
        )
        .build()
    )
    env = dict(replica_env(job, W1, 0, kube_addressing("e", "worker-0")))
    assert env["PET_NNODES"] == "1:3"
    assert env["PET_RDZV_ENDPOINT"] == "e-worker-0:23456"
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_MAX_RESTARTS"] == "5"
    assert env["PET_RDZV_CONF"] == "a=1,b=2"
    assert "RANK" not in env  # the rendezvous assigns ranks


def test_labels() -> None:
    job = make_job("mnist").master().workers(1).build()
    assert labels(job, W0, 2) == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "mnist",
        "torchjob.io/job-name": "mnist",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
        "torchjob.io/attempt": "2",
    }


def test_local_process_spec_expands_vars_and_the_contract_wins() -> None:
    job = (
        make_job("x")
        .master()
        .command("python", "train.py", "--rank=$(RANK)", "--cost=$$(RANK)", "$(UNSET)")
        .env(GREETING="hi $(USER_NAME)", USER_NAME="ada", RANK="99")
        .build()
    )
    addressing = Addressing("127.0.0.1", 40000, "127.0.0.1", 40001, rdzv_id="x-0")
    spec = process_spec(job, MASTER, 0, addressing, "/jobs", "/out", "/venv/bin", "/usr/bin")
    assert spec.argv == ["python", "train.py", "--rank=0", "--cost=$(RANK)", "$(UNSET)"]
    assert spec.env["RANK"] == "0"  # appended after the user's env, as Kubeflow does
    assert spec.env["GREETING"] == "hi $(USER_NAME)"  # only earlier variables expand, as on Kubernetes
    assert spec.env["MASTER_ADDR"] == "127.0.0.1" and spec.env["MASTER_PORT"] == "40000"
    assert spec.env["PATH"] == "/venv/bin:/usr/bin"
    assert spec.env["TORCHJOB_OUTPUT_DIR"] == "/out"
    assert spec.cwd == "/jobs"


def test_locally_every_process_of_the_group_shares_the_machines_gpus_and_a_pod_owns_its_own() -> None:
    job = make_job("x").master().workers(2).build()
    addressing = Addressing("127.0.0.1", 40000, "127.0.0.1", 40001)
    spec = process_spec(job, W0, 0, addressing, "/jobs", "/out", "/venv/bin", "/usr/bin")
    assert spec.env["TORCHJOB_MACHINE_PROCESSES"] == "3"  # torchjob.train.devices: ranks share the GPUs by rank
    pod_env = {e["name"] for e in pod_manifest(job, W0, 0)["spec"]["containers"][0]["env"]}
    assert "TORCHJOB_MACHINE_PROCESSES" not in pod_env  # a Pod's GPUs are its own: LOCAL_RANK decides there
    elastic = make_job("e").workers(2).elastic(minReplicas=1, maxReplicas=5).build()
    grown = process_spec(elastic, W0, 0, addressing, "/jobs", "/out", "/venv/bin", "/usr/bin")
    assert grown.env["TORCHJOB_MACHINE_PROCESSES"] == "5"  # as many as the group may grow to, ranks given later


def _threads(job_builder: JobBuilder, resources: dict[str, Any] | None = None) -> tuple[str, str]:
    """OMP_NUM_THREADS as a Worker's Pod on a cluster and its process locally get it."""
    wire = job_builder.wire()
    if resources is not None:
        wire["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = resources
    job = job_from_mapping(wire)
    env = pod_manifest(job, W0, 0)["spec"]["containers"][0]["env"]
    on_a_cluster = [e["value"] for e in env if e["name"] == "OMP_NUM_THREADS"]
    assert len(on_a_cluster) == 1, env
    addressing = Addressing("127.0.0.1", 40000, "127.0.0.1", 40001)
    locally = process_spec(job, W0, 0, addressing, "/jobs", "/out", "/venv/bin", "/usr/bin").env["OMP_NUM_THREADS"]
    return on_a_cluster[0], locally


@pytest.mark.parametrize(
    ("nproc", "resources", "expected"),
    [
        (None, None, "1"),  # no CPU named: one thread a process, as torchrun gives
        (None, {"limits": {"cpu": "4"}}, "4"),
        ("2", {"limits": {"cpu": "4"}}, "2"),  # the Pod's cores shared among its processes
        ("4", {"limits": {"cpu": "2"}}, "1"),  # at least one
        (None, {"requests": {"cpu": "3500m"}}, "3"),  # a request where there is no limit, whole
        (None, {"requests": {"cpu": "8"}, "limits": {"cpu": "2"}}, "2"),  # the limit first
        (None, {"limits": {"cpu": "250m"}}, "1"),
    ],
)
def test_each_process_gets_its_share_of_the_containers_cpu_as_omp_threads(
    nproc: str | None, resources: dict[str, Any] | None, expected: str
) -> None:
    builder = make_job("t").workers(2)
    if nproc:
        builder = builder.spec(nprocPerNode=nproc)
    assert _threads(builder, resources) == (expected, expected)


def test_omp_threads_the_container_sets_win_on_a_cluster_and_locally() -> None:
    assert _threads(make_job("t").workers(2).env(OMP_NUM_THREADS="6"), {"limits": {"cpu": "2"}}) == ("6", "6")
