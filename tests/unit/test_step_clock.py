"""When an in-place member counts as waiting on a silent peer (its step against its usual step time), and which
generation its step runs in."""

from __future__ import annotations

import pytest

from torchjob.train import step_clock
from torchjob.train.step_clock import MIN_STEP_ALLOWANCE, StepClock


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(step_clock.time, "monotonic", fake.monotonic)
    return fake


def test_between_steps_nothing_is_waited_on(clock_time: FakeTime) -> None:
    clock = StepClock()
    assert clock.time_left(3.0) is None and clock.waiting_in(3.0) is None
    clock.begin(generation=2)
    clock.end()
    clock_time.now += 60
    assert clock.waiting_in(3.0) is None


def test_a_step_waits_once_past_its_allowance_and_is_asked_about_once(clock_time: FakeTime) -> None:
    clock = StepClock()
    for _ in range(3):  # usual steps of 0.5 s
        began = clock.begin(generation=1)
        clock_time.now += 0.5
        clock.end()
        clock.completed(began)
    clock.begin(generation=4)
    clock_time.now += 1.4  # under 3 x 0.5 s
    assert clock.waiting_in(3.0) is None and clock.time_left(3.0) == pytest.approx(0.1)
    clock_time.now += 0.2
    assert clock.waiting_in(3.0) == 4
    clock.leave_step()
    assert clock.waiting_in(3.0) is None


def test_a_fast_step_still_has_the_floor(clock_time: FakeTime) -> None:
    clock = StepClock()
    began = clock.begin(generation=0)
    clock_time.now += 0.001
    clock.completed(began)
    clock.begin(generation=0)
    clock_time.now += MIN_STEP_ALLOWANCE / 2
    assert clock.waiting_in(3.0) is None
    clock_time.now += MIN_STEP_ALLOWANCE
    assert clock.waiting_in(3.0) == 0


def test_the_generation_of_the_step_in_progress_is_known_at_once(clock_time: FakeTime) -> None:
    """A member leaves a step as soon as a newer generation made around a lost peer is published: it needs the
    step's generation from its first instant, not once the step has run long."""
    clock = StepClock()
    assert clock.in_step() is None
    clock.begin(generation=3)
    assert clock.in_step() == 3 and clock.waiting_in(3.0) is None
    clock.leave_step()
    assert clock.in_step() is None
    clock.begin(generation=4)
    clock.end()
    assert clock.in_step() is None


def test_a_left_step_that_does_not_end_is_known_and_how_long(clock_time: FakeTime) -> None:
    """A step whose connections were cut fails at once; one still running long after it was left (past a floor and
    a multiple of the usual step) waits where no failure reaches it (the member then falls silent: in_place.py). A
    step that ends, or the next one, is not."""
    clock = StepClock()
    for _ in range(3):  # usual steps of 2 s: 3 x 2 s is past the 5 s floor
        began = clock.begin(generation=1)
        clock_time.now += 2.0
        clock.end()
        clock.completed(began)
    clock.begin(generation=1)
    assert clock.stuck_for(5.0, 3.0) is None
    clock.leave_step()
    clock_time.now += 5.5
    assert clock.stuck_for(5.0, 3.0) is None  # past the floor, not yet 3 usual steps
    clock_time.now += 1.5
    assert clock.stuck_for(5.0, 3.0) == pytest.approx(7.0)
    clock.end()
    assert clock.stuck_for(5.0, 3.0) is None
    clock.begin(generation=1)
    clock.leave_step()
    clock.begin(generation=2)  # a step that failed at once: the next one begins
    clock_time.now += 60.0
    assert clock.stuck_for(5.0, 3.0) is None
