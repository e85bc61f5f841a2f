"""The operator's work queue: one entry per key, never two workers on one key, delayed keys come back."""

from __future__ import annotations

import threading

from torchjob.controller.workqueue import WorkQueue


def test_a_key_named_by_many_events_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert [queue.get(), queue.get()] == ["a", "b"]


def test_a_key_changed_while_being_worked_on_comes_back_once_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")  # an event arrives mid-reconcile
    assert len(queue) == 0  # not handed to a second worker meanwhile
    queue.done("a")
    assert queue.get() == "a"


def test_add_after_hands_the_key_out_later_and_close_wakes_waiters() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("timer", 0.05)
    assert queue.get() == "timer"
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(queue.get()))
    waiter.start()
    queue.close()
    waiter.join(timeout=5)
    assert got == [None]
