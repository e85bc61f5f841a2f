"""A pass over a job counts as having looked at its members' notices of eviction once it ended, even when the
job is gone: nothing will hand their places over then, and their holds must not wait for one."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, cast

from lightkube import ApiError

from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.requests import RequestCounter
from torchjob.controller.clock import SystemClock
from torchjob.controller.pytorchjobs import PassDeps, PyTorchJobs

GONE = ApiError(status={"code": 404, "message": "not found", "reason": "NotFound"})


class DeletedJobs:
    def get(self, *_: Any, **__: Any) -> Any:
        raise GONE


def test_the_pass_over_a_deleted_job_marks_the_notices_heard_before_it_began() -> None:
    board, forgotten = ReportBoard(), cast(list[tuple[str, str]], [])
    deps = PassDeps(
        client=cast(Any, DeletedJobs()),
        backend=cast(Any, None),  # a deleted job is never reconciled
        clock=SystemClock(),
        counter=RequestCounter(),
        metrics=cast(Any, SimpleNamespace(forget=forgotten.append)),
        reports=board,
        managed_by=(),
        requeue=lambda _key, _seconds: None,
        passed=lambda: None,
    )
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    assert board.notices.heard("team-a", "mnist", "uid-1", before)
    assert board.notices.heard("team-a", "other", "uid-2", before)
    PyTorchJobs(deps).reconcile(("team-a", "mnist"))
    assert forgotten == [("team-a", "mnist")]
    assert board.notices.considered("uid-1") and not board.notices.considered("uid-2")
    # Heard after the pass began: the next pass looks at it.
    assert board.notices.heard("team-a", "mnist", "uid-3", datetime.now(timezone.utc) + timedelta(seconds=5))
    PyTorchJobs(deps).reconcile(("team-a", "mnist"))
    assert not board.notices.considered("uid-3")
