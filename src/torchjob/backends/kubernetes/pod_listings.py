"""When a job's Pods are listed again, and when its last list still stands.

A wide job is looked at every few seconds for its replicas' reports alone. Listing its Pods at each of those
passes (a thousand Pods are some 10 MB of JSON, parsed in one call that holds the interpreter) left the report
endpoint's threads waiting for the interpreter: at 1,024 replicas the operator spent 0.85 cores, most of it in
that parse, and reports took 0.1–0.3 s to answer. So a pass reuses its job's last list while nothing can have
changed since: the operator's Pod watch has said nothing of the job's Pods, this operator has not acted on the
job, the watch has run without a break, and the list is younger than ``MOST_SECONDS``.

Staleness is that of the watch: a change the API server made before its event arrives is missed by a pass in
between, and the event then asks for another pass, which lists again (as a pass that listed just before the
change would have missed it too). A backend whose watch does not run (``torchjob`` outside the operator, tests)
lists at every pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchjob.backends.kubernetes.cluster import JobKey

Pods = list[dict[str, Any]]

# A list is not reused past this age, whatever the watch said (a watch that went quiet without an error: the
# operator's resync assumes the same of its job watch).
MOST_SECONDS = 30.0


@dataclass(frozen=True)
class _Listing:
    changes: int  # the job's change count when the list began
    era: int  # the watch's era when the list began
    at: float  # when the list began (monotonic)
    pods: Pods

    def young(self, now: float) -> bool:
        return now - self.at < MOST_SECONDS

    def stands(self, changes: int, era: int, now: float) -> bool:
        return (self.changes, self.era) == (changes, era) and self.young(now)


class PodListings:
    """Each job's last list of Pods, and the changes to them the Pod watch and this operator's own acts make."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._changes: dict[JobKey, int] = {}
        self._listed: dict[JobKey, _Listing] = {}
        self._watched = False  # the Pod watch delivers events now
        self._era = 0  # one per break of the watch: a list from before a break never stands after it

    def changed(self, key: JobKey) -> None:
        """The job's Pods changed, or may have (an event of the watch, or this operator acted on the job)."""
        with self._lock:
            self._changes[key] = self._changes.get(key, 0) + 1

    def watching(self) -> None:
        """The Pod watch's stream is delivering events (it replays every Pod when it starts, so every job with
        Pods is said to have changed once it runs)."""
        with self._lock:
            self._watched = True

    def unwatched(self) -> None:
        """The Pod watch broke: until it runs again, every pass lists."""
        with self._lock:
            self._watched = False
            self._era += 1
            self._listed.clear()

    def pods(self, key: JobKey, list_pods: Callable[[], Pods]) -> Pods:
        """The job's Pods: its last list while it stands, else a new one (``list_pods``), kept for next time.
        The Pods are shared with later passes: read them, never change them."""
        now = self.clock()
        with self._lock:
            changes, era = self._changes.get(key, 0), self._era
            kept = self._listed.get(key)
            if self._watched and kept is not None and kept.stands(changes, era, now):
                return kept.pods
            watched = self._watched
        pods = list_pods()  # changes from here on count against this list
        with self._lock:
            # Lists past their age would never be reused: they go, so that a job no longer looked at is not held.
            self._listed = {k: v for k, v in self._listed.items() if v.young(now)}
            if watched and self._era == era:
                self._listed[key] = _Listing(changes, era, now, pods)
        return pods
