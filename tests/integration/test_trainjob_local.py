"""TrainJob (Kubeflow Trainer v2) run locally: the same planner as a PyTorchJob, so a torchrun job across nodes
trains, a failure is restarted and named by its root cause (Trainer itself would fail at once), and a lost
member is repaired in place by a warm spare."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import condition, job_object, replica_records, shim_pid, start_run
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.waits import wait_until


def _write(tmp_path: Path, name: str, trainer: dict[str, Any], *runtimes: dict[str, Any], **annotations: str) -> Path:
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
        "spec": {"runtimeRef": {"name": runtimes[0]["metadata"]["name"] if runtimes else "torch-distributed"}},
    }
    trainjob["spec"]["trainer"] = trainer
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all([trainjob, *runtimes]))
    return path


def test_a_torchrun_trainjob_of_two_nodes_trains_with_trainers_variables(tmp_path: Path, torchjob_home: Path) -> None:
    trainer = {"numNodes": 2, "command": ["torchrun", str(INTEGRATION_SCRIPTS / "worker.py")], "args": ["--ddp"]}
    result = run_cli("run", str(_write(tmp_path, "two-nodes", trainer)), home=torchjob_home)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TrainJob two-nodes: 2 node(s) × 1 process(es)" in result.stderr
    assert result.stdout.count("all_reduce gave 2 across world size 2") == 2
    records = replica_records(torchjob_home, "two-nodes")
    nodes = {name: (r["PET_NNODES"], r["PET_NODE_RANK"], r["PET_NPROC_PER_NODE"]) for name, r in records.items()}
    assert nodes == {"master-0-0": ("2", "0", "1"), "worker-0-0": ("2", "1", "1")}


def test_a_failing_trainjob_is_restarted_as_its_runtime_allows_and_says_why(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """The runtime's JobSet failurePolicy allows one restart (Trainer's default runtime sets none, and a
    TrainJob on Trainer fails at its first error; under torchjob the backoff limit is the PyTorchJob's)."""
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "one-retry"},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": 1}},
            "template": {
                "spec": {
                    "failurePolicy": {"maxRestarts": 1},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "i"}]}}}
                            },
                        }
                    ],
                }
            },
        },
    }
    trainer = {
        "command": ["python", str(INTEGRATION_SCRIPTS / "worker.py")],
        "args": ["--act", "master-0:*:raise:bad shard 7", "--sleep", "30"],
    }
    result = run_cli("run", str(_write(tmp_path, "broken", trainer, runtime)), home=torchjob_home)
    assert result.returncode == 1
    job = job_object(torchjob_home, "broken")
    failed = condition(job, "Failed")
    assert failed is not None and "master-0 exited with code 1: ValueError: bad shard 7" in failed["message"]
    assert job["status"]["restartCount"] == 1
    assert all("ValueError: bad shard 7" in a["outcome"] for a in job["status"]["attempts"])


def test_a_member_of_a_trainjob_is_repaired_in_place_by_a_warm_spare(tmp_path: Path, torchjob_home: Path) -> None:
    trainer = {"numNodes": 3, "command": ["python", str(INTEGRATION_SCRIPTS / "in_place_train.py")]}
    trainer["env"] = [{"name": "STEPS", "value": "60"}]
    path = _write(tmp_path, "mend", trainer, **{"torchjob.io/spares": "1"})
    run = start_run(path, torchjob_home)
    spare_ready = torchjob_home / "jobs" / "mend" / "output" / "inplace" / "spare-0.json"
    trained = torchjob_home / "jobs" / "mend" / "output" / "trained-worker-1.jsonl"
    wait_until(lambda: spare_ready.exists() and trained.exists() and len(trained.read_text().splitlines()) >= 5)
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-1")).children()[0].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "worker-1 was killed by SIGKILL; spare-0 takes its place" in stderr
    status = job_object(torchjob_home, "mend")["status"]
    assert (status["restartCount"], status["repairs"]) == (0, 1)
    assert "group repaired in place (generation 1, 3 ranks" in stdout
