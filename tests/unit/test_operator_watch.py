"""The operator's watches hand each event's key to the queue they were started with: TrainJob events to the
TrainJob worker's queue, even while it is empty (a regression: an empty queue read as "none given" sent them to
the PyTorchJob queue, and TrainJobs waited for the 30 s resync)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torchjob.backends.kubernetes.cluster import TrainJobResource
from torchjob.controller.operator import Operator
from torchjob.controller.watching import job_key


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
