"""A replica of several processes (``nprocPerNode: 2``) whose script runs directly: its first process starts the
other (train/local_ranks.py), the replica's ranks are adjacent, and it is lost and replaced as a whole: in place
by a spare of two processes, or by a group restart."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path

import psutil
import pytest

from tests.support.local_runs import job_file, job_object, shim_pid, start_run, trained
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.waits import wait_until
from torchjob.testing import JobBuilder, make_job

STEPS = 120


def pairs(name: str, script: str) -> JobBuilder:
    """A master and a worker of two processes each, running ``script`` directly."""
    return (
        make_job(name).master().workers(1).spec(nprocPerNode="2").command("python", str(INTEGRATION_SCRIPTS / script))
    )


def two_per_replica(name: str, spares: int) -> JobBuilder:
    return (
        pairs(name, "in_place_train.py")
        .env(STEPS=str(STEPS))
        .annotate(**{"torchjob.io/spares": str(spares)})
        .run_policy(backoffLimit=1)
    )


def processes_of(home: Path, name: str, replica: str) -> list[psutil.Process]:
    """The replica's processes: the one torchjob started (its shim's child), then the one it started."""
    first = psutil.Process(shim_pid(home, name, replica)).children()[0]
    return [first, *first.children()]


def no_process_left(home: Path, script_name: str = "in_place_train.py") -> bool:
    """Whether no process of ``script_name`` under the state directory ``home`` is left."""
    script = str(INTEGRATION_SCRIPTS / script_name)
    return not any(
        script in " ".join(p.info["cmdline"] or []) and str(home) in (p.info["environ"] or {}).get("TORCHJOB_HOME", "")
        for p in psutil.process_iter(["cmdline", "environ"])
    )


@pytest.mark.parametrize("victim", ["first", "second"])
def test_a_replica_of_two_processes_is_replaced_in_place_by_a_spare_of_two(
    tmp_path: Path, torchjob_home: Path, victim: str
) -> None:
    """Either process of worker-0 SIGKILLed: the replica ends as one (its first process ends the other, or the
    kernel does when the first goes), and the spare's two processes, both warm, take ranks 2 and 3 while the
    master's two processes (ranks 0 and 1) carry on in their own processes."""
    run = start_run(job_file(tmp_path, two_per_replica("pair", spares=1)), torchjob_home)
    spare_ready = torchjob_home / "jobs" / "pair" / "output" / "inplace" / "spare-0.json"
    wait_until(lambda: len(trained(torchjob_home, "pair", "worker-0")) >= 20 and spare_ready.exists(), what="warm")
    master = [p.pid for p in processes_of(torchjob_home, "pair", "master-0")]
    assert len(master) == 2
    worker = processes_of(torchjob_home, "pair", "worker-0")
    assert len(worker) == 2
    worker[0 if victim == "first" else 1].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    if victim == "second":
        assert "local rank 1 of worker-0 ended with code 137; its replica's other processes end with it" in stdout
    assert "spare-0 takes its place" in stderr, stderr[-3000:]
    assert "spare spare-0 joins as worker-0 (rank 2 of 4)" in stdout, stdout[-3000:]
    assert "spare spare-0 joins as worker-0 (rank 3 of 4)" in stdout, stdout[-3000:]
    # From both survivors; or, where the kill caught one of them a step behind the other (its collective failed
    # first: seen once in CI, rank 1 behind rank 0), its state too from the one a step ahead.
    joiners = ["rank 2's state from ranks 0, 1; rank 3's state from ranks 0, 1"] + [
        f"rank {late}'s state from rank {ahead}; rank 2's state from rank {ahead}; rank 3's state from rank {ahead}"
        for late, ahead in ((1, 0), (0, 1))
    ]
    repaired = [f"group repaired in place (generation 1, 4 ranks, {sources})" for sources in joiners]
    assert any(said in stdout for said in repaired), stdout[-3000:]
    status = job_object(torchjob_home, "pair")["status"]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1), status["attempts"]
    # The master's two processes trained every step, in their own processes, with ranks 0 and 1.
    by_step: dict[int, set[int]] = {}
    for record in trained(torchjob_home, "pair", "master-0"):
        by_step.setdefault(int(record["step"]), set()).update(record["samples"])  # type: ignore[call-overload, arg-type]
    assert sorted(by_step) == list(range(STEPS))
    final = json.loads((torchjob_home / "jobs" / "pair" / "output" / "final-master-0.json").read_text())
    assert final["rank"] in (0, 1) and final["repairs"] == 1
    assert all(not psutil.pid_exists(pid) for pid in master)  # ended with the job, not before it
    assert no_process_left(torchjob_home)


