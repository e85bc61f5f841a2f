"""A work queue of job keys with the guarantees a controller needs (client-go's workqueue, in small).

- A key waiting in the queue is there once, however many events name it.
- A key is never handed to two workers at once; a key that changes while being worked on is handed out
  again once that work is done.
- ``add_after`` schedules a key for later (deadlines, TTL, hang checks, retries after an error).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from typing import Generic, TypeVar

Key = TypeVar("Key")


class WorkQueue(Generic[Key]):
    def __init__(self) -> None:
        self._ready: deque[Key] = deque()
        self._queued: set[Key] = set()
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._later: list[tuple[float, int, Key]] = []
        self._sequence = 0
        self._closed = False
        self._cv = threading.Condition()

    def add(self, key: Key) -> None:
        with self._cv:
            if key in self._processing:
                self._dirty.add(key)
            else:
                self._enqueue(key)

    def add_after(self, key: Key, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        with self._cv:
            self._sequence += 1
            heapq.heappush(self._later, (time.monotonic() + seconds, self._sequence, key))
            self._cv.notify()

    def get(self) -> Key | None:
        """The next key to work on (blocks); None once the queue is closed."""
        with self._cv:
            while True:
                if self._closed:
                    return None
                self._promote_due()
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                timeout = self._later[0][0] - time.monotonic() if self._later else None
                self._cv.wait(timeout)

    def done(self, key: Key) -> None:
        with self._cv:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._enqueue(key)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def __len__(self) -> int:
        with self._cv:
            return len(self._ready) + len(self._later)

    def _promote_due(self) -> None:
        now = time.monotonic()
        while self._later and self._later[0][0] <= now:
            _, _, key = heapq.heappop(self._later)
            if key in self._processing:
                self._dirty.add(key)
            else:
                self._enqueue(key)

    def _enqueue(self, key: Key) -> None:
        """Make ``key`` ready (the lock is held)."""
        if key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._cv.notify()
