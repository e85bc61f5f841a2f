"""Warm restarts in Pods, the operator's half (backends/kubernetes/warm_pods.py): which Pods get the launcher, the
order a group restart gives, what a launcher's word makes of an observation, and the planner's RestartWarm."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from torchjob import worker_files
from torchjob.api.types import ReplicaType
from torchjob.backends.kubernetes import warm_pods
from torchjob.backends.kubernetes.mapping import addressing, pod_manifest
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.token_review import PodIdentity
from torchjob.controller.local_driver import run_until_done
from torchjob.core import conditions
from torchjob.core.actions import CreateReplica, DeleteReplica, ReorderStop, RestartWarm
from torchjob.core.observed import Phase
from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import TrainerState
from torchjob.testing import FakeBackend, make_job
from torchjob.testing.builders import running

WORKER_0 = ReplicaId(ReplicaType.WORKER, 0)
POD = PodIdentity("team-a", "mnist-worker-0", "uid-1")
NOW = datetime(2026, 11, 26, 8, 0, tzinfo=timezone.utc)
URL = "https://operator:8443"


def _command(job_builder: Any) -> list[str]:
    pod = pod_manifest(job_builder.build(), WORKER_0, attempt=0, report_url=URL)
    container = pod["spec"]["containers"][0]
    return list(container["command"]) + list(container.get("args") or [])


def test_a_python_script_of_a_job_that_asks_starts_through_the_launcher() -> None:
    job = make_job("mnist").master().workers(1).command("python3", "-u", "train.py", "--epochs", "3")
    job = job.annotate(**{"torchjob.io/warm-start": "true", "torchjob.io/warm-preload": "numpy"})
    pod = pod_manifest(job.build(), WORKER_0, attempt=0, report_url=URL)
    container = pod["spec"]["containers"][0]
    assert container["command"] == [
        "python3",
        "-s",
        "-c",
        warm_pods.BOOT,
        "--",
        "python3",
        "-u",
        "train.py",
        "--epochs",
        "3",
    ]
    assert {"name": worker_files.ENV_WARM_PRELOAD, "value": "numpy"} in container["env"]


@pytest.mark.parametrize(
    ("command", "annotations"),
    [
        (["python", "train.py"], {}),  # on Kubernetes, warm restarts are asked for
        (["python", "train.py"], {"torchjob.io/warm-start": "false"}),
        (["torchrun", "train.py"], {"torchjob.io/warm-start": "true"}),  # not a Python script
        (["python", "-X", "dev", "train.py"], {"torchjob.io/warm-start": "true"}),  # changes how Python starts
        (["bash", "-c", "python train.py"], {"torchjob.io/warm-start": "true"}),
    ],
)
def test_other_commands_and_jobs_start_as_they_are(command: list[str], annotations: dict[str, str]) -> None:
    job = make_job("mnist").master().workers(1).command(*command).annotate(**annotations)
    assert _command(job) == command


def test_elastic_and_in_place_groups_restart_their_own_way() -> None:
    asked = {"torchjob.io/warm-start": "true"}
    elastic = make_job("e").workers(2).elastic(minReplicas=1, maxReplicas=2).annotate(**asked)
    in_place = make_job("p").master().workers(1).annotate(**asked, **{"torchjob.io/spares": "1"})
    assert _command(elastic) == _command(in_place) == ["python", "train.py"]


def test_without_a_report_endpoint_no_pod_gets_the_launcher() -> None:
    job = make_job("mnist").master().workers(1).annotate(**{"torchjob.io/warm-start": "true"}).build()
    assert pod_manifest(job, WORKER_0, attempt=0)["spec"]["containers"][0]["command"] == ["python", "train.py"]


def test_the_order_carries_the_next_attempts_variables_but_not_the_templates_own() -> None:
    job = make_job("mnist").master().workers(1).env(MASTER_PORT="29999")
    job = job.annotate(**{"torchjob.io/termination-grace-seconds": "5"}).build()
    where = addressing(job, 3, at_store=False)
    order = warm_pods.restart_order(job, WORKER_0, 3, where, at_once=False, start=False)
    assert (order["attempt"], order["start"], order["grace"]) == (3, False, 5.0)
    assert order["env"][worker_files.ENV_ATTEMPT] == "3" and order["env"]["RANK"] == "1"
    assert "MASTER_PORT" not in order["env"]  # the template sets it: the Pod keeps its own
    assert warm_pods.restart_order(job, WORKER_0, 3, where, at_once=True, start=True)["grace"] == 0.0
    assert worker_files.parse_restart_order(order) == order


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"attempt": -1, "env": {}, "grace": 0},
        {"attempt": 1, "env": {"A": 1}, "grace": 0},
        {"attempt": 1, "env": {}},
    ],
)
def test_what_is_not_an_order_is_none(answer: dict[str, Any]) -> None:
    assert worker_files.parse_restart_order(answer) is None


def _pod(attempt: int, deleting: bool = False) -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
        "torchjob.io/attempt": str(attempt),
    }
    metadata: dict[str, Any] = {"name": POD.name, "uid": POD.uid, "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-26T08:00:00Z"
    return {"metadata": metadata, "status": {"phase": "Running"}}


def test_a_trainer_that_ended_fails_its_replica_while_its_pod_runs_on() -> None:
    board = ReportBoard()
    board.trainer_said(POD, TrainerState(0, NOW))
    assert warm_pods.with_trainer(board, running("worker-0"), _pod(0)) == replace(
        running("worker-0"), restarts_warm=True
    )
    board.trainer_said(POD, TrainerState(0, NOW, exit_code=137, ended_at=NOW))
    later = NOW + timedelta(seconds=2)
    board.trainer_said(POD, TrainerState(0, later, exit_code=137, ended_at=later))
    seen = warm_pods.with_trainer(board, running("worker-0"), _pod(0))
    assert seen is not None and (seen.phase, seen.exit_code, seen.finished_at) == (Phase.FAILED, 137, NOW)
    assert seen.restarts_warm and "exited with code 137 (SIGKILL)" in seen.describe()


def test_a_pod_moved_into_the_next_attempt_is_its_old_attempts_until_its_trainer_ended_then_empty_then_starting() -> (
    None
):
    job = make_job("mnist").master().workers(1).annotate(**{"torchjob.io/warm-start": "true"}).build()
    board = ReportBoard()
    board.trainer_said(POD, TrainerState(0, NOW))  # the survivor's trainer still runs
    moved = running("worker-0", attempt=1)
    stopping = warm_pods.with_trainer(board, moved, _pod(1))
    assert stopping is not None and (stopping.attempt, stopping.stopping) == (0, True)
    assert not warm_pods.waits_to_start(board, _pod(1), 1)
    board.trainer_said(POD, TrainerState(0, NOW, exit_code=143, ended_at=NOW))  # stopped on the order
    assert warm_pods.with_trainer(board, moved, _pod(1)) is None  # the planner finds its place empty
    assert warm_pods.waits_to_start(board, _pod(1), 1) and not warm_pods.waits_to_start(board, _pod(1, True), 1)
    start = warm_pods.restart_order(job, WORKER_0, 1, addressing(job, 1, False), at_once=True, start=True)
    board.order_restart(POD.uid, start)
    starting = warm_pods.with_trainer(board, moved, _pod(1))
    assert starting is not None and (starting.attempt, starting.phase) == (1, Phase.PENDING)
    board.trainer_said(POD, TrainerState(1, NOW))
    assert warm_pods.with_trainer(board, moved, _pod(1)) == replace(moved, restarts_warm=True)


def test_a_pod_being_deleted_evicted_or_unheard_from_does_not_restart_warm() -> None:
    board = ReportBoard()
    assert warm_pods.with_trainer(board, running("worker-0"), _pod(0)) == running("worker-0")
    board.trainer_said(POD, TrainerState(0, NOW))
    stopping = running("worker-0", stopping=True)
    assert warm_pods.with_trainer(board, stopping, _pod(0, deleting=True)) == stopping
    evicted = replace(running("worker-0"), disrupted_at=NOW)  # its Pod goes at the end of its grace period
    assert warm_pods.with_trainer(board, evicted, _pod(0)) == evicted


def test_an_order_is_given_until_the_launcher_started_its_attempt_and_its_old_progress_is_forgotten() -> None:
    board = ReportBoard()
    board.put(POD, {"step": 40, "time": 1.0})
    news, order = board.trainer_said(POD, TrainerState(0, NOW, exit_code=1, ended_at=NOW))
    assert news and order is None
    wanted = worker_files.RestartOrder(attempt=1, env={worker_files.ENV_ATTEMPT: "1"}, grace=0.0, start=True)
    board.order_restart(POD.uid, wanted)
    assert board.latest(POD.uid) is None
    assert board.trainer_said(POD, TrainerState(0, NOW, exit_code=1)) == (False, wanted)  # asked again: same order
    assert board.trainer_said(POD, TrainerState(1, NOW)) == (True, None)  # carried out
    assert board.order(POD.uid) is None


def test_a_stop_order_lost_with_the_leader_is_given_again() -> None:
    job = make_job("mnist").master().workers(1).annotate(**{"torchjob.io/warm-start": "true"}).build()
    board = ReportBoard()
    board.trainer_said(POD, TrainerState(0, NOW))
    assert warm_pods.unordered_stops(board, [_pod(0), _pod(1, deleting=True)]) == []  # attempt 0, or going
    lost = warm_pods.unordered_stops(board, [_pod(1)])
    assert [(str(stop.replica), stop.attempt) for stop in lost] == [("worker-0", 1)]
    again = ReorderStop(lost[0].replica, lost[0].attempt)
    warm_pods.order_stop_again(board, job, _pod(1), again, addressing(job, again.attempt, False))
    assert warm_pods.unordered_stops(board, [_pod(1)]) == []  # ordered: nothing lost any more
    order = board.order(POD.uid)
    assert order is not None and (order["attempt"], order["start"], order["grace"]) == (1, False, 0.0)


def test_a_group_restart_restarts_warm_pods_in_place_and_recreates_only_the_others() -> None:
    backend = FakeBackend()
    job = make_job("j").master().workers(2).annotate(**{"torchjob.io/warm-start": "true"}).build()

    def step(result: Any) -> None:
        if conditions.state(result.job.status) != "Running":
            return
        if ("worker-0", 0) in backend.replicas and not backend.replicas[("worker-0", 0)].restarts_warm:
            # Their launchers spoke; worker-1's Pod has none (its container ended: it cannot restart warm).
            for name in ("master-0", "worker-0"):
                backend.replicas[(name, 0)] = replace(backend.replicas[(name, 0)], restarts_warm=True)
            backend.replicas[("worker-0", 0)] = replace(
                backend.replicas[("worker-0", 0)], phase=Phase.FAILED, exit_code=137
            )
        elif result.job.status.attempt == 1 and len(backend.live) == 3:
            for name in ("master-0", "worker-0", "worker-1"):
                backend.finish(name, attempt=1)

    done = run_until_done(job, backend, backend.clock, on_pass=step)
    assert conditions.state(done.status) == "Succeeded" and done.status.restart_count == 1
    warm = [a for a in backend.executed if isinstance(a, RestartWarm)]
    assert sorted(str(a.replica) for a in warm) == ["master-0", "worker-0"]
    assert all((a.attempt, a.next_attempt) == (0, 1) for a in warm)
    stopped = [str(a.replica) for a in backend.executed if isinstance(a, DeleteReplica) and a.attempt == 0]
    assert stopped == ["worker-1"]
    # The next attempt starts as a whole once the old one is gone: in their Pods for two (the fake knows which).
    created = [a for a in backend.executed if isinstance(a, CreateReplica) and a.attempt == 1]
    assert sorted(str(a.replica) for a in created) == ["master-0", "worker-0", "worker-1"]
    assert backend.waiting_warm == set()
