"""Members on notice of eviction as the operator heard them, and whether a pass over their job has looked since.

A member of an in-place group that gets SIGTERM (a drain, a spot notice: ``torchjob.train.eviction``) says so
in its announcements and trains on while the operator decides: its place goes to a ready spare, or an elastic
group shrinks without it, either way by a newer membership. "No newer membership yet" means nothing, though,
until a pass over the job has run since the notice: on a loaded machine that can take longer than the member's
usual hold, and a member that leaves first fails its peers' step. So the operator tells a member on notice, in
the answer to its announcements, once a pass over its job that began after the notice was heard has ended
(``considered``); such a pass saw the Pod's DisruptionTarget (set before the kubelet's SIGTERM) and published
whatever it decided before it ended. A job that is gone or being deleted counts as looked at: nothing will hand
its members' places over.
"""

from __future__ import annotations

import threading
from datetime import datetime

# A notice no pass looked at in this long belongs to a Pod long gone.
_FORGET_SECONDS = 3600.0


class Notices:
    """Notices by Pod uid, per job, with the time the operator heard each; thread-safe (the report server's
    threads hear them, the operator's workers look)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heard: dict[tuple[str, str], dict[str, datetime]] = {}  # (namespace, job) -> uid -> heard at
        self._considered: dict[str, datetime] = {}  # uid -> when the notice was heard

    def heard(self, namespace: str, job: str, uid: str, at: datetime) -> bool:
        """Keep the notice of Pod ``uid`` of ``job``, heard ``at`` (the operator's clock); True the first time:
        the job is to be looked at at once."""
        with self._lock:
            if uid in self._considered or any(uid in pods for pods in self._heard.values()):
                return False
            self._forget_old(at)
            self._heard.setdefault((namespace, job), {})[uid] = at
            return True

    def looked_at(self, namespace: str, job: str, began: datetime) -> None:
        """A pass over ``job`` that began at ``began`` ended: the notices heard before it are considered."""
        with self._lock:
            pods = self._heard.get((namespace, job), {})
            for uid in [uid for uid, at in pods.items() if at <= began]:
                self._considered[uid] = pods.pop(uid)
            if not pods:
                self._heard.pop((namespace, job), None)

    def considered(self, uid: str) -> bool:
        """Whether a pass has looked at Pod ``uid``'s notice since it was heard."""
        with self._lock:
            return uid in self._considered

    def _forget_old(self, now: datetime) -> None:
        def recent(at: datetime) -> bool:
            return (now - at).total_seconds() < _FORGET_SECONDS

        self._considered = {uid: at for uid, at in self._considered.items() if recent(at)}
        for key in list(self._heard):
            self._heard[key] = {uid: at for uid, at in self._heard[key].items() if recent(at)}
            if not self._heard[key]:
                del self._heard[key]
