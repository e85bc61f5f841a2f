"""What an in-place member says and hears while it trains (in_place.py), in its watching thread.

A member announces itself to the controller every ``alive_seconds`` (the beat by which the controller confirms a
silent peer), says the generation it waits in once its step has outlasted its usual time (step_clock.py), reads
the membership the controller publishes, and leaves a step that can only fail: once a generation made because
members were lost is newer than the step's, it cuts the old group's connections so that the step fails now and
the group is repaired. A member whose step still runs well after it left it waits where no failure reaches it;
it falls silent, so that the controller names it as it names a frozen member and a spare takes its place.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from torchjob import worker_files
from torchjob.train import generations, local_ranks, peers
from torchjob.train.channel import Channel
from torchjob.train.context import DistContext
from torchjob.train.eviction import EvictionHold
from torchjob.train.step_clock import StepClock
from torchjob.worker_files import Membership

# How long a step may run before this member says it waits on a silent peer: this many times its usual step
# time (step_clock.py). Saying so costs nothing (the controller replaces a peer only when it too
# has fallen silent), so it is said early.
_WAITING_FACTOR = 3.0
# A step left around a lost peer (its connections cut) fails within milliseconds. One still running this long after
# (and this many usual steps) waits where no failure reaches it: a gloo send queued on a full socket, or written to a
# peer that died, is never woken by its pair's failure (peers.py), and a step can block in the script's own I/O.
# Such a member keeps its peers from forming the next generation, and its watching thread cannot end the wait, so it
# falls silent: the controller then names it as it names a frozen member, and a spare takes its place.
_STUCK_AFTER_LEAVING = 5.0
_STUCK_FACTOR = 3.0
_STACK_FRAMES = 8  # of the stuck step, said as it falls silent


class Presence:
    """A member's announcements and reads of the membership, made by the watching thread it starts
    (``generations.MembershipWatch``); ``context()`` is the member's context as it stands (its rank changes at a
    re-form)."""

    def __init__(
        self, channel: Channel, replica: str, attempt: int, clock: StepClock, context: Callable[[], DistContext]
    ) -> None:
        self.channel, self.replica, self.attempt, self.clock = channel, replica, attempt, clock
        self._context = context
        self.speaks = local_ranks.speaks_for_replica()  # a replica of several processes is one member
        # Whether this member has trained a step in the current generation (announced: see ANNOUNCE_SETTLED).
        self.settled = False
        self.training_thread: int | None = None  # the thread in the training loop: where a stuck step waits
        self.eviction: EvictionHold | None = None  # a notice of eviction held until a spare takes the place
        self._announced_at = -math.inf
        self._said_waiting: int | None = None
        self._fell_silent = False  # its step is stuck after it was left: it no longer announces
        # Last: its thread calls back into this object at once.
        self.watch = generations.MembershipWatch(self._look, attempt, self._pause, self._after_look)

    def announce(self, waiting_in: int | None = None) -> Membership | None:
        """Say that this member runs, and, when its step has outlasted its allowance, the generation it waits in.
        Returns the membership where the channel answers with it."""
        self._announced_at = time.monotonic()
        more: dict[str, Any] = {worker_files.ANNOUNCE_EVERY: self.channel.alive_seconds}
        if waiting_in is not None:
            more[worker_files.ANNOUNCE_WAITING] = waiting_in
        if self.settled:
            more[worker_files.ANNOUNCE_SETTLED] = True
        if self.eviction is not None and self.eviction.noticed_at is not None:
            more[worker_files.ANNOUNCE_NOTICE] = True  # the operator looks at once, and says when it has
        self._said_waiting = waiting_in
        key = worker_files.process_key(self.replica, 0, self._context().rank)
        return self.channel.announce(key, self.attempt, more)

    def _look(self) -> Membership | None:
        """Announce when due (also what a new leader hears: only what is sent after it took over), and read the
        membership, in one call where the channel allows."""
        if not self.speaks:
            return self.channel.membership()
        with self.clock.lock:
            waiting_in = self.clock.waiting_in(_WAITING_FACTOR)
            forming = self.clock.forming()
            stuck_for = self.clock.stuck_for(_STUCK_AFTER_LEAVING, _STUCK_FACTOR)
        if stuck_for is not None:
            self._fall_silent(stuck_for)
            return self.channel.membership()
        if waiting_in is None and forming is not None and forming > generations.FORMING_ALLOWANCE:
            waiting_in = self.watch.newest  # the generation it waits to form: its peers are all it waits for
        if self.channel.answers_with_membership:
            return self.announce(waiting_in)
        if waiting_in != self._said_waiting or time.monotonic() - self._announced_at >= self.channel.alive_seconds:
            self.announce(waiting_in)
        return self.channel.membership()

    def _fall_silent(self, left_for: float) -> None:
        if not self._fell_silent:
            self._fell_silent = True
            print(
                f"torchjob: rank {self._context().rank}: its step has not ended {left_for:.1f}s after it left it "
                "(its group's connections cut): it waits where no failure reaches it, and stops announcing itself "
                f"so that a spare takes its place; its step waits in:\n{self._training_stack()}",
                flush=True,
            )

    def _training_stack(self) -> str:
        """The innermost frames of the training thread (what a step that will not end waits in: a sharded survivor
        was seen stuck 15 s in a step it left, 1 in ~15 HSDP repairs of bench.state, not yet traced)."""
        frame = sys._current_frames().get(self.training_thread or -1)
        if frame is None:
            return "  (the training thread is gone)"
        return "".join(traceback.format_stack(frame)[-_STACK_FRAMES:]).rstrip()

    def _pause(self) -> float:
        """How long the watching thread waits before its next look: its usual interval, but no later than the
        moment the step in progress outlasts its allowance (so that it says it waits then), and often while it
        waits (a repair is on its way: the sooner it is read, the sooner the step is left)."""
        with self.clock.lock:
            left = self.clock.time_left(_WAITING_FACTOR)
        if left is None:
            return self.channel.watch_seconds
        return self.channel.poll_seconds if left <= 0 else min(self.channel.watch_seconds, left + 0.001)

    def _after_look(self, lost_in: int) -> None:
        """After each read: a hold on notice of eviction may be over (eviction.py). And once a generation made
        because members were lost (``lost_in``) is newer than this step's, the step can only fail: cut the old
        group's connections at once, so that it fails now and the group is repaired. A peer that will never
        answer (stopped, or on a vanished node, which sends no reset) would otherwise hold it for the group's
        timeout; and in a wide group, a dead rank's reset reaches the ranks far from it only as each neighbour in
        turn fails and drops its group (1 s at 32 ranks here, against 0.05 s for the controller's word). A
        generation made by agreement (a handover, a spare joining) waits for the next step: all answer."""
        if self.eviction is not None:
            self.eviction.after_read()
        with self.clock.lock:
            stepping = self.clock.in_step()
            if stepping is None or lost_in <= stepping:
                return  # between steps, or no loss since this step began
            cut = peers.cut_group_connections(peers.kept_ports())
            self.clock.leave_step()  # once per step
        print(
            f"torchjob: rank {self._context().rank}: the group was repaired around a lost peer; left the step "
            f"({cut} connections cut)",
            flush=True,
        )
