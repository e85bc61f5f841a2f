"""Kill a rank mid-training: the group restarts from the newest checkpoint and ends with the same model.

Uses the MNIST example (torchjob.train) on 2 replicas: one uninterrupted run, and runs where the worker's
or the master's training process is SIGKILLed mid-epoch. Same seed, same data order, restored optimizer and
RNG state: the final parameters must match, and at most one checkpoint interval of work is redone.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import psutil
import pytest
import torch
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import job_object, start_run
from tests.support.paths import ROOT
from tests.support.waits import wait_until

INTERVAL = 10


def mnist_job(tmp_path: Path, name: str) -> Path:
    job = yaml.safe_load((ROOT / "examples" / "mnist" / "job.yaml").read_text())
    job["metadata"]["name"] = name
    job["metadata"]["annotations"] = {"torchjob.io/termination-grace-seconds": "3"}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["restartPolicy"] = "ExitCode"
        container = spec["template"]["spec"]["containers"][0]
        container["args"] = ["--epochs", "2", "--log-interval", "5", "--checkpoint-every", str(INTERVAL)]
        container["workingDir"] = str(ROOT / "examples" / "mnist")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def final_model(home: Path, name: str) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(home / "jobs" / name / "output" / "mnist_cnn.pt")
    return state


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same job run once without interruption; returns its state directory."""
    home = tmp_path_factory.mktemp("straight")
    straight = run_cli("run", str(mnist_job(home, "straight")), home=home)
    assert straight.returncode == 0, straight.stderr[-2000:]
    return home


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["worker-0", "master-0"])
def test_kill_and_resume_ends_with_the_same_model(
    victim: str, uninterrupted: Path, tmp_path: Path, torchjob_home: Path
) -> None:
    run = start_run(mnist_job(tmp_path, "killed"), torchjob_home)
    log = torchjob_home / "jobs" / "killed" / "logs" / "0" / f"{victim}.log"
    # Past the first checkpoint and mid-epoch (63 batches an epoch on 2 ranks).
    wait_until(lambda: log.exists() and "epoch: 1/2, batch: 25/" in log.read_text(), what=f"{victim} at batch 25")
    records = (torchjob_home / "jobs" / "killed" / "local.json").read_text()
    shim = next(p for p in yaml.safe_load(records)["processes"] if p["replica"] == victim)["pid"]
    trainer = psutil.Process(shim).children()[0]
    trainer.send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-2000:]

    job = job_object(torchjob_home, "killed")
    assert job["status"]["restartCount"] == 1
    assert f"{victim} was killed by SIGKILL" in job["status"]["attempts"][0]["outcome"]
    resumed = re.search(r"\[master-0#1\] Rank 0: resumed from the checkpoint of step (\d+)", stdout)
    assert resumed, stdout[-3000:]
    killed_at = max(int(m) for m in re.findall(r"epoch: 1/2, batch: (\d+)/", log.read_text()))
    assert killed_at - int(resumed.group(1)) <= INTERVAL + 5  # at most one interval (+ the log granularity) redone

    a, b = final_model(uninterrupted, "straight"), final_model(torchjob_home, "killed")
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), f"{key} differs after kill and resume"


def test_ranks_that_find_different_checkpoints_fail_at_once_saying_so(tmp_path: Path, torchjob_home: Path) -> None:
    """Each rank reads a checkpoint folder of its own (as Pods without shared storage do) and rank 1's holds a
    checkpoint: they would resume at different steps and their collectives fall out of step, so the load fails
    on every rank with the reason, before any step."""
    from torchjob.train import Checkpointer, DistContext

    single = DistContext(0, 0, 1, torch.device("cpu"), "gloo", "single")
    Checkpointer(tmp_path / "ckpt-1", single).save({"weights": torch.ones(1)}, step=40)
    script = tmp_path / "resume.py"
    script.write_text(
        "import sys\nfrom torchjob.train import Checkpointer, init\n"
        "ctx = init()\nCheckpointer(f'{sys.argv[1]}/ckpt-{ctx.rank}', ctx).load()\nprint('resumed')\n"
    )
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "apart"},
        "spec": {
            "runPolicy": {"backoffLimit": 0},
            "pytorchReplicaSpecs": {
                kind: {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "pytorch", "image": "i", "command": ["python", str(script), str(tmp_path)]}
                            ]
                        }
                    },
                }
                for kind in ("Master", "Worker")
            },
        },
    }
    path = tmp_path / "apart.yaml"
    path.write_text(yaml.safe_dump(job))
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 1 and "resumed" not in result.stdout
    failed = next(c for c in job_object(torchjob_home, "apart")["status"]["conditions"] if c["type"] == "Failed")
    assert "CheckpointError: the ranks found different checkpoints" in failed["message"], failed["message"]
    assert "rank 0: none, rank 1: step 40" in result.stdout + result.stderr
