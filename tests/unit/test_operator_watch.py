"""The operator's watches hand each event's key to the queue they were started with: TrainJob events to the
TrainJob worker's queue, even while it is empty (a regression: an empty queue read as "none given" sent them to
the PyTorchJob queue, and TrainJobs waited for the 30 s resync). And its workers say why a pass failed: once for
a job whose namespace is being deleted, every time otherwise."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from lightkube import ApiError

from torchjob.backends.kubernetes.cluster import TrainJobResource
from torchjob.controller.operator import Operator
from torchjob.controller.watching import job_key, namespace_terminating
from torchjob.controller.workqueue import WorkQueue


class OneEvent:
    """A client whose watch delivers one event, and stops the operator as it does."""

    def __init__(self) -> None:
        self.operator: Operator | None = None

    def watch(self, resource: Any, **_: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        assert self.operator is not None
        self.operator.stopping.set()
        yield "ADDED", {"metadata": {"namespace": "team", "name": "mnist"}}


def test_a_trainjob_event_reaches_the_trainjob_queue_while_it_is_empty() -> None:
    client = OneEvent()
    operator = Operator(client)  # type: ignore[arg-type]
    client.operator = operator
    _, queue = operator.owned["TrainJob"]
    assert len(queue) == 0
    operator._watch(TrainJobResource, None, job_key, queue)
    assert len(operator.queue) == 0
    assert queue.get() == ("team", "mnist")


TERMINATING = ApiError(
    status={
        "code": 403,
        "reason": "Forbidden",
        "message": 'pods "mnist-worker-0" is forbidden: unable to create new content in namespace team because it '
        "is being terminated",
        "details": {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    }
)
REFUSED = ApiError(status={"code": 403, "reason": "Forbidden", "message": "pods is forbidden: no RBAC"})


class Retries(WorkQueue[tuple[str, str]]):
    """A work queue that notes each later look asked for."""

    asked: ClassVar[list[float]] = []

    def add_after(self, key: tuple[str, str], seconds: float) -> None:
        self.asked.append(seconds)
        super().add_after(key, seconds)


def _failed_passes(operator: Operator, err: ApiError, times: int) -> list[float]:
    """``times`` passes of the job team/mnist, each failing with ``err``; the delays of the later looks asked for."""
    Retries.asked = []
    for _ in range(times):
        queue: WorkQueue[tuple[str, str]] = Retries()

        def reconcile(key: tuple[str, str], queue: WorkQueue[tuple[str, str]] = queue) -> None:
            queue.close()  # this pass is the last this worker takes
            raise err

        queue.add(("team", "mnist"))
        operator._work(queue, reconcile)
    return Retries.asked


def test_a_job_whose_namespace_is_being_deleted_is_said_once_and_still_looked_at_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    operator = Operator(OneEvent())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="torchjob.operator"):
        assert len(_failed_passes(operator, TERMINATING, 3)) == 3  # it is looked at again until it is gone
    said = [r for r in caplog.records if "mnist" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in said] == [
        (logging.INFO, "team/mnist: its namespace is being deleted; the job goes with it")
    ]


def test_any_other_refusal_is_a_warning_on_every_pass(caplog: pytest.LogCaptureFixture) -> None:
    operator = Operator(OneEvent())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="torchjob.operator"):
        _failed_passes(operator, REFUSED, 2)
    said = [r for r in caplog.records if "mnist" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.WARNING]
    assert namespace_terminating(TERMINATING) and not namespace_terminating(REFUSED)