def test_a_replica_of_two_processes_without_spares_restarts_with_the_group(tmp_path: Path, torchjob_home: Path) -> None:
    """No spare: the same replica lost restarts the group (both replicas' two processes start again), and the job
    ends Succeeded with 4 ranks."""
    run = start_run(job_file(tmp_path, two_per_replica("pairs", spares=0)), torchjob_home)
    wait_until(lambda: len(trained(torchjob_home, "pairs", "worker-0")) >= 20, what="training")
    processes_of(torchjob_home, "pairs", "worker-0")[1].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    status = job_object(torchjob_home, "pairs")["status"]
    assert (status["attempt"], status["restartCount"]) == (1, 1), status["attempts"]
    assert "worker-0 exited with code 137" in status["attempts"][0]["outcome"], status["attempts"]
    assert "Rank 0: done: 120 steps" in stdout, stdout[-3000:]
    sizes = {len(record["samples"]) for record in trained(torchjob_home, "pairs", "worker-0")}  # type: ignore[arg-type]
    assert sizes == {1}  # ranks 2 and 3 of 4: 6 samples a step, ranks 0 and 1 take the other 4
    # The first attempt's replicas are each recorded gone, when the backend saw them go (the restart's split reads it).
    state = json.loads((torchjob_home / "jobs" / "pairs" / "local.json").read_text())
    first = [p for p in state["processes"] if p["attempt"] == 0 and p["role"] == "replica"]
    assert len(first) == 2 and all(p["gone_at"] for p in first), first
    assert all(p["gone_at"] >= (p["stopping_since"] or p["started_at"]) for p in first), first
    assert no_process_left(torchjob_home)


