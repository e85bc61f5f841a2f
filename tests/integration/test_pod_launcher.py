"""A Pod's launcher (``python -s -c BOOT -- python SCRIPT``, BOOT running ``torchjob.launch``) as its own
process, talking to the operator's real report endpoint over loopback (the API server's token review is the only
stand-in). The test plays the operator's backend: it gives the restart orders a group restart gives
(warm_pods.restart_order)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import INTEGRATION_SCRIPTS
from torchjob import worker_files
from torchjob.backends.kubernetes import warm_pods
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.token_review import PodIdentity
from torchjob.controller.report_server import report_server

POD = PodIdentity("team-a", "mnist-worker-0", "uid-1")


class Reviewer:
    def review(self, token: str) -> PodIdentity | None:
        return POD if token == "pod-token" else None


@dataclass
class Operator:
    url: str
    board: ReportBoard

    def wait_for_exit(self, attempt: int, timeout: float = 120) -> int:
        """The exit code the launcher reports for its trainer of ``attempt``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.board.trainer(POD.uid)
            if state is not None and state.attempt == attempt and state.exit_code is not None:
                return state.exit_code
            time.sleep(0.05)
        raise AssertionError(f"the launcher never reported the end of attempt {attempt}")

    def order(self, attempt: int, start: bool, grace: float = 0.0) -> None:
        env = {worker_files.ENV_ATTEMPT: str(attempt), "RANK": "1"}
        order = worker_files.RestartOrder(attempt=attempt, env=env, grace=grace, start=start)
        self.board.order_restart(POD.uid, order)


@pytest.fixture
def operator() -> Iterator[Operator]:
    board = ReportBoard()
    server = report_server(board, Reviewer(), ("127.0.0.1", 0), lambda ns, job, news, uid: None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Operator(f"http://127.0.0.1:{server.server_address[1]}", board)
    server.shutdown()


def _launch(operator: Operator, tmp_path: Path, command: list[str], plan: dict[str, str]) -> subprocess.Popen[str]:
    token = tmp_path / "token"
    token.write_text("pod-token\n")
    # A user site as the operator mounts one for progress reports: its .pth file must run in the trainer only.
    user_site = tmp_path / "user" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "probe.pth").write_text('import os; os.environ["PROBE_PTH_PID"] = str(os.getpid())\n')
    env = {
        **os.environ,
        "PYTHONUSERBASE": str(tmp_path / "user"),
        worker_files.ENV_REPORT_URL: worker_files.report_url(operator.url, POD.namespace, "mnist"),
        worker_files.ENV_REPORT_TOKEN_FILE: str(token),
        worker_files.ENV_ATTEMPT: "0",
        "PROBE_DO": json.dumps(plan),
    }
    launcher = [sys.executable, *warm_pods.LAUNCHER, *command]
    return subprocess.Popen(
        launcher, cwd=INTEGRATION_SCRIPTS, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _probes(output: str) -> list[dict[str, object]]:
    return [json.loads(line.split(" ", 1)[1]) for line in output.splitlines() if line.startswith("PROBE ")]


@pytest.mark.parametrize("form", ["script", "module"])
def test_a_killed_trainer_starts_again_warm_on_the_operators_order_as_the_same_command(
    operator: Operator, tmp_path: Path, form: str
) -> None:
    command = ["python", "launcher_probe.py", "--lr", "0.1"] if form == "script" else ["python", "-m", "launcher_probe"]
    launcher = _launch(operator, tmp_path, command, {"0": "kill", "1": "workers"})
    assert operator.wait_for_exit(0) == 137  # 128 + SIGKILL, as a container reports it
    operator.order(1, start=True)
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, output  # the script succeeded: so does the container
    first, second = _probes(output)
    assert (first["attempt"], second["attempt"]) == ("0", "1")
    assert first["warm"] and second["warm"], output  # torch was imported before either script ran
    # A script without DDP starts before the launcher imports torch._dynamo; a restart finds it (a module run
    # with -m is not read, so it waits for the whole preload).
    assert (first["dynamo"], second["dynamo"]) == ((False, True) if form == "script" else (True, True))
    assert first["pid"] != second["pid"]
    expected_argv = (
        ["launcher_probe.py", "--lr", "0.1"] if form == "script" else [str(INTEGRATION_SCRIPTS / "launcher_probe.py")]
    )
    assert first["argv"] == second["argv"] == expected_argv
    assert second["cmdline"] == command  # ps and pgrep -f show the script's own command line
    assert "PROBE_SUM 28" in output  # DataLoader workers forked from the warm trainer
    # The user site's .pth ran in each trainer (as at a cold start), not in the launcher they were forked from.
    assert [first["user_site_ran_in"], second["user_site_ran_in"]] == [str(first["pid"]), str(second["pid"])]
    assert "torchjob: attempt 1 starts in this Pod, warm" in output


def test_a_group_restart_stops_a_running_trainer_first_and_starts_the_next_attempt_only_when_told(
    operator: Operator, tmp_path: Path
) -> None:
    launcher = _launch(operator, tmp_path, ["python", "launcher_probe.py"], {"0": "sleep", "1": "exit"})
    _wait_until_running(operator, launcher)
    operator.order(1, start=False, grace=5.0)  # a survivor's trainer: SIGTERM, then the grace period
    assert operator.wait_for_exit(0) == 128 + signal.SIGTERM
    time.sleep(1.0)
    state = operator.board.trainer(POD.uid)
    assert state is not None and state.attempt == 0 and launcher.poll() is None  # waits for the start
    operator.order(1, start=True)
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, output
    assert [probe["attempt"] for probe in _probes(output)] == ["0", "1"]


def _wait_until_running(operator: Operator, launcher: subprocess.Popen[str]) -> None:
    """Until the launcher said its trainer runs (and so has imported torch and forked it)."""
    deadline = time.monotonic() + 120
    while operator.board.trainer(POD.uid) is None:
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.1)


