"""In-place repair on the local backend: a SIGKILLed or hung member is replaced by a warm spare while the
survivors keep their processes, no sample is lost or trained twice, and every rank ends with the model of an
uninterrupted run."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.support.cli import run_cli
from tests.support.local_runs import IN_PLACE_GLOBAL_BATCH, job_file, job_object, shim_pid, start_run, trained
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.waits import wait_until
from torchjob import worker_files
from torchjob.testing import JobBuilder, make_job

STEPS = 60
REPLICAS = ("master-0", "worker-0", "worker-1")


def final_parameters(home: Path, job: str) -> list[list[float]]:
    output = home / "jobs" / job / "output"
    return [json.loads((output / f"final-{r}.json").read_text())["parameters"] for r in REPLICAS]


def in_place_job(name: str, spares: int = 1, **annotations: str) -> JobBuilder:
    return (
        make_job(name)
        .master()
        .workers(2)
        .command("python", str(INTEGRATION_SCRIPTS / "in_place_train.py"))
        .env(STEPS=str(STEPS))
        .annotate(**{"torchjob.io/spares": str(spares), **annotations})
        # A repair is a retry: it counts against backoffLimit like a restart (one allowed per spare here).
        .run_policy(backoffLimit=max(spares, 1))
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[list[float]]:
    """Every rank's final parameters after the same job ran without a fault (no spare: plain DDP)."""
    home = tmp_path_factory.mktemp("straight")
    path = job_file(home, in_place_job("mend", spares=0))
    straight = run_cli("run", str(path), home=home)
    assert straight.returncode == 0, straight.stderr[-2000:]
    return final_parameters(home, "mend")


def warm_and_training(home: Path, spares: int = 1) -> None:
    ready = [home / "jobs" / "mend" / "output" / "inplace" / f"spare-{k}.json" for k in range(spares)]
    wait_until(lambda: len(trained(home, "mend", "worker-1")) >= 5 and all(p.exists() for p in ready), what="warm")


def assert_repaired_exactly(
    home: Path, survivors: dict[str, int], uninterrupted: list[list[float]], repairs: int = 1
) -> None:
    """Repairs, no restart; the survivors kept their processes; every step's samples were trained once by
    the group that completed the step last; every rank ends with the uninterrupted run's model."""
    status = job_object(home, "mend")["status"]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, repairs), status["attempts"]
    # `torchjob list`: the repairs, and the spares (none ready once the job is over, of those it asked for).
    listed = run_cli("list", home=home).stdout.splitlines()[1].split()
    assert listed[0] == "mend" and listed[-2] == str(repairs) and listed[-1].startswith("0/"), listed
    state = json.loads((home / "jobs" / "mend" / "local.json").read_text())
    final = {p["replica"]: p["pid"] for p in state["processes"] if p["replica"] in survivors}
    assert final == survivors
    last: dict[int, dict[str, list[int]]] = {}
    for replica in REPLICAS:
        for record in trained(home, "mend", replica):
            step, generation = int(record["step"]), int(record["generation"])  # type: ignore[call-overload]
            by_generation = last.setdefault(step, {})
            by_generation.setdefault(str(generation), []).extend(record["samples"])  # type: ignore[arg-type]
    assert sorted(last) == list(range(STEPS))
    last_step_of: dict[str, int] = {}
    for step, groups in last.items():
        for generation in groups:
            last_step_of[generation] = max(step, last_step_of.get(generation, step))
    for step, groups in last.items():
        generation = max(groups, key=int)
        newest, expected = (
            sorted(groups[generation]),
            list(range(step * IN_PLACE_GLOBAL_BATCH, (step + 1) * IN_PLACE_GLOBAL_BATCH)),
        )
        if step == last_step_of[generation] and newest != expected:
            # A member frozen or killed after the step's collective, before it wrote its record, trained the
            # step (the others could not have completed it without it) but never said so: the last step of a
            # generation that broke may lack the lost rank's record. Never a sample twice or a stranger's.
            assert len(set(newest)) == len(newest) and set(newest) < set(expected), step
            continue
        assert newest == expected, step
    # The same world size, the same samples per rank, the state from a survivor: the same model as a run
    # without a fault, on every rank.
    for parameters in final_parameters(home, "mend"):
        assert parameters == pytest.approx(uninterrupted[0], abs=1e-6)


