"""How a local replica process is classified: the pure twin of the Pod mapping's golden tests."""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from torchjob.api.types import ReplicaType
from torchjob.backends.local.observing import observe_process, preemption_onset, slowest
from torchjob.backends.local.shim import ExitRecord
from torchjob.core.observed import Phase, PlatformReason
from torchjob.core.replicas import ReplicaId
from torchjob.core.reported import Progress

WORKER = ReplicaId(ReplicaType.WORKER, 1)
T = 1_800_000_000.0


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def test_a_running_replica_reports_its_slowest_process() -> None:
    beat = slowest([Progress(utc(T + 9), 40), Progress(utc(T + 3), 12), Progress(utc(T + 8), 39)])
    seen = observe_process(WORKER, 2, None, stopping=False, progress=beat)
    assert (seen.phase, seen.attempt, seen.progress) == (Phase.RUNNING, 2, Progress(utc(T + 3), 12))
    assert seen.reason is None and slowest([]) is None


def test_a_replica_is_alive_only_as_recently_as_its_quietest_process() -> None:
    # Local rank 1 frozen in step 12, whose result local rank 0 reported last: rank 0 still beats, and the
    # replica is as silent as rank 1 (a process that said it is exiting does not count).
    first = Progress(utc(T + 3), 12, alive_at=utc(T + 20))
    frozen = Progress(utc(T + 3.1), 12, alive_at=utc(T + 4))
    gone = Progress(utc(T + 3.2), 12, alive_at=utc(T + 3.5), exiting=True)
    assert slowest([first, frozen, gone]) == Progress(utc(T + 3), 12, alive_at=utc(T + 4))
    # The slowest said it is exiting, the other still runs: the replica is not exiting; once both said so, it is.
    assert slowest([replace(first, exiting=True), frozen]) == Progress(utc(T + 3), 12, alive_at=utc(T + 4))
    done = replace(frozen, exiting=True)
    assert slowest([replace(first, exiting=True), done]) == replace(first, exiting=True)


def test_a_replica_witnesses_only_since_the_last_of_its_processes_beats_steadily_again() -> None:
    # Both processes resumed from a stall of the machine, local rank 1 last: the replica is a witness from then.
    first = Progress(utc(T + 3), 12, alive_at=utc(T + 40), beating_since=utc(T + 31))
    second = Progress(utc(T + 3.1), 12, alive_at=utc(T + 40), beating_since=utc(T + 33))
    assert slowest([first, second]) == replace(first, beating_since=utc(T + 33))
    # One that does not say (an older torchjob): nor does the replica.
    assert slowest([first, replace(second, beating_since=None)]) == replace(first, beating_since=None)


@pytest.mark.parametrize(
    ("ended", "stopping", "phase", "reason", "code", "sig"),
    [
        (ExitRecord(T, exit_code=0), False, Phase.SUCCEEDED, None, 0, None),
        (ExitRecord(T, exit_code=3), False, Phase.FAILED, None, 3, None),
        (ExitRecord(T, signal=signal.SIGKILL), False, Phase.FAILED, None, None, signal.SIGKILL),
        # An outside SIGTERM (to the process, or the exit code a shell gives it) is a preemption...
        (ExitRecord(T, signal=signal.SIGTERM), False, Phase.FAILED, PlatformReason.PREEMPTED, None, signal.SIGTERM),
        (ExitRecord(T, exit_code=143), False, Phase.FAILED, PlatformReason.PREEMPTED, 143, None),
        # ...but not when torchjob sent it.
        (ExitRecord(T, signal=signal.SIGTERM), True, Phase.FAILED, None, None, signal.SIGTERM),
    ],
)
def test_how_a_replica_ended(
    ended: ExitRecord, stopping: bool, phase: Phase, reason: PlatformReason | None, code: int | None, sig: int | None
) -> None:
    seen = observe_process(WORKER, 0, ended, stopping=stopping, message="boom")
    assert (seen.phase, seen.reason, seen.exit_code, seen.signal) == (phase, reason, code, sig)
    assert seen.finished_at == utc(T) and seen.stopping is stopping


def test_a_replica_that_succeeded_keeps_its_last_report() -> None:
    # A short job can end before any pass saw it run: its progress then comes from the final report alone.
    last = Progress(utc(T - 1), 20, total_steps=20, exiting=True)
    seen = observe_process(WORKER, 0, ExitRecord(T, exit_code=0), stopping=False, progress=last)
    assert (seen.phase, seen.progress) == (Phase.SUCCEEDED, last)


def test_a_notice_marks_the_onset_of_a_preemption_and_an_exit_after_it_is_no_fault() -> None:
    onset = preemption_onset([T - 50, T + 2, T + 1], started_at=T)  # the first is an earlier attempt's
    assert onset == utc(T + 1)
    running = observe_process(WORKER, 0, None, stopping=False, notice_at=onset)
    assert (running.reason, running.disrupted_at) == (PlatformReason.PREEMPTED, onset)
    # It checkpointed and exited 1 afterwards: still the platform's doing, dated from the notice.
    ended = observe_process(WORKER, 0, ExitRecord(T + 9, exit_code=1), stopping=False, notice_at=onset)
    assert (ended.reason, ended.failure_onset) == (PlatformReason.PREEMPTED, onset)
    # A notice means nothing once torchjob itself is stopping the replica.
    assert observe_process(WORKER, 0, None, stopping=True, notice_at=onset).reason is None
    assert preemption_onset([T - 50], started_at=T) is None


def test_the_exit_record_round_trips_through_its_file(tmp_path: Path) -> None:
    path = str(tmp_path / "worker-1.exit.json")
    assert ExitRecord.read(path) is None
    for record in (ExitRecord(T, exit_code=0), ExitRecord(T, exit_code=2), ExitRecord(T, signal=9)):
        record.write(path)
        assert ExitRecord.read(path) == record
    Path(path).write_text("{not json")
    assert ExitRecord.read(path) is None