def test_a_pod_deleted_while_its_trainer_runs_ends_with_the_trainers_end(operator: Operator, tmp_path: Path) -> None:
    launcher = _launch(operator, tmp_path, ["python", "launcher_probe.py"], {"0": "sleep"})
    _wait_until_running(operator, launcher)
    launcher.send_signal(signal.SIGTERM)  # what the kubelet sends a deleted Pod's first process
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 128 + signal.SIGTERM, output  # the trainer ended by it: so does the container
    trainer = _probes(output)[0]["pid"]
    assert not Path(f"/proc/{trainer}").exists()


def test_a_failed_trainer_waits_for_an_order_and_a_deleted_pod_ends_with_the_scripts_code(
    operator: Operator, tmp_path: Path
) -> None:
    """The job failed for good (exit 3 under restartPolicy ExitCode): no order comes, and the Pod is deleted."""
    launcher = _launch(operator, tmp_path, ["python", "launcher_probe.py"], {"0": "fail"})
    assert operator.wait_for_exit(0) == 3
    assert launcher.poll() is None  # waiting for an order, in case the group restarts
    launcher.send_signal(signal.SIGTERM)
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 3, output


def test_a_command_python_cannot_start_warm_runs_as_it_is(operator: Operator, tmp_path: Path) -> None:
    launcher = _launch(operator, tmp_path, ["python", "-X", "dev", "launcher_probe.py"], {"0": "fail"})
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 3, output
    assert "the script starts cold and restarts with its Pod: the interpreter option -X changes" in output
    assert _probes(output)[0]["warm"] is False
    assert operator.board.trainer(POD.uid) is None  # nothing to restart in place: the launcher stood aside


def test_an_image_without_torchjob_runs_the_command_cold_with_the_reason(tmp_path: Path) -> None:
    """The operator's launcher command in an image that lacks torchjob (here the interpreter this test's virtual
    environment was made from, which has neither torchjob nor torch): the script runs all the same, cold."""
    bare = getattr(sys, "_base_executable", "")
    probe = subprocess.run([bare, "-c", "import torchjob"], capture_output=True, text=True)
    assert probe.returncode != 0, f"{bare} has torchjob: it cannot stand for an image without it"
    command = [bare, "-c", "import sys; print('RAN', sys.argv[1:]); sys.exit(4)", "--lr", "0.1"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run([bare, *warm_pods.LAUNCHER, *command], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 4, ran.stderr  # the command's own exit code: it was exec'd, not wrapped
    assert "RAN ['--lr', '0.1']" in ran.stdout
    assert "the script starts cold and restarts with its Pod: torchjob is not installed in its image" in ran.stderr


def test_an_image_with_torchjob_runs_the_launcher(tmp_path: Path) -> None:
    """The same command where torchjob is installed runs torchjob's launcher; with no operator to give it orders
    (no report endpoint in its environment) the launcher says so and runs the command cold."""
    script = tmp_path / "train.py"
    script.write_text("import sys; print('RAN', sys.argv[1:])\n")
    command = [sys.executable, str(script), "--lr", "0.1"]
    env = {k: v for k, v in os.environ.items() if k != worker_files.ENV_REPORT_URL}
    ran = subprocess.run([sys.executable, *warm_pods.LAUNCHER, *command], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert "RAN ['--lr', '0.1']" in ran.stdout
    assert "no operator gives this Pod restart orders" in ran.stderr