@pytest.mark.parametrize(
    ("victim", "rank", "reporter", "holders"),
    [("worker-1", 2, 0, "0, 1"), ("master-0", 0, 1, "1, 2")],  # the master too: the group meets at torchjob's store
)
def test_a_lost_member_is_replaced_by_a_warm_spare_and_the_survivors_carry_on(
    tmp_path: Path,
    torchjob_home: Path,
    uninterrupted: list[list[float]],
    victim: str,
    rank: int,
    reporter: int,
    holders: str,
) -> None:
    run = start_run(job_file(tmp_path, in_place_job("mend")), torchjob_home)
    warm_and_training(torchjob_home)
    survivors = {r: shim_pid(torchjob_home, "mend", r) for r in REPLICAS if r != victim}
    trainer = psutil.Process(shim_pid(torchjob_home, "mend", victim)).children()[0]
    trainer.send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert f"{victim} was killed by SIGKILL; spare-0 takes its place" in stderr, stderr
    assert f"spare spare-0 joins as {victim} (rank {rank} of 3)" in stdout
    # Said by the lowest survivor; the joiner's state comes from both survivors at once.
    said = f"Rank {reporter}: group repaired in place (generation 1, 3 ranks, rank {rank}'s state from ranks {holders})"
    assert said in stdout, stdout[-3000:]
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted)


def test_a_hung_member_is_stopped_and_replaced_while_the_others_wait(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    """SIGSTOP freezes worker-1: its peers block in a collective with it and say so, alive, while it misses its
    own announcements. With no annotation the planner names it within a second, stops it, and a spare takes
    its place."""
    run = start_run(job_file(tmp_path, in_place_job("mend")), torchjob_home)
    warm_and_training(torchjob_home)
    survivors = {r: shim_pid(torchjob_home, "mend", r) for r in ("master-0", "worker-0")}
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-1")).children()[0].send_signal(signal.SIGSTOP)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "torchjob: Hung: worker-1 fell silent while every other member waits for it in generation 0 (" in stderr, (
        stderr
    )
    assert "worker-1 stopped responding, the others wait for it" in stderr, stderr
    assert "worker-1 stopped responding (hung); spare-0 takes its place" in stderr
    assert "spare spare-0 joins as worker-1 (rank 2 of 3)" in stdout
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted)
    # Every member's last word: it had trained a step in the group as it was (so a silence of 1.5 s, not 3, counts).
    said = [json.loads(p.read_text()) for p in (torchjob_home / "jobs" / "mend" / "output" / "inplace").glob("*.json")]
    members = [s for s in said if worker_files.ANNOUNCE_EVERY in s]
    assert len(members) == 3 and all(s.get(worker_files.ANNOUNCE_SETTLED) is True for s in members), said


def test_a_stall_of_every_member_is_nobodys_silence_when_they_resume_one_by_one(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    """A stalled machine stops every member at once: SIGSTOP for 6 s, past the 3 s a member may be silent.
    master-0 and worker-0 resume 1.2 s before worker-1, and their steps wait for it: they witness its silence
    only from their own return, so nobody is replaced and the job ends as if it had never stalled."""
    run = start_run(job_file(tmp_path, in_place_job("mend")), torchjob_home)
    warm_and_training(torchjob_home)
    survivors = {r: shim_pid(torchjob_home, "mend", r) for r in REPLICAS}
    trainers = {r: psutil.Process(pid).children()[0] for r, pid in survivors.items()}
    for trainer in trainers.values():
        trainer.send_signal(signal.SIGSTOP)
    time.sleep(6)
    for replica in ("master-0", "worker-0"):
        trainers[replica].send_signal(signal.SIGCONT)
    time.sleep(1.2)
    trainers["worker-1"].send_signal(signal.SIGCONT)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "fell silent" not in stderr and "stopped beating" not in stderr, stderr[-3000:]
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted, repairs=0)


