"""`torchjob render`: the normalized PyTorchJob, the Indexed Job mapping, and Jinja2 values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.paths import DATA, ROOT
from torchjob.api.errors import ValidationError
from torchjob.api.loading import load_job_file
from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes.indexed_job import render
from torchjob.testing import make_job


def test_indexed_job_runs_torchrun_with_the_completion_index_as_node_rank() -> None:
    (service, job), notes = render(load_job_file(ROOT / "examples" / "mnist" / "job.yaml"))
    assert notes == []
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"training.kubeflow.org/job-name": "mnist"}
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "mnist" and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["torchrun"]
    assert container["args"] == [
        "--nnodes=3",
        "--nproc-per-node=1",
        "--node-rank=$(JOB_COMPLETION_INDEX)",
        "--master-addr=mnist-0.mnist",
        "--master-port=23456",
        "train.py",
        "--epochs",
        "8",
        "--batch-size",
        "32",
    ]
    assert spec["template"]["metadata"]["labels"] == {"training.kubeflow.org/job-name": "mnist"}


def test_what_an_indexed_job_cannot_express_is_reported() -> None:
    _, notes = render(load_job_file(DATA / "valid" / "elastic-imagenet.yaml"))
    assert any("elasticPolicy is not carried over" in n for n in notes)


def test_render_to_pytorchjob_prints_the_defaulted_job(tmp_path: Path) -> None:
    result = run_cli("render", str(DATA / "valid" / "worker-only.yaml"), home=tmp_path)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "OnFailure" and job["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    assert "status" not in job


def test_values_fill_jinja2_placeholders_and_a_missing_one_is_a_clear_error(tmp_path: Path) -> None:
    template = (ROOT / "examples" / "mnist" / "job.yaml").read_text()
    template = template.replace("name: mnist", "name: {{ name }}").replace("replicas: 2", "replicas: {{ workers }}")
    (tmp_path / "job.yaml").write_text(template)
    (tmp_path / "values.json").write_text(json.dumps({"name": "mnist-large", "workers": 7}))
    result = run_cli(
        "render",
        str(tmp_path / "job.yaml"),
        "--to",
        "indexed-job",
        "--values",
        str(tmp_path / "values.json"),
        home=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    _, job = yaml.safe_load_all(result.stdout)
    assert job["metadata"]["name"] == "mnist-large" and job["spec"]["completions"] == 8

    (tmp_path / "partial.json").write_text(json.dumps({"name": "x"}))
    result = run_cli("render", str(tmp_path / "job.yaml"), "--values", str(tmp_path / "partial.json"), home=tmp_path)
    assert result.returncode == 2
    assert "'workers' is undefined; give it in" in result.stderr and "Traceback" not in result.stderr


def _program(command: list[str], args: list[str] | None = None) -> dict[str, object]:
    job = make_job("r").workers(1).build()
    container = job.spec.pytorch_replica_specs[ReplicaType.WORKER].template["spec"]["containers"][0]
    container["command"] = command
    if args is not None:
        container["args"] = args
    (_, batch), _ = render(job)
    result: dict[str, object] = batch["spec"]["template"]["spec"]["containers"][0]
    return result


OPTIONS = [
    "--nnodes=1",
    "--nproc-per-node=1",
    "--node-rank=$(JOB_COMPLETION_INDEX)",
    "--master-addr=r-0.r",
    "--master-port=23456",
]


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (["python", "train.py"], ["--lr", "1"], ["train.py", "--lr", "1"]),
        (["python3", "-u", "train.py"], None, ["train.py"]),
        (["/usr/bin/python3.11", "-m", "pkg.train"], None, ["-m", "pkg.train"]),
        (["python", "-c", "print(1)"], None, ["--no-python", "python", "-c", "print(1)"]),
        (["python", "-O", "train.py"], None, ["--no-python", "python", "-O", "train.py"]),
        (["bash", "-c", "echo hi"], None, ["--no-python", "bash", "-c", "echo hi"]),
        (["sleep"], ["5"], ["--no-python", "sleep", "5"]),
    ],
    ids=["script", "unbuffered", "module", "python-c", "python-flag", "bash", "sleep"],
)
def test_indexed_job_wraps_each_kind_of_command(
    command: list[str], args: list[str] | None, expected: list[str]
) -> None:
    container = _program(command, args)
    assert container["command"] == ["torchrun"]
    assert container["args"] == [*OPTIONS, *expected]


def test_a_command_that_already_is_torchrun_is_kept_and_told_its_place_by_pet_variables() -> None:
    container = _program(["torchrun", "--nproc-per-node=2", "train.py"])
    assert container["command"] == ["torchrun", "--nproc-per-node=2", "train.py"]
    env = {e["name"]: e for e in container["env"]}  # type: ignore[attr-defined]
    assert env["PET_NNODES"]["value"] == "1" and env["PET_MASTER_ADDR"]["value"] == "r-0.r"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"].endswith("job-completion-index']")


def test_a_container_without_command_is_refused_and_backoff_defaults_to_6() -> None:
    job = make_job("r").workers(1).build()
    del job.spec.pytorch_replica_specs[ReplicaType.WORKER].template["spec"]["containers"][0]["command"]
    with pytest.raises(ValidationError, match=r"containers\[pytorch\]\.command: required for an Indexed Job"):
        render(job)
    (_, batch), _ = render(make_job("r").workers(1).build())
    assert batch["spec"]["backoffLimit"] == 6
