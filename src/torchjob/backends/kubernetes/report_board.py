"""What the operator hears from inside Pods: torchjob.train's progress reports, and who sent each one.

A Pod proves who it is with its projected service-account token, which a TokenReview turns into the Pod's
namespace, name and uid (``token_review.py``); nothing the body says about identity is believed. The board
keeps the latest report per Pod uid, stamped with the operator's own clock, and the backend joins it to the
Pods it observes: a report from a Pod of another job, or of an earlier attempt, never lands on the wrong replica.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from datetime import datetime, timezone

from torchjob import worker_files
from torchjob.backends.kubernetes.notices import Notices
from torchjob.backends.kubernetes.token_review import PodIdentity
from torchjob.core.policies import silent_member
from torchjob.core.reported import MemberAnnouncement, Progress, TrainerState
from torchjob.worker_files import Membership, RestartOrder

log = logging.getLogger("torchjob.operator")

# A Pod silent this long is forgotten (its job has long been judged hung or finished).
_FORGET_SECONDS = 3600.0
_MAX_PROCESS_NAME = 64


class ReportBoard:
    """What Pods told the operator, by Pod uid: the latest progress report, and the attempt in which a Pod
    announced the in-place loop (a spare: that it is warm). And what the operator tells them: each job's
    in-place membership. Written by the report server and the backend, read by both."""

    def __init__(self) -> None:
        # When this operator began to hear reports: set when it starts to lead (reports reach only the leader).
        self.listening_since: datetime | None = None
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[PodIdentity, Progress]] = {}
        self._announced: dict[str, MemberAnnouncement] = {}
        self._memberships: dict[tuple[str, str], Membership] = {}
        self._membership_owners: dict[tuple[str, str], str] = {}  # the uid of the job each was published for
        self._trainers: dict[str, TrainerState] = {}  # by Pod uid: what its launcher said
        self.notices = Notices()  # members on notice of eviction, and whether a pass has looked since
        self._orders: dict[str, RestartOrder] = {}  # by Pod uid: the attempt its launcher is to start
        self._processes: dict[str, set[str]] = {}  # by Pod uid: the processes it has reported from
        self._exited: dict[str, set[str]] = {}  # by Pod uid: those of them that said they are exiting
        self._leaving: dict[str, tuple[frozenset[str], str]] = {}  # by Pod uid: processes ordered out, and why

    def announce(self, pod: PodIdentity, announcement: MemberAnnouncement) -> bool:
        """Keep what ``pod`` announced; True when it is news the job should be looked at for at once (a Pod
        heard for the first time in this attempt, one whose step began or stopped waiting on a peer, or one
        heard again after a silence that may have held a verdict back)."""
        with self._lock:
            before = self._announced.get(pod.uid)
            self._announced[pod.uid] = silent_member.with_longest_gap(before, announcement)
            if before is None and len(self._announced) % 256 == 0:  # Pods come and go: forget the long gone
                self._announced = {
                    uid: said
                    for uid, said in self._announced.items()
                    if (announcement.heard_at - said.heard_at).total_seconds() < _FORGET_SECONDS
                }
        if before is None or (before.attempt, before.waiting_in) != (announcement.attempt, announcement.waiting_in):
            return True
        return silent_member.heard_again(before, announcement)

    def announced(self, uid: str | None, attempt: int) -> bool:
        return self.announcement(uid, attempt) is not None

    def announcement(self, uid: str | None, attempt: int) -> MemberAnnouncement | None:
        """What the Pod last announced in ``attempt`` (None: nothing, or an earlier attempt's)."""
        with self._lock:
            found = self._announced.get(uid or "")
        return found if found is not None and found.attempt == attempt else None

    def trainer_said(self, pod: PodIdentity, state: TrainerState) -> tuple[bool, RestartOrder | None]:
        """Keep what ``pod``'s launcher said of its trainer. Returns whether it is news the job should be looked
        at for at once (its trainer ended, or started an attempt), and the order that waits for it, if any."""
        with self._lock:
            before = self._trainers.get(pod.uid)
            if before is not None and (before.attempt, before.exit_code) == (state.attempt, state.exit_code):
                state = replace(state, ended_at=before.ended_at)  # it ended when it was first said
            self._trainers[pod.uid] = state
            order = self._orders.get(pod.uid)
            if order is not None and order["attempt"] <= state.attempt:
                # Carried out: what the Pod reports from now on is the new attempt's.
                del self._orders[pod.uid]
                self._latest.pop(pod.uid, None)
                order = None
            if before is None and len(self._trainers) % 256 == 0:  # Pods come and go: forget the long gone
                self._trainers = {
                    uid: said
                    for uid, said in self._trainers.items()
                    if (state.heard_at - said.heard_at).total_seconds() < _FORGET_SECONDS
                }
        news = before is None or (before.attempt, before.exit_code) != (state.attempt, state.exit_code)
        if news:
            how = "runs" if state.exit_code is None else f"ended with exit code {state.exit_code}"
            log.info("%s/%s: its launcher's trainer of attempt %d %s", pod.namespace, pod.name, state.attempt, how)
        return news, order

    def trainer(self, uid: str | None) -> TrainerState | None:
        with self._lock:
            return self._trainers.get(uid or "")

    def order_restart(self, uid: str, order: RestartOrder) -> None:
        """Have the launcher of Pod ``uid`` start ``order``'s attempt; its old trainer's progress is forgotten."""
        with self._lock:
            self._orders[uid] = order
            self._latest.pop(uid, None)

    def order(self, uid: str | None) -> RestartOrder | None:
        with self._lock:
            return self._orders.get(uid or "")

    def publish_membership(self, namespace: str, job: str, membership: Membership, job_uid: str = "") -> None:
        with self._lock:
            self._memberships[(namespace, job)] = membership
            self._membership_owners[(namespace, job)] = job_uid

    def membership(self, namespace: str, job: str, job_uid: str | None = None) -> Membership | None:
        """The membership published for the job of this name; with ``job_uid``, only if that job published it
        (an earlier job of the same name may have, until ``forget_other_jobs_membership``)."""
        with self._lock:
            if job_uid is not None and self._membership_owners.get((namespace, job), job_uid) != job_uid:
                return None
            return self._memberships.get((namespace, job))

    def forget_other_jobs_membership(self, namespace: str, job: str, job_uid: str) -> None:
        """A job deleted and created again under the same name: its Pods must not read the old one's group
        (the endpoint is by name). Called on each pass's execute, before the job's Pods are created."""
        with self._lock:
            if self._membership_owners.get((namespace, job), job_uid) != job_uid:
                self._memberships.pop((namespace, job), None)
                self._membership_owners.pop((namespace, job), None)

    def order_leave(self, uid: str, why: str) -> int:
        """Order the processes Pod ``uid`` has reported from so far out of their group (``LeaveGroup``): its
        launcher's next ones are not ordered. Returns how many were."""
        with self._lock:
            heard = frozenset(self._processes.get(uid, ()))
            earlier, _ = self._leaving.get(uid, (frozenset(), ""))
            self._leaving[uid] = (earlier | heard, why)
        return len(heard)

    def leave_order(self, uid: str, process: object) -> str | None:
        """Why ``process`` of Pod ``uid`` must leave its group; None when it was not ordered to."""
        with self._lock:
            ordered, why = self._leaving.get(uid, (frozenset(), ""))
        return why if isinstance(process, str) and process in ordered else None

    def put(self, pod: PodIdentity, report: dict[str, object], now: datetime | None = None) -> bool:
        """Keep ``report`` as ``pod``'s latest; False when it is not a progress report."""
        received = now or datetime.now(timezone.utc)
        progress = Progress.from_report(report, received, alive_at=received)
        if progress is None:
            return False
        process = report.get(worker_files.REPORT_PROCESS)
        with self._lock:
            if isinstance(process, str) and len(process) <= _MAX_PROCESS_NAME:
                self._processes.setdefault(pod.uid, set()).add(process)
                if progress.exiting:
                    self._exited.setdefault(pod.uid, set()).add(process)
                # The Pod is exiting once every process it reported from said so: one still running (nprocPerNode)
                # can still be its silence.
                progress = replace(progress, exiting=self._exited.get(pod.uid, set()) >= self._processes[pod.uid])
            before = self._latest.get(pod.uid)
            if before is not None and before[1].step == progress.step:
                # Still the same step: the Pod is alive, but its progress dates from the step's first report.
                progress = replace(progress, at=before[1].at)
            self._latest[pod.uid] = (pod, progress)
            if before is None and len(self._latest) % 256 == 0:  # a new Pod, as in announce: not on every report
                self._forget_silent(received)
        return True

    def latest(self, uid: str | None) -> Progress | None:
        with self._lock:
            found = self._latest.get(uid or "")
        return found[1] if found else None

    def _forget_silent(self, now: datetime) -> None:
        def heard(progress: Progress) -> datetime:
            return progress.alive_at or progress.at

        self._latest = {
            uid: entry
            for uid, entry in self._latest.items()
            if (now - heard(entry[1])).total_seconds() < _FORGET_SECONDS
        }
        self._processes = {uid: processes for uid, processes in self._processes.items() if uid in self._latest}
        self._exited = {uid: processes for uid, processes in self._exited.items() if uid in self._latest}
        self._leaving = {uid: order for uid, order in self._leaving.items() if uid in self._latest}