def test_two_members_lost_at_once_take_two_spares(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    run = start_run(job_file(tmp_path, in_place_job("mend", spares=2)), torchjob_home)
    warm_and_training(torchjob_home, spares=2)
    survivors = {"master-0": shim_pid(torchjob_home, "mend", "master-0")}
    trainers = [psutil.Process(shim_pid(torchjob_home, "mend", r)).children()[0] for r in ("worker-0", "worker-1")]
    for trainer in trainers:
        trainer.send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert stderr.count("takes its place in the running group") == 2, stderr
    assert "spare spare-0 joins as" in stdout and "spare spare-1 joins as" in stdout
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted, repairs=2)


def test_a_member_lost_during_a_repair_is_repaired_around_too(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    """worker-0 is frozen, so the first repair (spare-0 for the killed worker-1) cannot form; worker-0 is
    then killed in the middle of it. The next membership replaces it with spare-1, and the members already
    waiting for the first one give it up and form the next."""
    run = start_run(job_file(tmp_path, in_place_job("mend", spares=2)), torchjob_home)
    warm_and_training(torchjob_home, spares=2)
    survivors = {"master-0": shim_pid(torchjob_home, "mend", "master-0")}
    frozen = psutil.Process(shim_pid(torchjob_home, "mend", "worker-0")).children()[0]
    frozen.send_signal(signal.SIGSTOP)
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-1")).children()[0].send_signal(signal.SIGKILL)
    membership = torchjob_home / "jobs" / "mend" / "output" / "membership.json"
    wait_until(lambda: membership.exists() and json.loads(membership.read_text())["generation"] == 1, what="repair 1")
    frozen.send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "spare spare-0 joins as worker-1 (rank 2 of 3)" in stdout
    assert "spare spare-1 joins as worker-0 (rank 1 of 3)" in stdout
    joiners = "rank 1's state from rank 0; rank 2's state from rank 0"
    assert f"Rank 0: group repaired in place (generation 2, 3 ranks, {joiners})" in stdout, stdout[-3000:]
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted, repairs=2)


def test_a_spare_frozen_as_it_is_given_a_place_is_replaced_by_the_next_in_seconds(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    """spare-0 is SIGSTOPped just before worker-1 is killed, so it is given worker-1's place (its last word as a
    spare is recent) and never arrives. The survivors, waiting for the generation to form, say they wait; the
    frozen spare, silent as the member it became, is named and its place goes to spare-1: no 60 s wait for the
    group's forming to time out, no restart."""
    run = start_run(job_file(tmp_path, in_place_job("mend", spares=2)), torchjob_home)
    warm_and_training(torchjob_home, spares=2)
    survivors = {r: shim_pid(torchjob_home, "mend", r) for r in ("master-0", "worker-0")}
    psutil.Process(shim_pid(torchjob_home, "mend", "spare-0")).children()[0].send_signal(signal.SIGSTOP)
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-1")).children()[0].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "worker-1 was killed by SIGKILL; spare-0 takes its place" in stderr, stderr
    assert "torchjob: Hung: worker-1 fell silent while every other member waits for it in generation 1 (" in stderr, (
        stderr
    )
    assert "worker-1 stopped responding (hung); spare-1 takes its place" in stderr, stderr
    assert "spare spare-1 joins as worker-1 (rank 2 of 3)" in stdout and "spare spare-0 joins" not in stdout
    assert "did not form within" not in stdout + stderr
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted, repairs=2)


def test_a_member_stuck_in_its_step_after_leaving_it_falls_silent_and_is_replaced(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    """worker-1 blocks in its own code after a step's collectives (its peers then wait for it in the next), and
    worker-0 is killed. The group is repaired around worker-0; worker-1 cuts its connections, but its step does not
    end, so it cannot join: it stops announcing itself, is named as a frozen member is, and spare-1 takes its place.
    Without that it would announce itself alive forever, and its peers would wait for it until their forming timed
    out."""
    run = start_run(job_file(tmp_path, in_place_job("mend", spares=2)), torchjob_home)
    warm_and_training(torchjob_home, spares=2)
    survivors = {"master-0": shim_pid(torchjob_home, "mend", "master-0")}
    output = torchjob_home / "jobs" / "mend" / "output"
    (output / "stick-worker-1").touch()
    wait_until(lambda: (output / "stuck-worker-1").exists(), what="worker-1 stuck in its step")
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-0")).children()[0].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "worker-0 was killed by SIGKILL; spare-0 takes its place" in stderr, stderr
    assert "torchjob: rank 2: its step has not ended" in stdout, stdout[-3000:]
    assert "its step waits in:" in stdout and "time.sleep(3600)" in stdout, stdout[-3000:]  # where it is stuck
    assert "worker-1 stopped responding (hung); spare-1 takes its place" in stderr, stderr
    assert "spare spare-1 joins as worker-1 (rank 2 of 3)" in stdout
    assert "did not form within" not in stdout + stderr
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted, repairs=2)


