"""Job files: the Kubeflow and vendor corpus loads unchanged; every invalid file gets its one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.corpus import INVALID_CORPUS, corpus_case
from tests.support.paths import DATA
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.loading import load_job, load_job_file, parse_job_text
from torchjob.api.types import ReplicaType, RestartPolicy
from torchjob.backends.local.mapping import local_problems

VALID = sorted((DATA / "valid").glob("*.yaml"))
INVALID = sorted(INVALID_CORPUS.glob("*.yaml"))


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_corpus_loads_and_survives_a_round_trip(path: Path) -> None:
    job = load_job_file(path)
    again = parse_job_text(__import__("yaml").safe_dump(job.to_wire()))
    assert again.to_wire() == job.to_wire()


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_corpus_names_the_field(path: Path) -> None:
    expected, args = corpus_case(path)
    values = args[args.index("--values") + 1] if "--values" in args else None
    runtimes = [args[i + 1] for i, arg in enumerate(args) if arg == "--runtime"]
    with pytest.raises((JobFileError, ValidationError)) as caught:
        job = load_job(path, values, runtimes).job
        problems = local_problems(job)
        if problems:
            raise ValidationError(problems)
    assert expected in str(caught.value)


def test_defaults_follow_kubeflow() -> None:
    job = load_job_file(DATA / "valid" / "worker-only.yaml")
    worker = job.spec.pytorch_replica_specs[ReplicaType.WORKER]
    assert worker.restart_policy is RestartPolicy.ON_FAILURE
    assert job.spec.run_policy.clean_pod_policy.value == "None"  # type: ignore[union-attr]
    assert job.spec.nproc_per_node == "auto"
    assert job.namespace == "default"
    ports = worker.template["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]


def test_elastic_bounds_copy_each_other() -> None:
    text = (DATA / "valid" / "elastic-imagenet.yaml").read_text().replace("    minReplicas: 1\n", "")
    elastic = parse_job_text(text).spec.elastic_policy
    assert (elastic.min_replicas, elastic.max_replicas) == (2, 2)  # type: ignore[union-attr]


def test_unknown_pod_template_fields_are_kept() -> None:
    job = load_job_file(DATA / "valid" / "vendor-gpu.yaml")
    master = job.spec.pytorch_replica_specs[ReplicaType.MASTER].template
    assert master["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert master["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert master["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert master["spec"]["containers"][1]["name"] == "log-shipper"
    # A declared pytorchjob-port is kept, not doubled.
    assert master["spec"]["containers"][0]["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500}]


def test_every_problem_is_reported_at_once() -> None:
    text = (DATA / "invalid" / "two-masters.yaml").read_text().replace("name: two-masters", "name: Two")
    with pytest.raises(ValidationError) as caught:
        parse_job_text(text)
    assert len(caught.value.problems) == 2


def test_missing_file_and_directory() -> None:
    with pytest.raises(JobFileError, match="no such file"):
        load_job_file("/nonexistent/job.yaml")
    with pytest.raises(JobFileError, match="is a directory"):
        load_job_file(DATA)
