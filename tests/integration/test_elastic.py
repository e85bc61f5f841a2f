"""Elastic jobs end to end: torchrun agents as replicas, membership changes that are not failures, and
torchrun's etcd rendezvous against a real etcd server."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.local_runs import alive, job_object, start_run
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.servers import etcd_v2_keys
from tests.support.waits import wait_until
from torchjob.testing import make_job

SCRIPT = INTEGRATION_SCRIPTS / "elastic_train.py"


def elastic_job(tmp_path: Path, name: str, workers: int, low: int, high: int, steps: int, **policy: Any) -> Path:
    builder = (
        make_job(name)
        .workers(workers)
        .elastic(minReplicas=low, maxReplicas=high, **policy)
        .spec(nprocPerNode="1")
        .command("torchrun", str(SCRIPT), "--steps", str(steps), "--step-seconds", "0.2")
        .annotate(**{"torchjob.io/termination-grace-seconds": "5"})
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(builder.wire()))
    return path


def rounds(home: Path, name: str) -> list[dict[str, Any]]:
    """Every (re)start of a rank: the world it joined, its replica, the step it resumed from."""
    path = home / "jobs" / name / "output" / "rounds.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def world_formed(home: Path, name: str, world: int, after: int = 0) -> bool:
    """A group of ``world`` ranks has formed (every rank of it reported) since round line ``after``."""
    recent = rounds(home, name)[after:]
    return len({r["rank"] for r in recent if r["world"] == world}) == world


def newest_checkpoint_step(home: Path, name: str) -> int:
    manifests = (home / "jobs" / name / "output" / "checkpoints").glob("ckpt-*.json")
    return max((int(p.stem.removeprefix("ckpt-")) for p in manifests), default=0)


def finish(run: subprocess.Popen[str]) -> str:
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, (stdout + stderr)[-3000:]
    return stdout + stderr


def test_an_elastic_job_loses_a_worker_and_carries_on_at_min_size(tmp_path: Path, torchjob_home: Path) -> None:
    path = elastic_job(tmp_path, "shrinks", workers=2, low=1, high=2, steps=80)
    # No replacement during the test: the job must finish at its minimum size.
    data = yaml.safe_load(path.read_text())
    data["metadata"]["annotations"]["torchjob.io/replacement-delay-seconds"] = "600"
    path.write_text(yaml.safe_dump(data))
    run = start_run(path, torchjob_home)
    wait_until(lambda: world_formed(torchjob_home, "shrinks", 2), what="a group of 2")
    wait_until(lambda: newest_checkpoint_step(torchjob_home, "shrinks") >= 3, what="a few steps trained and saved")
    state = json.loads((torchjob_home / "jobs" / "shrinks" / "local.json").read_text())
    shim = next(p["pid"] for p in state["processes"] if p["replica"] == "worker-1")
    agent = psutil.Process(shim).children()[0]
    trainers = agent.children(recursive=True)
    saved_before_kill = newest_checkpoint_step(torchjob_home, "shrinks")
    agent.send_signal(signal.SIGKILL)  # the node is gone: its agent dies without a word

    output = finish(run)
    status = job_object(torchjob_home, "shrinks")["status"]
    assert status["conditions"][-1]["type"] == "Succeeded"
    assert (status["attempt"], status["restartCount"], status["membershipChanges"]) == (0, 0, 1)
    assert "MemberLost: worker-1 was killed by SIGKILL; the group carries on with 1 Worker(s)" in output
    after_loss = [r for r in rounds(torchjob_home, "shrinks") if r["world"] == 1]
    assert after_loss and after_loss[-1]["replica"] == "worker-0"
    # It resumed from its newest checkpoint: at most the step in flight was lost (one checkpoint interval).
    assert after_loss[-1]["resumed_from"] >= saved_before_kill > 0
    result = json.loads((torchjob_home / "jobs" / "shrinks" / "output" / "result.json").read_text())
    assert result == {"steps": 80, "world": 1}
    # The lost agent's trainer lived in a session of its own; it did not outlive its replica.
    assert not [t.pid for t in trainers if alive(t.pid)]


def test_scale_up_and_down_of_a_running_elastic_job(tmp_path: Path, torchjob_home: Path) -> None:
    path = elastic_job(tmp_path, "scales", workers=1, low=1, high=2, steps=150)
    run = start_run(path, torchjob_home)
    wait_until(lambda: world_formed(torchjob_home, "scales", 1), what="a group of 1")

    refused = run_cli("scale", "scales", "--workers", "3", home=torchjob_home)
    assert refused.returncode == 3
    assert "--workers: must be within the job's elasticPolicy bounds [1, 2], got 3" in refused.stderr

    seen = len(rounds(torchjob_home, "scales"))
    scaled = run_cli("scale", "scales", "--workers", "2", home=torchjob_home)
    assert scaled.returncode == 0, scaled.stderr
    wait_until(lambda: world_formed(torchjob_home, "scales", 2, after=seen), what="a group of 2 after scale-up")
    seen = len(rounds(torchjob_home, "scales"))
    assert run_cli("scale", "scales", "--workers", "1", home=torchjob_home).returncode == 0
    wait_until(lambda: world_formed(torchjob_home, "scales", 1, after=seen), what="a group of 1 after scale-down")

    finish(run)
    job = job_object(torchjob_home, "scales")
    status = job["status"]
    assert status["conditions"][-1]["type"] == "Succeeded"
    assert (status["attempt"], status["restartCount"], status["membershipChanges"]) == (0, 0, 2), status["attempts"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    grown = [r for r in rounds(torchjob_home, "scales") if r["world"] == 2]
    assert {r["replica"] for r in grown} == {"worker-0", "worker-1"}
    assert all(r["resumed_from"] > 0 for r in grown)  # the group grew around its checkpoint
    shown = run_cli("get", "scales", home=torchjob_home).stdout
    assert "2 membership changes (not failures)" in shown


def test_scaling_a_job_that_is_not_elastic_is_refused(tmp_path: Path, torchjob_home: Path) -> None:
    path = tmp_path / "fixed.yaml"
    path.write_text(yaml.safe_dump(make_job("fixed").workers(1).command("python", "-c", "pass").wire()))
    assert run_cli("run", str(path), home=torchjob_home).returncode == 0
    refused = run_cli("scale", "fixed", "--workers", "2", home=torchjob_home)
    assert refused.returncode == 3
    assert "has no spec.elasticPolicy" in refused.stderr


@pytest.mark.parametrize("backend", ["etcd-v2", "etcd"])
def test_etcd_rendezvous_against_a_real_etcd(
    backend: str, tmp_path: Path, torchjob_home: Path, etcd_server: str
) -> None:
    host, port = etcd_server.removeprefix("http://").split(":")
    name = f"rdzv-{backend.replace('-', '')}"
    path = elastic_job(
        tmp_path, name, workers=2, low=2, high=2, steps=10, rdzvBackend=backend, rdzvHost=host, rdzvPort=int(port)
    )
    finish(start_run(path, torchjob_home))
    status = job_object(torchjob_home, name)["status"]
    assert status["conditions"][-1]["type"] == "Succeeded"
    assert world_formed(torchjob_home, name, 2)
    # The members met in etcd: the rendezvous of this job's attempt (its run id) is recorded there.
    assert any(f"{name}-0" in key for key in etcd_v2_keys(etcd_server))
