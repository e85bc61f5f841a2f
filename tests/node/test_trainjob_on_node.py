"""The TrainJob example (examples/mnist/trainjob.yaml) on a real node: Kubeflow's torch-distributed runtime
applied as it ships, the TrainJob sent with `torchjob submit --follow`, served by the operator as a PyTorchJob it
owns; its three node Pods run the unchanged script under torchrun with Trainer's PET_* variables, and the TrainJob
ends Complete, in Trainer's shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from kuberig import Cluster
from tests.support.operator import OperatorProcess
from tests.support.paths import MNIST
from tests.support.trainer import TORCH_DISTRIBUTED
from tests.support.waits import wait_until


def test_the_trainjob_example_trains_in_pods_and_completes(
    cluster: Cluster, node_operator: OperatorProcess, tmp_path: Path
) -> None:
    namespace = cluster.namespace("trainjob")
    cluster.apply(TORCH_DISTRIBUTED)
    job = yaml.safe_load((MNIST / "trainjob.yaml").read_text())
    job["spec"]["trainer"]["args"] = ["--epochs", "3", "--batch-size", "32"]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(job))
    submitted = subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", "submit", str(path), "-n", namespace, "--follow"],
        env={**cluster.env(), "TORCHJOB_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output[-4000:]
    assert f"trainjob.trainer.kubeflow.org/mnist-trainjob created in namespace {namespace}" in submitted.stderr
    assert "[worker-1] Rank 2: training completed." in submitted.stdout, output[-3000:]
    accuracy = float(submitted.stdout.split("test accuracy=")[1].split()[0])
    assert accuracy >= 0.85, output[-3000:]

    def trainjob_status() -> dict[str, Any]:
        found = cluster.kubectl("get", "trainjob", "mnist-trainjob", "-n", namespace, "-o", "json").stdout
        return dict(json.loads(found).get("status") or {})

    # The TrainJob's status follows its PyTorchJob's (which --follow waited for) within a pass.
    def complete() -> bool:
        return any(c["type"] == "Complete" for c in trainjob_status().get("conditions") or [])

    wait_until(complete, 60, "the TrainJob Complete", every=0.5, detail=trainjob_status)
    status = trainjob_status()
    assert {c["type"]: c["status"] for c in status["conditions"]}["Complete"] == "True", status
    assert status["jobsStatus"][0]["succeeded"] == 1
