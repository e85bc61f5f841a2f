"""TorchElastic's ElasticJob run locally: the example as it ships (examples/mnist/elasticjob.yaml, its container
giving no command, its rendezvous an etcd of the cluster) trains under the elastic launcher, loses a Worker whole
and carries on within min/max, and grows back; the same file meeting at a real etcd on this machine."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import psutil
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import job_object, start_run
from tests.support.servers import etcd_v2_keys
from tests.support.waits import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist"


def _steps(home: Path, name: str, rank: int) -> int:
    path = home / "jobs" / name / "output" / "metrics" / f"rank-{rank}.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _finish(run: subprocess.Popen[str]) -> str:
    stdout, stderr = run.communicate(timeout=400)
    assert run.returncode == 0, (stdout + stderr)[-4000:]
    return stdout + stderr


def test_the_elasticjob_example_loses_a_worker_whole_carries_on_and_grows_back(torchjob_home: Path) -> None:
    run = start_run(EXAMPLE / "elasticjob.yaml", torchjob_home)
    # Three launchers and their trainers start under whatever else CI runs beside them: a loose bound.
    wait_until(lambda: _steps(torchjob_home, "mnist-elastic", 2) >= 10, timeout=420, what="three ranks training")
    state = json.loads((torchjob_home / "jobs" / "mnist-elastic" / "local.json").read_text())
    shim = next(p["pid"] for p in state["processes"] if p["replica"] == "worker-1")
    agent = psutil.Process(shim).children()[0]
    agent.send_signal(signal.SIGKILL)  # its node is gone: the launcher dies without a word, its trainer with it

    output = _finish(run)
    assert "the etcd rendezvous at etcd-service:2379 names a host of the cluster" in output
    assert "locally the elastic launcher, python -m torch.distributed.run" in output
    status = job_object(torchjob_home, "mnist-elastic")["status"]
    assert status["conditions"][-1]["type"] == "Succeeded"
    # Lost and replaced without a restart: within min/max the group carried on, then grew back.
    assert (status["attempt"], status["restartCount"]) == (0, 0)
    assert status["membershipChanges"] == 2, status
    said = "\n".join(line for line in output.splitlines() if line.startswith("torchjob:"))
    # The last lines of its output come after the signal when its log had any by then (timing decides).
    lost = r"MemberLost: worker-1 was killed by SIGKILL(: [^;\n]*)?; the group carries on with 2 Worker\(s\)"
    assert re.search(lost, said), said
    assert "worker-1 joins the running group" in said, said
    results = json.loads((torchjob_home / "jobs" / "mnist-elastic" / "output" / "metrics.json").read_text())
    assert results["accuracy"] >= 0.9 and results["world_size"] == 3


def test_an_elasticjob_meets_at_a_real_etcd_on_this_machine(
    tmp_path: Path, torchjob_home: Path, etcd_server: str
) -> None:
    document = yaml.safe_load((EXAMPLE / "elasticjob.yaml").read_text())
    document["metadata"]["name"] = "etcd-here"
    document["spec"]["rdzvEndpoint"] = etcd_server.removeprefix("http://")
    document["spec"].update(minReplicas=2, maxReplicas=2)
    worker = document["spec"]["replicaSpecs"]["Worker"]
    worker["replicas"] = 2
    worker["template"]["spec"]["containers"][0]["args"] = [
        "--nproc_per_node=1",
        str(EXAMPLE / "train.py"),
        "--epochs=1",
    ]
    path = tmp_path / "etcd-here.yaml"
    path.write_text(yaml.safe_dump(document))
    result = run_cli("run", str(path), home=torchjob_home)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "names a host of the cluster" not in result.stderr  # the job's own etcd, reachable here
    results = json.loads((torchjob_home / "jobs" / "etcd-here" / "output" / "metrics.json").read_text())
    assert results["world_size"] == 2
    # The launchers met in that etcd: this job's rendezvous (its name, the attempt) is recorded there.
    assert any("etcd-here-0" in key for key in etcd_v2_keys(etcd_server))
