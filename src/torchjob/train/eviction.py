"""An eviction notice held by a member of an in-place group, so that a warm spare takes its place first.

A Pod evicted through the Eviction API (``kubectl drain``, a spot node's notice handler) gets SIGTERM and its
grace period; a local replica gets a SIGTERM from outside. Left alone, SIGTERM ends the member at once and its
peers repair around it: the step in progress fails and is retried. A member of an in-place group instead notes
the notice (the preemption file the local controller reads; in a Pod, its DisruptionTarget condition tells the
operator) and keeps training. The controller gives its place to a ready spare (a handover,
``policies/repair.decide_handover``), the group re-forms at its next step, and this member leaves it there with
exit code 0: no step is failed. When no newer membership comes within ``HOLD_SECONDS`` (no spare was ready, or
torchjob itself is stopping the group), or the notice comes while the member is repairing, it exits with 143 as
a preempted process does. In a Pod the hold lasts longer where the operator has not yet looked at the notice
(it says so with the membership: ``backends/kubernetes/notices.py``): on a loaded machine its pass can come after
``HOLD_SECONDS``, and a member that left first would fail its peers' step. ``HOLD_CAP_SECONDS`` bounds that wait
(an operator that never answers), within the default grace period of 30 s.

SIGTERM is read by a thread from the signal module's wakeup file descriptor rather than acted on in a Python
handler: Python runs handlers in the main thread only, which may be blocked in a collective for a long time.
Nothing is held where the script handles SIGTERM itself, or where a wakeup descriptor is already in use.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from torchjob.train.preemption import PREEMPTED_EXIT_CODE

# How long a member on notice waits for the controller to publish the membership that hands its place over.
# The operator publishes within a pass of seeing the eviction (well under a second on a quiet machine, but 2 s
# proved too short on a loaded one: the member left first and its peers repaired around it); a stop torchjob
# makes itself (a group restart, a suspended or deleted job) costs at most this much longer.
HOLD_SECONDS = 5.0
# How long it waits at most for a controller that tells when it looked at the notice (the operator) to do so.
HOLD_CAP_SECONDS = 20.0


def _read_by_thread(_signum: int, _frame: FrameType | None) -> None:
    """SIGTERM's Python handler: nothing (the reading thread acts); its identity says the hold is in place."""


class EvictionHold:
    def __init__(
        self,
        rank: int,
        generation: Callable[[], int],
        newest: Callable[[], int],
        note: Callable[[], None],
        considered: Callable[[], bool] | None = None,
    ):
        """``generation()``: the group's current generation; ``newest()``: the newest one published (the
        membership watch); ``note()`` records the notice for the controller. ``considered()``, where the
        controller says when it has looked at the notice: whether the last answer read said so."""
        self.rank, self._generation, self._newest, self._note = rank, generation, newest, note
        self._considered_now = considered
        self.considered = False  # latched by the watch after the newest membership it read with it
        self.noticed_at: float | None = None
        self._generation_at_notice = -1
        self._repairing = False
        self.active = self._install()

    def repairing(self, now: bool) -> None:
        """The member repairs (``now`` True) or trains again: a notice during a repair ends it at once."""
        self._repairing = now
        if now and self.noticed_at is not None:
            self._leave("it was on notice of eviction when its group broke")

    def _install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False  # the script handles SIGTERM itself
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        if previous != -1:  # someone else (an event loop) reads signals this way: leave it to them
            signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()
            return False
        signal.signal(signal.SIGTERM, _read_by_thread)
        self._sockets = (reader, writer)  # kept open for the process's life
        threading.Thread(target=self._read, args=(reader,), name="torchjob-eviction", daemon=True).start()
        return True

    def _read(self, reader: socket.socket) -> None:
        while True:
            received = reader.recv(64)
            if not received:
                return
            if signal.SIGTERM in received and signal.getsignal(signal.SIGTERM) is _read_by_thread:
                self._on_notice()

    def _on_notice(self) -> None:
        if self.noticed_at is not None:
            return
        self.noticed_at = time.monotonic()
        self._generation_at_notice = self._generation()
        self._note()
        if self._repairing:
            self._leave("it was repairing its group")
        longer = f", until the operator looked at it (at most {HOLD_CAP_SECONDS:g}s)" if self._tells_considered else ""
        print(
            f"torchjob: rank {self.rank}: SIGTERM (a notice of eviction): training on for up to {HOLD_SECONDS:g}s"
            f"{longer} while a spare takes this place",
            flush=True,
        )
        for seconds in (HOLD_SECONDS, HOLD_CAP_SECONDS) if self._tells_considered else (HOLD_SECONDS,):
            timer = threading.Timer(seconds, self.check)
            timer.daemon = True
            timer.start()

    @property
    def _tells_considered(self) -> bool:
        return self._considered_now is not None

    def after_read(self) -> None:
        """In the membership watch, after each read (and after it took in the newest membership read)."""
        if self._considered_now is not None and not self.considered and self._considered_now():
            self.considered = True
            self.check()

    def check(self) -> None:
        """Leave if the hold is over: no newer membership, and ``HOLD_SECONDS`` passed with the controller done
        looking at the notice (or unable to say), or ``HOLD_CAP_SECONDS`` passed."""
        considered = self.considered  # before newest: the watch sets it after the newest it came with
        if self.noticed_at is None or self._newest() > self._generation_at_notice:
            return  # the group re-forms at its next step; a member whose place went to a spare leaves it there
        held = time.monotonic() - self.noticed_at
        if held >= HOLD_CAP_SECONDS - 0.01:
            self._leave(f"its controller did not look at the notice within {HOLD_CAP_SECONDS:g}s")
        elif held >= HOLD_SECONDS - 0.01 and (considered or not self._tells_considered):
            self._leave(f"no spare took its place within {HOLD_SECONDS:g}s")

    def _leave(self, why: str) -> None:
        print(f"torchjob: rank {self.rank}: leaving on SIGTERM: {why}", flush=True)
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT_CODE)