def test_an_uncaught_exception_in_a_replicas_first_process_ends_its_others_at_once(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """The first process of master-0 raises before the group forms (warm-started, as every local replica is): its
    other process ends with it rather than wait 600 s for the group, and the group restarts and forms."""
    job = pairs("raises", "first_process_fails.py").run_policy(backoffLimit=1)
    run = start_run(job_file(tmp_path, job), torchjob_home)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    status = job_object(torchjob_home, "raises")["status"]
    assert "master-0 exited with code 1: RuntimeError: the first process fails" in status["attempts"][0]["outcome"]
    assert "Rank 0: formed a group of 4" in stdout, stdout[-3000:]
    assert no_process_left(torchjob_home, "first_process_fails.py")


def test_a_replica_whose_first_process_fails_as_its_other_is_killed_ends_as_the_killed_one(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """worker-0's first process raises a lost peer's error just before its second process is SIGKILLed (as when
    the kernel closes a killed process's sockets before it can be reaped): the replica ends with code 137 and
    says which process was killed, so the attempt's root cause is the kill, not the echo, and the group restarts."""
    job = (
        pairs("echo", "killed_after_first_fails.py").env(ECHO_MARKER=str(tmp_path / "echo")).run_policy(backoffLimit=1)
    )
    run = start_run(job_file(tmp_path, job), torchjob_home)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    outcome = job_object(torchjob_home, "echo")["status"]["attempts"][0]["outcome"]
    assert "worker-0 exited with code 137 (SIGKILL): local rank 1 of worker-0 was killed by SIGKILL" in outcome
    assert "Rank 0: formed a group of 4" in stdout, stdout[-3000:]
    assert no_process_left(torchjob_home, "killed_after_first_fails.py")


def test_every_process_of_a_replica_reports_its_own_steps_without_a_metrics_logger(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """A script that trains in its own loop is reported by torchjob.autoreport: the replica's second process,
    forked after the first process's reporter started, reports its own steps under its own key (a fork copies
    the reporter but not its thread)."""
    job = pairs("ownloop", "own_loop_train.py").env(STEPS="60")
    run = start_run(job_file(tmp_path, job), torchjob_home)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    heartbeats = torchjob_home / "jobs" / "ownloop" / "output" / "heartbeat"
    for key in ("master-0-0", "master-0-1", "worker-0-0", "worker-0-1"):
        beat = json.loads((heartbeats / f"{key}.json").read_text())
        assert beat["step"] >= 20, (key, beat)  # its own count (the last second's steps may go unreported)


def test_a_frozen_second_process_of_a_replica_is_found_and_its_replica_replaced_in_place(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """worker-0's second process frozen by SIGSTOP: its replica speaks through its first process, which still
    beats, so the frozen one is found by its own heartbeat's silence; the replica is replaced as a whole by the
    spare of two, and the job ends Succeeded."""
    run = start_run(job_file(tmp_path, two_per_replica("frozen", spares=1)), torchjob_home)
    spare_ready = torchjob_home / "jobs" / "frozen" / "output" / "inplace" / "spare-0.json"
    wait_until(lambda: len(trained(torchjob_home, "frozen", "worker-0")) >= 20 and spare_ready.exists(), what="warm")
    worker = processes_of(torchjob_home, "frozen", "worker-0")
    worker[1].send_signal(signal.SIGSTOP)
    try:
        stdout, stderr = run.communicate(timeout=300)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker[1].kill()
    assert run.returncode == 0, stderr[-3000:]
    status = job_object(torchjob_home, "frozen")["status"]
    assert "worker-0 stopped beating while the others beat" in stderr, stderr[-3000:]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1), status["attempts"]
    assert "spare spare-0 joins as worker-0 (rank 3 of 4)" in stdout, stdout[-3000:]
    assert no_process_left(torchjob_home)


def test_a_replica_of_two_processes_on_notice_of_eviction_hands_both_places_to_a_spare_of_two(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """A SIGTERM from outside (a drain, a spot notice) to worker-0's first process: the replica trains on, the spare
    of two takes ranks 2 and 3 at a step boundary (a re-form, no failed step), and both of worker-0's processes
    leave with it, the replica with exit code 0."""
    run = start_run(job_file(tmp_path, two_per_replica("notice", spares=1)), torchjob_home)
    spare_ready = torchjob_home / "jobs" / "notice" / "output" / "inplace" / "spare-0.json"
    wait_until(lambda: len(trained(torchjob_home, "notice", "worker-0")) >= 20 and spare_ready.exists(), what="warm")
    leaving = shim_pid(torchjob_home, "notice", "worker-0")
    worker = processes_of(torchjob_home, "notice", "worker-0")
    worker[0].send_signal(signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "worker-0 is being preempted; spare-0 takes its place" in stderr, stderr[-3000:]
    assert "spare spare-0 joins as worker-0 (rank 2 of 4)" in stdout, stdout[-3000:]
    assert "spare spare-0 joins as worker-0 (rank 3 of 4)" in stdout, stdout[-3000:]
    joiners = "rank 2's state from ranks 0, 1; rank 3's state from ranks 0, 1"
    assert f"group re-formed in place (generation 1, 4 ranks, {joiners})" in stdout, stdout[-3000:]
    assert "repaired around a lost peer" not in stdout, stdout[-3000:]
    status = job_object(torchjob_home, "notice")["status"]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 1), status["attempts"]
    repairs = (torchjob_home / "jobs" / "notice" / "output" / "repairs.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in repairs] == ["regroup"]
    state = json.loads((torchjob_home / "jobs" / "notice" / "local.json").read_text())
    left = next(p for p in state["processes"] if p["pid"] == leaving)
    assert json.loads(Path(left["status_path"]).read_text())["exitCode"] == 0
    assert not any(p.is_running() for p in worker)
    assert no_process_left(torchjob_home)