def test_a_member_lost_while_no_spare_is_ready_waits_for_the_next_to_warm_and_is_repaired_from_memory(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]]
) -> None:
    """spare-0 is killed, and worker-1 as soon as spare-1 is started in its place, still cold (it takes 5 s longer
    to warm, as a spare Pod can). The survivors hold the group's state in memory, so the group waits for spare-1 and
    repairs in place: no restart, no checkpoint, the model of an uninterrupted run. The job sets its own wait (50 s),
    and the survivors outwait it by 15 s."""
    job = in_place_job("mend", **{"torchjob.io/spare-wait-seconds": "50"})
    run = start_run(job_file(tmp_path, job), torchjob_home)
    warm_and_training(torchjob_home)
    survivors = {r: shim_pid(torchjob_home, "mend", r) for r in ("master-0", "worker-0")}
    (torchjob_home / "jobs" / "mend" / "output" / "cold-spare-1").write_text("5")
    psutil.Process(shim_pid(torchjob_home, "mend", "spare-0")).children()[0].send_signal(signal.SIGKILL)
    state = torchjob_home / "jobs" / "mend" / "local.json"
    wait_until(lambda: '"spare-1"' in state.read_text(), what="the next spare started")
    assert not (torchjob_home / "jobs" / "mend" / "output" / "inplace" / "spare-1.json").exists()  # still cold
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-1")).children()[0].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    waits = "worker-1 was killed by SIGKILL; no spare is ready to take its place: the group waits for one, up to 50s"
    assert waits in stderr, stderr
    assert (torchjob_home / "jobs" / "mend" / "output" / "repair-timeout-0").read_text() == "65"
    assert "worker-1 was killed by SIGKILL; spare-1 takes its place" in stderr, stderr
    assert "spare spare-1 joins as worker-1 (rank 2 of 3)" in stdout, stdout[-3000:]
    assert "group repaired in place (generation 1, 3 ranks, rank 2's state from ranks 0, 1)" in stdout
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted)


def test_a_lost_spare_is_replaced_and_the_group_never_notices(tmp_path: Path, torchjob_home: Path) -> None:
    job = (
        make_job("spareless")
        .master()
        .workers(1)
        .command("python", str(INTEGRATION_SCRIPTS / "in_place_train.py"))
        .env(STEPS="250")  # 25 s: time for the next spare to warm up while the group trains
        .annotate(**{"torchjob.io/spares": "1"})
    )
    path = job_file(tmp_path, job)
    run = start_run(path, torchjob_home)
    output = torchjob_home / "jobs" / "spareless" / "output"
    wait_until(lambda: (output / "inplace" / "spare-0.json").exists(), what="a warm spare")
    psutil.Process(shim_pid(torchjob_home, "spareless", "spare-0")).children()[0].send_signal(signal.SIGKILL)
    wait_until(lambda: (output / "inplace" / "spare-1.json").exists(), timeout=180, what="the next spare")
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    status = job_object(torchjob_home, "spareless")["status"]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (0, 0, 0)


def test_a_plain_script_with_spares_still_gets_a_group_restart(tmp_path: Path, torchjob_home: Path) -> None:
    """Spares only help a group that trains under the in-place loop: one that never said so is restarted."""
    job = (
        make_job("plainspares")
        .master()
        .workers(1)
        .command(
            "python", str(INTEGRATION_SCRIPTS / "hang_train.py"), "--first-attempt-steps", "100000", "--steps", "5"
        )
        .annotate(**{"torchjob.io/spares": "1", "torchjob.io/termination-grace-seconds": "2"})
    )
    path = job_file(tmp_path, job)
    run = start_run(path, torchjob_home)
    output = torchjob_home / "jobs" / "plainspares" / "output"
    wait_until(lambda: (output / "inplace" / "spare-0.json").exists(), timeout=180, what="a warm spare")
    psutil.Process(shim_pid(torchjob_home, "plainspares", "worker-0")).children()[0].send_signal(signal.SIGKILL)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    status = job_object(torchjob_home, "plainspares")["status"]
    assert (status["attempt"], status["restartCount"], status["repairs"]) == (1, 1, 0)
    assert "worker-0 was killed by SIGKILL" in status["attempts"][0]["outcome"]


