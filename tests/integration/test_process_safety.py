"""torchjob signals only processes it can prove are its own, whatever a record on disk says.

Each test writes the records of a job whose controller and replicas "were" processes that have nothing to do
with torchjob (started by the test, as a reused pid would be), then runs the verbs a user would: the
unrelated processes must survive every one of them, while the records are still settled (an orphaned job is
marked Failed) and removed (delete).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.local_runs import alive, condition, job_object
from tests.support.waits import wait_until
from torchjob.backends.local import processes
from torchjob.backends.local.store import JobStore, LocalState, ProcessRecord
from torchjob.core.times import timestamp
from torchjob.testing import make_job


@pytest.fixture
def bystanders() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes that are not torchjob's: each leads a process group of its own, like a replica's shim."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _bystander(bystanders: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True, stdin=subprocess.DEVNULL
    )
    bystanders.append(process)
    return process


def _record_running_job(home: Path, name: str, controller: int, replicas: list[int], exact: bool) -> None:
    """The records of a Running job whose controller and replicas were the pids given.

    ``exact``: record each pid's real kernel start time too, as if the OS had reused the very pids torchjob
    recorded and nothing but the marker could tell them apart."""

    def started(pid: int) -> float:
        identity = processes.identify(pid) if exact else None
        return identity.started if identity is not None else 1.0

    job = make_job(name).master().workers(len(replicas) - 1).build()
    job.metadata.creation_timestamp = timestamp(datetime.now(timezone.utc))
    store = JobStore(home)
    state = LocalState(
        job_file_dir=str(home),
        job_uid=str(uuid.uuid4()),
        controller_pid=controller,
        controller_started_at=started(controller),
        processes=[
            ProcessRecord(
                replica=f"{'master' if i == 0 else 'worker'}-{max(0, i - 1)}",
                attempt=0,
                pid=pid,
                log_path=str(home / f"{i}.log"),
                status_path=str(home / f"{i}.exit.json"),
                started_at=started(pid),
                process_started=started(pid),
            )
            for i, pid in enumerate(replicas)
        ],
    )
    assert store.create(job, state)
    store.write_state(name, state)


@pytest.mark.parametrize("exact", [False, True], ids=["stale-pids", "reused-pids-same-start-time"])
def test_read_verbs_and_delete_never_signal_an_unrelated_process(
    torchjob_home: Path, bystanders: list[subprocess.Popen[bytes]], exact: bool
) -> None:
    controller = _bystander(bystanders)
    replicas = [_bystander(bystanders) for _ in range(3)]
    _record_running_job(torchjob_home, "orphan", controller.pid, [p.pid for p in replicas], exact)

    listed = run_cli("list", home=torchjob_home)
    assert listed.returncode == 0 and "orphan" in listed.stdout
    # The controller is not provably alive (it holds no lock of the job): the job is settled as orphaned...
    failed = condition(job_object(torchjob_home, "orphan"), "Failed")
    assert failed is not None and "its controller" in failed["message"]
    got = run_cli("get", "orphan", home=torchjob_home)
    assert got.returncode == 0 and "Failed" in got.stdout
    # ...but nothing was signalled: none of these processes is the job's.
    assert all(alive(p.pid) for p in [controller, *replicas])

    deleted = run_cli("delete", "orphan", home=torchjob_home)
    assert deleted.returncode == 0, deleted.stderr
    assert not (torchjob_home / "jobs" / "orphan").exists()
    assert all(alive(p.pid) for p in [controller, *replicas])


def test_a_reused_process_group_id_is_not_signalled(
    torchjob_home: Path, bystanders: list[subprocess.Popen[bytes]]
) -> None:
    # An unrelated group: a leader and a member it started, as a shim and its training process would be.
    leader = subprocess.Popen(
        [sys.executable, "-c", GROUP_LEADER], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    bystanders.append(leader)
    assert leader.stdout is not None
    member = int(leader.stdout.readline())
    assert os.getpgid(member) == leader.pid
    try:
        _record_running_job(torchjob_home, "reused", leader.pid, [leader.pid, leader.pid], exact=True)
        for verb in (["list"], ["get", "reused"], ["delete", "reused"]):
            assert run_cli(*verb, home=torchjob_home).returncode == 0
        assert alive(leader.pid) and alive(member)
    finally:
        os.kill(member, signal.SIGKILL)


GROUP_LEADER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_process_carrying_the_jobs_marker_is_stopped_on_delete(
    torchjob_home: Path, bystanders: list[subprocess.Popen[bytes]]
) -> None:
    """The other side of the proof: a leftover that carries the job's marker is the job's, and goes."""
    _record_running_job(torchjob_home, "leftover", 0, [0, 0], exact=False)
    uid = json.loads((torchjob_home / "jobs" / "leftover" / "local.json").read_text())["job_uid"]
    leftover = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={"TORCHJOB_JOB_UID": uid, "PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    bystanders.append(leftover)
    stranger = _bystander(bystanders)
    assert run_cli("delete", "leftover", home=torchjob_home).returncode == 0
    leftover.wait(timeout=10)
    assert leftover.returncode == -9 and alive(stranger.pid)


def test_a_process_stays_provably_its_own_when_the_wall_clock_steps(
    bystanders: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step of the wall clock (NTP, a VM restored) moves the boot time every date-based start time is derived
    from: the recorded process must still be found (or its job would take it for dead), and a pid whose start
    differs must still not be."""
    import psutil._pslinux

    process = _bystander(bystanders)
    identity = processes.identify(process.pid)
    assert identity is not None
    booted = psutil._pslinux.boot_time()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: booted + 1.0)
    found = processes.find(identity)
    assert found is not None and found.pid == process.pid
    assert processes.find(processes.Identity(process.pid, identity.started + 0.01)) is None


REPLICA_TREE = """
import subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
in_group = subprocess.Popen(sleep)  # the training process, in its shim's group
in_session = subprocess.Popen(sleep, start_new_session=True)  # a torchrun worker: out of reach of the group
print(in_group.pid, in_session.pid, flush=True)
time.sleep(600)
"""


def test_a_group_restarts_kill_reaches_every_survivors_tree_and_nothing_else(
    bystanders: list[subprocess.Popen[bytes]],
) -> None:
    """``kill_trees`` (a group restart's survivors killed together): each replica's shim, its group, and what it
    started in sessions of its own go; a replica of the job left out of the list, and a stranger, stay."""
    uid = str(uuid.uuid4())
    env = {"TORCHJOB_JOB_UID": uid, "PATH": "/usr/bin:/bin"}
    trees = []
    for _ in range(3):
        leader = subprocess.Popen(
            [sys.executable, "-c", REPLICA_TREE], env=env, start_new_session=True, stdout=subprocess.PIPE
        )
        bystanders.append(leader)
        assert leader.stdout is not None
        trees.append((leader, [int(pid) for pid in leader.stdout.readline().split()]))
    stranger = _bystander(bystanders)
    (first, first_below), (second, second_below), (kept, kept_below) = trees
    try:
        processes.kill_trees([processes.identify(first.pid), processes.identify(second.pid), None], uid)
        for leader in (first, second):
            assert leader.wait(timeout=10) == -signal.SIGKILL
        for pid in first_below + second_below:  # reaped by init once their parent is gone
            wait_until(lambda pid=pid: not alive(pid), timeout=10, what=f"process {pid} to go")
        assert alive(kept.pid) and all(alive(pid) for pid in kept_below) and alive(stranger.pid)
    finally:
        for pid in first_below + second_below + kept_below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
