"""TrainJob (Kubeflow Trainer v2): lowered to the PyTorchJob the planner drives, with Trainer's contract for the
trainer (PET_* per node), its runtime found beside it, given with --runtime or built in, and Trainer's way of
applying the trainer fields and runtime patches. The invalid files are in the corpus (tests/data/invalid/trainjob-*)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import MNIST
from torchjob.api.loading import JobInput, load_job, parse_job_input
from torchjob.api.trainjob.reading import read_runtime_files
from torchjob.api.types import ReplicaType
from torchjob.core.envs import Addressing, replica_env
from torchjob.core.replicas import ReplicaId


def _runtime(name: str = "mine", kind: str = "ClusterTrainingRuntime", **ml_policy: Any) -> dict[str, Any]:
    container = {"name": "node", "image": "img", "env": [{"name": "FROM_RUNTIME", "value": "1"}]}
    pod = {"spec": {"containers": [container, {"name": "sidecar", "image": "side"}]}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": ml_policy or {"numNodes": 2, "torch": {"numProcPerNode": 1}},
            "template": {
                "spec": {
                    "failurePolicy": {"maxRestarts": 2},
                    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}],
                }
            },
        },
    }


def _lowered(trainjob: dict[str, Any], *runtimes: dict[str, Any]) -> JobInput:
    text = yaml.safe_dump_all([trainjob, *runtimes])
    return parse_job_input(text, "tj.yaml")


def _trainjob(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", **metadata},
        "spec": spec,
    }


def _container(loaded: JobInput, replica: ReplicaType = ReplicaType.MASTER) -> dict[str, Any]:
    template = loaded.job.spec.pytorch_replica_specs[replica].template
    found: dict[str, Any] = template["spec"]["containers"][0]
    return found


def test_the_example_runs_as_a_master_and_workers_with_trainers_pet_variables() -> None:
    loaded = load_job(MNIST / "trainjob.yaml")
    job = loaded.job
    assert loaded.kind == "TrainJob" and job.name == "mnist-trainjob"
    specs = job.spec.pytorch_replica_specs
    assert (specs[ReplicaType.MASTER].replicas, specs[ReplicaType.WORKER].replicas) == (1, 2)
    container = _container(loaded, ReplicaType.WORKER)
    assert container["name"] == "pytorch" and container["command"] == ["torchrun", "train_plain.py"]
    assert container["args"] == ["--epochs", "8", "--batch-size", "32"]
    addressing = Addressing("mnist-trainjob-node-0", 29400, "mnist-trainjob-node-0", 29400)
    for replica, rank in ((ReplicaId(ReplicaType.MASTER, 0), "0"), (ReplicaId(ReplicaType.WORKER, 1), "2")):
        env = dict(replica_env(job, replica, 0, addressing))
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == ("3", "1", rank)
        assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("mnist-trainjob-node-0", "29400")
    assert any("3 node(s) × 1 process(es)" in note and "built in" in note for note in loaded.notes)


def test_a_runtime_beside_the_trainjob_wins_over_the_built_in_copy_and_sets_what_the_trainer_leaves() -> None:
    spec = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"command": ["python", "train.py"]}}
    mine = _runtime("torch-distributed", numNodes=4, torch={"numProcPerNode": 1})
    loaded = _lowered(_trainjob(spec), mine)
    assert loaded.job.spec.pytorch_replica_specs[ReplicaType.WORKER].replicas == 3
    assert loaded.job.spec.run_policy.backoff_limit == 2  # the JobSet's failurePolicy.maxRestarts
    container = _container(loaded)
    assert container["image"] == "img" and container["env"] == [{"name": "FROM_RUNTIME", "value": "1"}]
    assert any("(given)" in note for note in loaded.notes)


def test_runtime_files_given_with_runtime_are_read(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(yaml.safe_dump(_runtime("team", "TrainingRuntime")))
    job = tmp_path / "tj.yaml"
    job.write_text(yaml.safe_dump(_trainjob({"runtimeRef": {"name": "team", "kind": "TrainingRuntime"}})))
    loaded = load_job(job, runtime_paths=[str(runtime)])
    assert loaded.job.spec.pytorch_replica_specs[ReplicaType.WORKER].replicas == 1
    assert read_runtime_files([str(runtime)])[0][0] == f"--runtime {runtime}: "


def test_trainer_fields_override_the_runtime_as_trainer_applies_them() -> None:
    trainer = {
        "image": "mine:1",
        "args": ["--lr", "0.1"],
        "env": [{"name": "FROM_RUNTIME", "value": "2"}, {"name": "MINE", "value": "x"}],
        "numNodes": 1,
        "resourcesPerNode": {"limits": {"cpu": "2500m"}},
    }
    loaded = _lowered(_trainjob({"runtimeRef": {"name": "mine"}, "trainer": trainer}), _runtime())
    assert ReplicaType.WORKER not in loaded.job.spec.pytorch_replica_specs  # one node: the Master alone
    container = _container(loaded)
    assert (container["image"], container["args"]) == ("mine:1", ["--lr", "0.1"])
    assert container["env"] == [{"name": "FROM_RUNTIME", "value": "2"}, {"name": "MINE", "value": "x"}]
    assert container["resources"] == {"limits": {"cpu": "2500m"}}


@pytest.mark.parametrize(
    ("asked", "limits", "procs"),
    [
        ("auto", {"cpu": "2500m"}, "3"),  # as Trainer counts: the CPU limit, rounded up
        ("auto", {"nvidia.com/gpu": 2, "cpu": "8"}, "2"),
        ("auto", {}, "1"),  # never a process per core of the machine
        ("cpu", {"cpu": "4"}, "4"),
        ("gpu", {}, "gpu"),
        (3, {}, "3"),
        ("2", {}, "2"),
    ],
)
def test_processes_per_node_are_counted_as_trainer_counts_them(asked: Any, limits: Any, procs: str) -> None:
    trainer = {"numProcPerNode": asked, "resourcesPerNode": {"limits": limits}}
    loaded = _lowered(_trainjob({"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer}))
    assert loaded.job.spec.nproc_per_node == procs


def test_runtime_patches_reach_the_pod_template() -> None:
    pod_patch = {
        "metadata": {"labels": {"team": "vision"}},
        "spec": {
            "nodeSelector": {"pool": "spot"},
            "tolerations": [{"key": "spot", "operator": "Exists"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        },
    }
    patch = {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod_patch}}}]}
    spec = {
        "runtimeRef": {"name": "mine"},
        "runtimePatches": [{"manager": "me", "trainingRuntimeSpec": {"template": {"spec": patch}}}],
        "labels": {"from-spec": "yes"},
    }
    template = _lowered(_trainjob(spec), _runtime()).job.spec.pytorch_replica_specs[ReplicaType.MASTER].template
    assert template["metadata"]["labels"] == {"from-spec": "yes", "team": "vision"}
    assert template["spec"]["nodeSelector"] == {"pool": "spot"}
    assert template["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    node = template["spec"]["containers"][0]
    assert node["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert node["name"] == "pytorch" and template["spec"]["containers"][1]["name"] == "sidecar"


def test_suspend_deadline_managed_by_and_torchjob_annotations_carry_over() -> None:
    spec = {
        "runtimeRef": {"name": "torch-distributed"},
        "suspend": True,
        "activeDeadlineSeconds": 600,
        "managedBy": "kueue.x-k8s.io/multikueue",
    }
    job = _lowered(_trainjob(spec, annotations={"torchjob.io/spares": "1"}, namespace="team")).job
    run = job.spec.run_policy
    assert (run.suspend, run.active_deadline_seconds, run.managed_by) == (True, 600, "kueue.x-k8s.io/multikueue")
    assert job.annotation("torchjob.io/spares") == "1" and job.namespace == "team"


def test_an_elastic_runtime_becomes_an_elastic_group_of_workers() -> None:
    elastic = _runtime(torch={"numProcPerNode": 1, "elasticPolicy": {"minNodes": 2, "maxNodes": 4, "maxRestarts": 5}})
    job = _lowered(_trainjob({"runtimeRef": {"name": "mine"}}), elastic).job
    assert list(job.spec.pytorch_replica_specs) == [ReplicaType.WORKER]
    assert job.spec.pytorch_replica_specs[ReplicaType.WORKER].replicas == 4
    policy = job.spec.elastic_policy
    assert policy is not None and (policy.min_replicas, policy.max_replicas, policy.max_restarts) == (2, 4, 5)


def test_a_status_in_the_input_is_ignored_with_a_note() -> None:
    document = {**_trainjob({"runtimeRef": {"name": "torch-distributed"}}), "status": {"conditions": []}}
    loaded = _lowered(document)
    assert any(note.startswith("status: ignored") for note in loaded.notes)


def test_the_trainjob_status_is_trainers_shape_with_transition_times_kept() -> None:
    from torchjob.api.trainjob.status import trainjob_status
    from torchjob.api.types import JobStatus

    child = JobStatus.model_validate(
        {
            "conditions": [
                {"type": "Created", "status": "True"},
                {"type": "Suspended", "status": "False", "reason": "PyTorchJobResumed"},
                {"type": "Running", "status": "False"},
                {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "worker-1 exited"},
            ],
            "trainerStatus": {"progressPercentage": 40, "metrics": [{"name": "loss", "value": "0.3"}]},
        }
    )
    before = {"conditions": [{"type": "Suspended", "status": "False", "lastTransitionTime": "t0"}]}
    status = trainjob_status(child, before, "t1")
    assert status["conditions"] == [
        {"type": "Suspended", "status": "False", "reason": "Resumed", "message": "", "lastTransitionTime": "t0"},
        {
            "type": "Failed",
            "status": "True",
            "reason": "PyTorchJobFailed",
            "message": "worker-1 exited",
            "lastTransitionTime": "t1",
        },
    ]
    assert status["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 1, "active": 0, "suspended": 0}
    ]
    assert status["trainerStatus"] == {"progressPercentage": 40, "metrics": [{"name": "loss", "value": "0.3"}]}


def test_the_pods_of_a_trainjobs_run_are_shaped_as_trainers_jobset_shapes_them() -> None:
    from torchjob.backends.kubernetes.mapping import pod_manifest
    from torchjob.core import replicas

    job = load_job(MNIST / "trainjob.yaml").job
    assert replicas.container_name(job) == "pytorch"  # a PyTorchJob's Pods keep Kubeflow's name
    job.metadata.labels = {replicas.LABEL_TRAINJOB: job.name}  # as the operator labels a TrainJob's run
    pod = pod_manifest(job, ReplicaId(ReplicaType.WORKER, 1), 0)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    assert env["PET_NODE_RANK"] == pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "mnist-trainjob"
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
