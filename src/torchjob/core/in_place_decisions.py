"""The planner's in-place decisions (``core/planning.py``): a lost or hung member's place given to a warm
spare, an elastic group that shrinks and grows around its running members, and a repair given up when it
does not complete. The policies themselves are ``policies/repair.py`` and ``policies/regroup.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from torchjob.api.types import PyTorchJob
from torchjob.core import attempts
from torchjob.core.actions import Cause, Event, ReformGroup, RepairReplica
from torchjob.core.observed import ReplicaObservation, SpareObservation
from torchjob.core.pass_state import Helpers, PassState
from torchjob.core.policies import backoff, progress, regroup, repair
from torchjob.core.policies.regroup import Regroup


class InPlaceDecisions(PassState):
    def __init__(self, job: PyTorchJob, observed: list[ReplicaObservation], now: datetime, helpers: Helpers) -> None:
        super().__init__(job, observed, now, helpers)
        self.empty_places = 0  # places of a running elastic group that spares are to fill

    def _restart_counted(self, cause: Cause) -> None:
        raise NotImplementedError  # the planner's: a restart within backoffLimit, or the job's end

    def _on_hang(self, hang: progress.HangVerdict) -> None:
        self.events.append(Event("Warning", "Hung", hang.message))
        if hang.culprit is not None:
            if self.helpers.regroups and self._regrouped(self._current(), hang.culprit) is not None:
                return
            decision = repair.decide_hung(self.job, self.status.attempt, self._current(), self._spares(), hang.culprit)
            if self._repaired(decision, counted=True):
                return
        self._restart_counted(Cause(hang.message, "Hung", hang.began_at))

    def _spares(self) -> list[SpareObservation]:
        return self.helpers.spares if self.helpers.in_place else []  # none where the platform cannot repair

    def _repaired(self, decisions: list[repair.Repair], counted: bool) -> bool:
        """Replace the lost members with warm spares while the others carry on, where that is possible."""
        if not decisions:
            return False
        retries = self.status.restart_count + self.status.repairs + len(decisions) - 1
        if counted and not backoff.may_restart(self.job, retries):
            return False  # a crash loop: the group restart path ends the job at the backoff limit
        others = len(self._current()) - len(decisions)
        for decision in decisions:
            self.actions.append(RepairReplica(decision.lost.replica, self.status.attempt, decision.spare))
            self.status.repairs += 1
            message = decision.describe(others, self.status.repairs)
            self.events.append(Event("Warning", "Repaired", message, decision.cause))
        # The group keeps its places: its live members, and the lost ones now held by the spares.
        places = [o.replica for o in self._current() if o.phase.live and not o.stopping]
        members = repair.members_in_rank_order(self.job, [*places, *(d.lost.replica for d in decisions)])
        self._reform(members, [(d.spare, str(d.lost.replica)) for d in decisions])
        attempts.note_repair(self.status, self.now)
        return True

    def _regroup(self, current: list[ReplicaObservation]) -> list[ReplicaObservation]:
        """An elastic group under in-place repair shrinks and grows around its running members. Returns
        the members that stay (all of them when a loss cannot be absorbed: it fails the attempt, later)."""
        change = self._regrouped(current)
        return current if change is None else [o for o in current if o not in change.leaving]

    def _regrouped(self, current: list[ReplicaObservation], hung: ReplicaObservation | None = None) -> Regroup | None:
        change = regroup.decide(self.job, self.status.attempt, current, self._spares(), hung)
        if change is None:
            return None
        self.actions += change.actions
        self.events += change.events
        if change.members is not None:
            self._reform(change.members, change.promoted)
        self.status.membership_changes += len(change.leaving) + change.joining
        self.empty_places = change.empty_places
        if change.leaving or change.joining:
            attempts.note_repair(self.status, self.now)  # the group re-forms: that is progress, and has a deadline
        return change

    def _reform(self, members: Sequence[str], promoted: Sequence[tuple[str, str]]) -> None:
        """Tell the group its next membership, and keep it in the status (the same for any operator)."""
        membership = repair.next_membership(self.status.membership, self.status.attempt, members, promoted)
        self.status.membership = membership
        self.actions.append(ReformGroup(membership))

    def _repair_given_up(self, current: list[ReplicaObservation]) -> bool:
        """Restart the group when its last repair in place did not complete in time."""
        repaired_at = attempts.repaired_at(self.status)
        gave_up, look_again = repair.overdue(current, repaired_at, self.now)
        if gave_up is None:
            self._wake_at(look_again)
            return False
        self.events.append(Event("Warning", "RepairTimeout", gave_up))
        self._restart_counted(Cause(gave_up, "RepairTimeout", repaired_at))
        return True