@pytest.mark.parametrize("slow_step", [0.0, 3.0], ids=["step-as-usual", "slow-step"])
def test_a_member_on_notice_of_eviction_hands_its_place_to_a_spare_and_no_step_fails(
    tmp_path: Path, torchjob_home: Path, uninterrupted: list[list[float]], slow_step: float
) -> None:
    """A SIGTERM from outside (a drain's eviction, a spot notice) to worker-1: it trains on, the spare takes its
    place at a step boundary (a re-form, not a repair after a failed step), and it leaves with exit code 0.
    ``slow-step``: the step in progress runs 30 times its usual time (a loaded machine) while the handover is
    published; no member takes that for a silent peer and leaves the step."""
    job = in_place_job("mend").env(SLOW_ON_NOTICE=str(slow_step))
    run = start_run(job_file(tmp_path, job), torchjob_home)
    warm_and_training(torchjob_home)
    survivors = {r: shim_pid(torchjob_home, "mend", r) for r in ("master-0", "worker-0")}
    leaving = shim_pid(torchjob_home, "mend", "worker-1")
    psutil.Process(leaving).children()[0].send_signal(signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert "worker-1 is being preempted; spare-0 takes its place" in stderr, stderr
    assert "spare spare-0 joins as worker-1 (rank 2 of 3)" in stdout
    assert "Rank 0: group re-formed in place (generation 1, 3 ranks, rank 2's state from ranks 0, 1)" in stdout, stdout
    assert "worker-1 has no place in the group any more and leaves it" in stdout
    assert "leaving on SIGTERM" not in stdout and "repaired around a lost peer" not in stdout, stdout
    # No step failed: the one change of the group was agreed at a step boundary.
    repairs = worker_files.repairs_file(torchjob_home / "jobs" / "mend" / "output").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in repairs] == ["regroup"]
    state = json.loads((torchjob_home / "jobs" / "mend" / "local.json").read_text())
    left = next(p for p in state["processes"] if p["pid"] == leaving)
    assert json.loads(Path(left["status_path"]).read_text())["exitCode"] == 0
    assert_repaired_exactly(torchjob_home, survivors, uninterrupted)


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(
            "forward",
            marks=pytest.mark.heavy(
                twin="tests/integration/test_in_place_repair.py::test_a_survivor_computing_when_a_peer_is_lost_leaves_its_step_at_its_next_module_or_gradient[backward]"
            ),
        ),
        "backward",
    ],
)
def test_a_survivor_computing_when_a_peer_is_lost_leaves_its_step_at_its_next_module_or_gradient(
    tmp_path: Path, torchjob_home: Path, where: str
) -> None:
    # DDP waits for no collective in its forward, and for its gradients' all-reduce only at the end of its
    # backward: a survivor computing there when its peer is lost would go on to that end.
    job = in_place_job("mend").env(STEPS="12", STEP_SECONDS="0", **{f"{where.upper()}_SECONDS": "2"})
    run = start_run(job_file(tmp_path, job), torchjob_home)
    output = torchjob_home / "jobs" / "mend" / "output"
    spare = output / "inplace" / "spare-0.json"
    wait_until(lambda: len(trained(torchjob_home, "mend", "worker-1")) >= 2 and spare.exists(), what="warm")
    began = output / f"{where}-worker-1"
    began.unlink()
    wait_until(began.exists, what=where)  # every member is in the same step's sleep
    psutil.Process(shim_pid(torchjob_home, "mend", "worker-1")).children()[0].send_signal(signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    left = "torchjob: rank 0: its step failed (rank 0: left its step: the group was repaired around a lost peer)"
    assert left in stdout, stdout[-3000:]
    assert "Rank 0: group repaired in place (generation 1, 3 ranks, rank 2's state from ranks 0, 1)" in stdout
    status = job_object(torchjob_home, "mend")["status"]
    assert (status["restartCount"], status["repairs"]) == (0, 1)
