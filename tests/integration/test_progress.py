"""What torchjob knows of a running local job's training: a stopped process named as hung, and progress.

The cluster twins of these tests are in tests/node/test_progress_on_node.py: the same assertions, with the
reports travelling from Pods to the operator instead of through heartbeat files.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.cli import run_cli
from tests.support.load import cpu_hogs
from tests.support.local_runs import job_file, job_object, shim_pid, start_run
from tests.support.paths import INTEGRATION_SCRIPTS, ROOT
from tests.support.waits import wait_until
from torchjob.testing import make_job


def training_process(home: Path, job: str, replica: str, script: str = "hang_train.py") -> psutil.Process:
    """The python process running the script for ``replica`` (the shim's child)."""
    shim = shim_pid(home, job, replica)
    for child in psutil.Process(shim).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a short-lived helper may be gone already
            if script in " ".join(child.cmdline()):
                return child
    raise AssertionError(f"no training process under {replica}'s shim {shim}")


def heartbeat_step(home: Path, job: str, process: str) -> int:
    try:
        return int(json.loads((home / "jobs" / job / "output" / "heartbeat" / f"{process}.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def test_a_sigstopped_process_is_named_as_hung_and_the_group_restarts(tmp_path: Path, torchjob_home: Path) -> None:
    """SIGSTOP freezes a rank without a crash: its peers wait in the next all_reduce (gloo's own timeout is
    30 minutes) but keep beating. With no annotation, the liveness deadline (10 s) ends the attempt and names
    the replica that went silent."""
    job = (
        make_job("frozen")
        .master()
        .workers(1)
        .command(
            "python", str(INTEGRATION_SCRIPTS / "hang_train.py"), "--first-attempt-steps", "100000", "--steps", "10"
        )
        .annotate(**{"torchjob.io/termination-grace-seconds": "2"})
    )
    path = job_file(tmp_path, job)
    run = start_run(path, torchjob_home)
    try:
        stepping = lambda: run.poll() is not None or heartbeat_step(torchjob_home, "frozen", "worker-0-0") >= 5  # noqa: E731
        wait_until(stepping, timeout=180, what="five steps")
        assert run.poll() is None, run.communicate()[1][-2000:]
        os.kill(training_process(torchjob_home, "frozen", "worker-0").pid, signal.SIGSTOP)
        _, stderr = run.communicate(timeout=180)
    finally:
        run.kill()
    assert run.returncode == 0, stderr[-2000:]
    status = job_object(torchjob_home, "frozen")["status"]
    assert status["restartCount"] == 1 and status["attempt"] == 1
    outcome = status["attempts"][0]["outcome"]
    assert outcome.startswith("Hung: worker-0 stopped beating while the others beat (silent for ")
    assert "worker-0" in outcome and "silent for " in outcome, outcome
    assert status["trainerStatus"]["progressPercentage"] == 100  # the second attempt ran all its steps


@pytest.mark.parametrize("controller_too", [False, True], ids=["replicas", "replicas-and-controller"])
def test_a_stall_of_the_machine_names_nobody_when_its_processes_resume_one_by_one(
    tmp_path: Path, torchjob_home: Path, controller_too: bool
) -> None:
    """A stalled machine (a paused VM, a swap storm) stops every process at once, here by SIGSTOP for 14 s, past
    the liveness deadline (10 s). worker-0 resumes 2 s before master-0 and beats at once, while master-0 is still
    stopped: its beats witness master-0's silence only from its own return. When the controller stalls too (for
    22 s, past the progress deadline of 20 s as well) and resumes first, it gives the replicas time to report
    before it judges anything. Nobody is named, and the job runs through on its first attempt."""
    job = (
        make_job("stall")
        .master()
        .workers(1)
        .command("python", str(INTEGRATION_SCRIPTS / "hang_train.py"), "--steps", "300")
        .annotate(**{"torchjob.io/progress-deadline-seconds": "20", "torchjob.io/termination-grace-seconds": "2"})
    )
    run = start_run(job_file(tmp_path, job), torchjob_home)
    try:
        stepping = lambda: run.poll() is not None or heartbeat_step(torchjob_home, "stall", "master-0-0") >= 5  # noqa: E731
        wait_until(stepping, timeout=180, what="five steps")
        assert run.poll() is None, run.communicate()[1][-2000:]
        master, worker = (training_process(torchjob_home, "stall", r) for r in ("master-0", "worker-0"))
        stalled = [psutil.Process(run.pid), master, worker] if controller_too else [master, worker]
        for process in stalled:
            process.send_signal(signal.SIGSTOP)
        stall = 22 if controller_too else 14  # the controller, running, would rightly judge 20 s without a step
        time.sleep(stall)
        if controller_too:  # the controller goes on first, then worker-0, 2 s before master-0
            stalled[0].send_signal(signal.SIGCONT)
            time.sleep(0.5)
        worker.send_signal(signal.SIGCONT)
        time.sleep(2)
        master.send_signal(signal.SIGCONT)
        heartbeat = torchjob_home / "jobs" / "stall" / "output" / "heartbeat" / "worker-0-0.json"
        assert json.loads(heartbeat.read_text())["beating_for"] < stall  # its steady run began at its return
        _, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 0, stderr[-2000:]
    status = job_object(torchjob_home, "stall")["status"]
    assert (status["attempt"], status["restartCount"]) == (0, 0), status.get("attempts")
    assert status["trainerStatus"]["progressPercentage"] == 100


def test_a_slow_start_and_a_long_evaluation_are_never_judged_hung_by_a_short_progress_deadline(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """A start slower than the progress deadline (a dataset download, a checkpoint load): the deadline counts
    only from the first step; an evaluation longer than it, marked as a phase (``torchjob.train.section``): it
    has its own allowance. The job runs through on its first attempt."""
    evaluation = "--evaluate-at 4 --evaluate-seconds 12"
    script = f"sleep 20; exec {sys.executable} {INTEGRATION_SCRIPTS / 'hang_train.py'} --steps 8 {evaluation}"
    job = (
        make_job("slow")
        .master()
        .workers(1)
        .command("sh", "-c", script)
        .annotate(**{"torchjob.io/progress-deadline-seconds": "8", "torchjob.io/termination-grace-seconds": "2"})
    )
    result = run_cli("run", str(job_file(tmp_path, job)), home=torchjob_home)
    assert result.returncode == 0, result.stderr[-2000:]
    status = job_object(torchjob_home, "slow")["status"]
    assert (status["attempt"], status["restartCount"]) == (0, 0), status["attempts"]
    assert "[worker-0] rank 1: done" in result.stdout
    assert status["learnedDeadlines"]["sectionSeconds"] == {"evaluation": 300}  # the floor: 5 x 12 s is less


def test_a_plain_script_reports_its_steps_and_a_sigstopped_rank_is_named_within_seconds(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """The MNIST script that never imports torchjob (train_plain.py), with no annotation: torchjob's optimizer
    hook reports its steps and beats, so the one frozen rank is named by the liveness deadline, not by gloo's
    30-minute timeout, and the group restarts and finishes."""
    script = str(ROOT / "examples" / "mnist" / "train_plain.py")
    job = (
        make_job("plain")
        .master()
        .workers(1)
        # Twenty epochs (~1,260 steps a rank): the stop must land while the rank trains. It beats once a second, and by
        # its first beat here a rank had trained ~170 steps (of 189 in 3 epochs): CI's loaded run once stopped it only
        # after its last step, and the job succeeded around a stopped rank.
        .command("python", script, "--epochs", "20", "--log-interval", "1000")
        .annotate(**{"torchjob.io/termination-grace-seconds": "2"})
    )
    run = start_run(job_file(tmp_path, job), torchjob_home)
    try:
        stepping = lambda: run.poll() is not None or heartbeat_step(torchjob_home, "plain", "worker-0-0") >= 10  # noqa: E731
        wait_until(stepping, timeout=180, what="ten optimizer steps reported by a script that knows nothing of them")
        assert run.poll() is None, run.communicate()[1][-2000:]
        training_process(torchjob_home, "plain", "worker-0", "train_plain.py").send_signal(signal.SIGSTOP)
        stopped_at = heartbeat_step(torchjob_home, "plain", "worker-0-0")
        _, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 0, stderr[-2000:]
    status = job_object(torchjob_home, "plain")["status"]
    assert (status["attempt"], status["restartCount"]) == (1, 1), f"stopped at step {stopped_at}: {status}"
    outcome = status["attempts"][0]["outcome"]
    assert outcome.startswith("Hung: worker-0 stopped beating while the others beat (silent for "), outcome


def test_a_job_can_keep_torchjobs_reports_out_of_its_processes(tmp_path: Path, torchjob_home: Path) -> None:
    script = "import os, sys; print(os.environ.get('TORCHJOB_AUTOREPORT'), 'sitecustomize' in sys.modules)"
    quiet = (
        make_job("quiet").workers(1).command("python", "-c", script).annotate(**{"torchjob.io/auto-report": "false"})
    )
    result = run_cli("run", str(job_file(tmp_path, quiet)), home=torchjob_home)
    assert result.returncode == 0 and "[worker-0] None" in result.stdout, result.stdout
    told = make_job("told").workers(1).command("python", "-c", script)
    (tmp_path / "told").mkdir()
    result = run_cli("run", str(job_file(tmp_path / "told", told)), home=torchjob_home)
    assert result.returncode == 0 and "[worker-0] 1 True" in result.stdout, result.stdout


def test_progress_moves_in_the_list_while_mnist_trains_and_ends_at_100(tmp_path: Path, torchjob_home: Path) -> None:
    """The README's main job: its status (what `torchjob list` and `get` read) follows the training."""
    seen: list[int] = []
    run = start_run(ROOT / "examples" / "mnist" / "job.yaml", torchjob_home)
    try:
        while run.poll() is None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                seen.append(job_object(torchjob_home, "mnist")["status"]["trainerStatus"]["progressPercentage"])
            time.sleep(0.1)
        _, stderr = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 0, stderr[-2000:]
    moving = sorted(set(seen) - {100})
    assert len(moving) >= 2 and all(0 <= v < 100 for v in moving), seen  # more than one value on the way
    assert seen == sorted(seen)  # never backwards
    listed = run_cli("list", home=torchjob_home).stdout.splitlines()
    assert listed[0].split()[:3] == ["NAME", "STATE", "PROGRESS"]
    assert listed[1].split()[:3] == ["mnist", "Succeeded", "100%"]
    shown = run_cli("get", "mnist", home=torchjob_home).stdout
    assert "Progress:  100% · ~0s left · step=336 totalSteps=336" in shown, shown


def test_on_a_terminal_run_shows_a_progress_bar_and_elsewhere_nothing_extra(
    tmp_path: Path, torchjob_home: Path
) -> None:
    job = make_job("bar").workers(1).command("python", str(INTEGRATION_SCRIPTS / "hang_train.py"), "--steps", "150")
    path = job_file(tmp_path, job)
    env = {**os.environ, "TORCHJOB_HOME": str(torchjob_home), "TERM": "xterm", "COLUMNS": "120"}
    argv = [sys.executable, "-m", "torchjob.cli.main", "run", str(path)]
    parent, child = pty.openpty()
    run = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # EIO: the terminal's other end closed (the run ended)
            break
        if not chunk:
            break
        seen += chunk
    os.close(parent)
    assert run.wait(timeout=60) == 0, seen[-2000:]
    shown = seen.decode(errors="replace")
    assert "━" in shown and re.search(r"\d+% · step \d+/150", shown), shown[-2000:]

    plain = run_cli("run", str(path), "--replace", home=torchjob_home)  # a pipe, not a terminal
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "· step" not in plain.stdout + plain.stderr and "━" not in plain.stdout + plain.stderr


def test_a_deadlock_in_a_plain_script_is_found_by_a_learned_deadline_with_no_annotation(
    tmp_path: Path, torchjob_home: Path
) -> None:
    """Nobody progresses, everyone is alive (one rank stopped between collectives, the other waits in the
    next all-reduce), no annotation, a script that never imports torchjob, and a CPU hog beside it: the progress
    deadline learned from the job's own steps ends the attempt as Hung, the learned value is kept in the status
    and shown by ``torchjob get``, and the next attempt, under the same learned deadline and the same load, is
    not falsely judged."""
    marker = tmp_path / "first-run-over"
    script = str(INTEGRATION_SCRIPTS / "plain_deadlock.py")
    job = make_job("deadlock").master().workers(1).command("python", script, "--marker", str(marker))
    with cpu_hogs(1):
        result = run_cli("run", str(job_file(tmp_path, job)), home=torchjob_home, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    status = job_object(torchjob_home, "deadlock")["status"]
    assert (status["attempt"], status["restartCount"]) == (1, 1)
    learned = status["learnedDeadlines"]
    assert learned["progressSeconds"] >= 20 and learned["longestStepGapSeconds"] > 0, learned
    outcome = status["attempts"][0]["outcome"]
    expected = f"Hung: no progress for {learned['progressSeconds']}s (progress deadline: learned, 5x the longest"
    assert outcome.startswith(expected), outcome
    assert "stopped at step 30" in outcome, outcome
    shown = run_cli("get", "deadlock", home=torchjob_home)
    assert f"progress {learned['progressSeconds']}s (learned, 5x the longest step gap seen" in shown.stdout, (
        shown.stdout
    )
