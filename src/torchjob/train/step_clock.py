"""How long the step in progress has run against how long a step usually takes, for in-place training.

The training thread marks each step's start and end; the membership-watching thread asks, from outside the
step, whether it has outlasted its allowance (a multiple of the usual step time, at least a floor): then the
member says it waits on a silent peer (``torchjob.train.in_place``); and in which generation the step runs, so
that it is left at once when the controller has published a newer one around a lost member. A member forming
the next generation waits on its peers too, outside any step: ``forming`` says for how long. A step left that
way can only fail, at once; one that still runs long after it was left is stuck where no failure reaches it
(``stuck_for``). Both threads share ``lock``; the queries are made under it.
"""

from __future__ import annotations

import threading
import time

# A step may always run this long before it counts as waiting, however fast steps usually are.
MIN_STEP_ALLOWANCE = 0.25


class StepClock:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._stepping: tuple[int, float] | None = None  # the step in progress: its generation, when it began
        self._usual: float | None = None  # how long a completed step takes, smoothed
        self._forming_since: float | None = None  # when this member began forming the next generation
        self._left_at: float | None = None  # when the step in progress was left (its connections cut)

    def begin(self, generation: int) -> float:
        """A step of ``generation`` starts now; returns its start (monotonic) for ``end``."""
        began = time.monotonic()
        with self.lock:
            self._stepping = (generation, began)
            self._left_at = None
        return began

    def end(self) -> None:
        """The step is over, however it ended; from here on the training thread owns the group's connections."""
        with self.lock:
            self._stepping = None
            self._left_at = None

    def completed(self, began: float) -> None:
        """A step that began at ``began`` completed normally: it counts towards the usual step time (a failed
        or re-forming step says nothing about it)."""
        took = time.monotonic() - began
        self._usual = took if self._usual is None else 0.9 * self._usual + 0.1 * took

    def time_left(self, factor: float) -> float | None:
        """Under ``lock``: how long the step in progress may still run before it has outlasted ``factor``
        times the usual step (None between steps)."""
        if self._stepping is None:
            return None
        allowance = max(MIN_STEP_ALLOWANCE, factor * (self._usual or 0.0))
        return self._stepping[1] + allowance - time.monotonic()

    def waiting_in(self, factor: float) -> int | None:
        """Under ``lock``: the generation of the step in progress once it has outlasted its allowance."""
        left = self.time_left(factor)
        return self._stepping[0] if self._stepping is not None and left is not None and left <= 0 else None

    def in_step(self) -> int | None:
        """Under ``lock``: the generation of the step in progress (None between steps)."""
        return self._stepping[0] if self._stepping is not None else None

    def begin_forming(self) -> None:
        """This member waits for the next generation to form (its membership, then every member's arrival)."""
        with self.lock:
            self._forming_since = time.monotonic()

    def formed(self) -> None:
        with self.lock:
            self._forming_since = None

    def forming(self) -> float | None:
        """Under ``lock``: how long this member has been forming the next generation (None: it is not)."""
        return None if self._forming_since is None else time.monotonic() - self._forming_since

    def leave_step(self) -> None:
        """Under ``lock``: the step in progress was left (its group's connections cut), so it is not asked about
        again; from now on ``stuck_for`` says when it has failed to end for too long."""
        self._stepping = None
        self._left_at = time.monotonic()

    def was_left(self) -> bool:
        """Whether the step in progress was left (read without ``lock``: one attribute, set once a step)."""
        return self._left_at is not None

    def stuck_for(self, floor: float, factor: float) -> float | None:
        """Under ``lock``: how long ago the step still in progress was left, once that is past ``floor`` and
        ``factor`` times the usual step (None: it was not left, it ended, or it may still fail)."""
        if self._left_at is None:
            return None
        left_for = time.monotonic() - self._left_at
        return left_for if left_for > max(floor, factor * (self._usual or 0.0)) else None
