"""TorchElastic's ElasticJob read and lowered to the PyTorchJob the planner drives (api/elasticjob): what its
controller did to the Pods (the rendezvous flags, the launcher as entrypoint) carried as an elasticPolicy, the
etcd it names met on a cluster and stood in for locally, and every bad input refused in one line."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from torchjob.api import extensions
from torchjob.api.errors import ValidationError
from torchjob.api.loading import parse_job_input
from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes.mapping import addressing as cluster_addressing
from torchjob.backends.local.mapping import local_addressing, local_command, pytorch_container
from torchjob.core.envs import replica_env
from torchjob.core.policies import elastic
from torchjob.core.replicas import ReplicaId

SAMPLE: dict[str, Any] = {
    "apiVersion": "elastic.pytorch.org/v1alpha1",
    "kind": "ElasticJob",
    "metadata": {"name": "imagenet", "namespace": "elastic-job"},
    "spec": {
        "rdzvEndpoint": "etcd-service:2379",
        "minReplicas": 1,
        "maxReplicas": 2,
        "backoffLimit": 4,
        "cleanPodPolicy": "Running",
        "replicaSpecs": {
            "Worker": {
                "replicas": 2,
                "restartPolicy": "ExitCode",
                "template": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "spec": {
                        "containers": [
                            {
                                "name": "elasticjob-worker",
                                "image": "torchelastic/examples:0.2.0rc0",
                                "args": ["--nproc_per_node=4", "/workspace/examples/imagenet/main.py", "--epochs=20"],
                            }
                        ]
                    },
                },
            }
        },
    },
}


def read(document: dict[str, Any]) -> Any:
    return parse_job_input(yaml.safe_dump(document), "job.yaml")


def changed(**spec: Any) -> dict[str, Any]:
    document = copy.deepcopy(SAMPLE)
    for key, value in spec.items():
        if value is None:
            document["spec"].pop(key, None)
        else:
            document["spec"][key] = value
    return document


def test_an_elasticjob_runs_as_an_elastic_pytorchjob_meeting_at_its_etcd() -> None:
    loaded = read(SAMPLE)
    job = loaded.job
    assert loaded.kind == "ElasticJob" and loaded.written["spec"]["rdzvEndpoint"] == "etcd-service:2379"
    assert (job.name, job.namespace) == ("imagenet", "elastic-job")
    policy = job.spec.elastic_policy
    assert policy is not None
    assert (policy.min_replicas, policy.max_replicas, policy.rdzv_backend) == (1, 2, "etcd")
    assert (policy.rdzv_host, policy.rdzv_port, policy.rdzv_id) == ("etcd-service", 2379, "imagenet")
    assert list(job.spec.pytorch_replica_specs) == [ReplicaType.WORKER]
    worker = job.spec.pytorch_replica_specs[ReplicaType.WORKER]
    assert (worker.replicas, worker.restart_policy.value) == (2, "ExitCode")  # type: ignore[union-attr]
    assert (job.spec.run_policy.backoff_limit, job.spec.run_policy.clean_pod_policy.value) == (4, "Running")  # type: ignore[union-attr]
    assert job.spec.nproc_per_node == "4"
    # The training container is the PyTorchJob's `pytorch`; its args as written; no command, the image's entrypoint.
    container = pytorch_container(job, ReplicaType.WORKER)
    assert container["image"] == "torchelastic/examples:0.2.0rc0" and "command" not in container
    assert container["args"][0] == "--nproc_per_node=4"
    assert local_command(job, container) == ["python", "-m", "torch.distributed.run"]
    assert any("container elasticjob-worker runs as pytorch" in note for note in loaded.notes)


def test_on_a_cluster_the_launcher_is_told_what_torchelastic_prepended() -> None:
    """--rdzv_backend=etcd --rdzv_endpoint=<rdzvEndpoint> --rdzv_id=<name> --nnodes=<min>:<max>, as the PET_*
    variables the launcher reads for those flags (a fresh id per attempt: a restarted group meets afresh)."""
    job = read(SAMPLE).job
    assert not elastic.hosts_rendezvous_store(job, honor_rdzv_host=True)
    env = dict(replica_env(job, ReplicaId(ReplicaType.WORKER, 1), 0, cluster_addressing(job, 0, at_store=False)))
    assert env["PET_RDZV_BACKEND"] == "etcd" and env["PET_RDZV_ENDPOINT"] == "etcd-service:2379"
    assert (env["PET_RDZV_ID"], env["PET_NNODES"]) == ("imagenet-0", "1:2")
    assert elastic.etcd_stand_in(job) is not None  # what a local run would say, never asked on a cluster


def test_locally_a_cluster_etcd_is_stood_in_for_by_torchjobs_store_and_a_local_one_is_used() -> None:
    job = read(SAMPLE).job
    assert elastic.hosts_rendezvous_store(job, honor_rdzv_host=False)
    env = dict(
        replica_env(job, ReplicaId(ReplicaType.WORKER, 0), 0, local_addressing(job, "127.0.0.1", 1, 2, "x", True))
    )
    assert (env["PET_RDZV_BACKEND"], env["PET_RDZV_ENDPOINT"]) == ("c10d", "127.0.0.1:2")
    assert "is_host=false" in env["PET_RDZV_CONF"]
    assert "cannot reach" in (elastic.etcd_stand_in(job) or "")
    local = read(changed(rdzvEndpoint="127.0.0.1:23790")).job  # an etcd on this machine: met there
    assert not elastic.hosts_rendezvous_store(local, honor_rdzv_host=False) and elastic.etcd_stand_in(local) is None


def test_min_and_max_default_to_the_workers_and_a_command_given_is_kept() -> None:
    document = changed(minReplicas=None, maxReplicas=None)
    container = document["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["command"] = ["torchrun"]
    job = read(document).job
    assert (job.spec.elastic_policy.min_replicas, job.spec.elastic_policy.max_replicas) == (2, 2)  # type: ignore[union-attr]
    assert extensions.ENTRYPOINT not in (job.metadata.annotations or {})
    assert local_command(job, pytorch_container(job, ReplicaType.WORKER)) == ["torchrun"]


@pytest.mark.parametrize(
    ("document", "says"),
    [
        (changed(rdzvEndpoint=None), "spec.rdzvEndpoint: required"),
        (changed(rdzvEndpoint="etcd-service"), "spec.rdzvEndpoint: must be host:port"),
        (changed(rdzvEndpoint="etcd-service:99999"), "spec.rdzvEndpoint: must be host:port"),
        (changed(minReplicas=3, maxReplicas=2), "spec.minReplicas: must be at most spec.maxReplicas, got 3 > 2"),
        (changed(minReplicas=3, maxReplicas=4), "spec.replicaSpecs.Worker.replicas: must lie within"),
        (changed(minReplicas=0), "spec.minReplicas:"),
        (changed(replicaSpecs={}), "spec.replicaSpecs.Worker: required"),
        (
            changed(replicaSpecs={"Etcd": SAMPLE["spec"]["replicaSpecs"]["Worker"]}),
            "spec.replicaSpecs.Etcd: not a replica type of an ElasticJob",
        ),
        (changed(rdzvBackend="c10d"), "spec.rdzvBackend:"),
        ({**SAMPLE, "apiVersion": "elastic.pytorch.org/v1"}, "apiVersion: must be elastic.pytorch.org/v1alpha1"),
    ],
)
def test_bad_input_is_one_line_naming_the_elasticjobs_field(document: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        read(document)
    assert says in str(refused.value), str(refused.value)


def test_the_entrypoint_annotation_is_a_command_line() -> None:
    from torchjob.api.loading import job_from_mapping
    from torchjob.testing import make_job

    wire = make_job("j").workers(1).annotate(**{extensions.ENTRYPOINT: "python -m 'unclosed"}).wire()
    with pytest.raises(ValidationError, match=r"torchjob\.io/entrypoint.*must be a command line"):
        job_from_mapping(wire)


def test_what_the_api_server_keeps_on_the_object_is_not_carried_to_the_job_it_runs_as() -> None:
    from torchjob.api.elasticjob.reading import lower_documents

    stored = copy.deepcopy(SAMPLE)
    stored["metadata"].update(
        uid="u-1", resourceVersion="42", creationTimestamp="2026-11-27T00:00:00Z", labels={"a": "b"}
    )
    lowered = lower_documents([stored], "ElasticJob elastic-job/imagenet").pytorchjob
    assert set(lowered["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert lowered["metadata"]["labels"] == {"a": "b"}
