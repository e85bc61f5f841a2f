"""``plan(job, observed, platform, now)``: the one place where a PyTorchJob's lifecycle is decided.

Pure: it reads the job (spec and current status), what a backend observed of its replicas and the time it
is given, and returns actions plus the new status. Both backends (local processes, Kubernetes pods) run the
same function, so every policy has the same meaning on a laptop and on a cluster.

The group model: a plain DDP group cannot survive the loss of a member, so a retryable failure ends the
whole attempt. Every replica of it is stopped, ``status.attempt`` advances, and the next attempt's replicas
are created once the old ones are gone (a replica's name is free again only then — on Kubernetes the Pod
name, locally the rendezvous must not see stale members). Two exceptions keep the survivors running: an
elastic group absorbs membership changes (``policies/elastic.py``), and a group that trains under
torchjob.train's in-place repair has a lost member replaced by a warm spare (``policies/repair.py``), or,
elastic, shrinks and grows around its running members (``policies/regroup.py``). Those in-place decisions
are part of the same pass, as functions of it in ``in_place.py``; the pass's state is ``pass_state.py``.
"""

from __future__ import annotations

from datetime import datetime

from torchjob.api.types import ConditionType, PyTorchJob
from torchjob.core import attempts, conditions
from torchjob.core import in_place as repairs
from torchjob.core.actions import (
    Cause,
    CreateRendezvousStore,
    CreateReplica,
    DeleteRendezvousStore,
    DeleteSpare,
    DeleteStuckPod,
    Event,
    Plan,
)
from torchjob.core.counting import replica_counts
from torchjob.core.observed import Observed, Platform, PlatformReason, ReplicaObservation
from torchjob.core.pass_state import Helpers, PassState
from torchjob.core.policies import (
    backoff,
    cleanup,
    deadline,
    elastic,
    node_loss,
    progress,
    repair,
    restart,
    stuck,
    success,
)
from torchjob.core.policies import learned as learned_deadlines
from torchjob.core.policies import trainer_status as progress_summary
from torchjob.core.replicas import ReplicaId, expected_replicas
from torchjob.core.times import timestamp


def plan(job: PyTorchJob, observed: Observed, platform: Platform, now: datetime) -> Plan:
    """Decide what to do next for ``job`` given what was ``observed`` of it on ``platform`` at time ``now``.

    ``observed``: its replicas of every attempt that still has one, its store and spares, stuck Pods and lost
    orders, the membership the group can read now (when the status keeps another one, as after an operator
    restarted or a new leader took over, it is published again). ``platform``: what the backend can do.
    """
    helpers = Helpers.decide(job, observed, platform)
    # A replica lost with its node is a failure before any policy looks (the group's restart, its repair).
    declared = node_loss.declare_lost(job, list(observed.replicas), now, helpers.reports_progress)
    planner = _Planner(job, declared, now, helpers)
    planner.actions += stuck.orders(observed)
    repairs.publish_kept(planner, observed.published_membership)
    planner.run()
    status = planner.status
    if status != job.status:
        status.last_reconcile_time = timestamp(now)
    return Plan(actions=planner.actions, status=status, events=planner.events, requeue_at=planner.requeue_at)


class _Planner(PassState):
    """One planning pass. Holds the working copy of the status and the actions decided so far."""

    # -- the pass -------------------------------------------------------------------------------------

    def run(self) -> None:
        if conditions.find(self.status, ConditionType.CREATED) is None:
            self._condition(ConditionType.CREATED, conditions.REASON_CREATED, f"{self._kind_name()} is created.")
            annotated, _ = learned_deadlines.progress_deadline(self.job.metadata.annotations or {}, None)
            if annotated is not None and not self.helpers.reports_progress:
                self.events.append(Event("Warning", "ProgressUnreported", progress.UNREPORTED))
        if conditions.is_finished(self.status):
            self._finished()
            return
        if self.job.spec.run_policy.suspend:
            self._suspend()
            return
        if conditions.is_true(self.status, ConditionType.SUSPENDED):
            resumed = f"{self._kind_name()} is resumed."
            self._condition(ConditionType.SUSPENDED, conditions.REASON_RESUMED, resumed, "False")
            self.events.append(Event("Normal", "Resumed", resumed))

        if deadline.deadline_passed(self.job, self.status, self.now):
            seconds = self.job.spec.run_policy.active_deadline_seconds
            self._fail(f"it was active longer than the specified deadline ({seconds}s)", event="DeadlineExceeded")
            return
        self.wake_at(deadline.deadline(self.job, self.status))
        self.wake_at(node_loss.look_again_at(self.job, self.observed))

        self._remove_stale_attempts()
        current = repairs.membership_changes(self, self.current_replicas())
        restart.remember_disruptions(self.status, current)
        current += restart.vanished_replicas(self.job, self.status, current)
        # Before any verdict: what the last reports taught is kept, whatever this pass decides.
        learned = self.status.learned_deadlines = learned_deadlines.learn(self.status.learned_deadlines, current)
        verdict = restart.judge_failures(self.job, current, self.now)
        if verdict is not None:
            self._on_failure(verdict)
            return
        if success.job_succeeded(self.job, current):
            self._succeed(current)
            return
        if repairs.handed_over(self, current):
            return
        since, started = attempts.training_since(self.status), attempts.started_at(self.status)
        group = self.status.membership
        generation = group.generation if group is not None and group.attempt == self.status.attempt else 0
        heard = self.helpers.reports_progress
        regrouped = attempts.restarted_by_regroup(self.status)
        hang = progress.check(
            self.job, current, since, self.now, heard, started, learned, generation, regrouped, self.helpers.one_host
        )
        if hang.hung:
            self._on_hang(hang)
            return
        self.wake_at(hang.check_at)
        overdue = repairs.repair_overdue(self, current)
        if overdue is not None:
            self._restart_counted(overdue)
            return
        self._create_missing(current)
        self._keep_helpers(current)
        self._mark_running(current)
        self._count_replicas(current)
        self.status.trainer_status = progress_summary.summarize(self.status.trainer_status, current)

    # -- phases ---------------------------------------------------------------------------------------

    def _finished(self) -> None:
        self._count_replicas(self.current_replicas(), finished=True)
        self.actions += cleanup.replicas_to_remove(self.job, self.status, self.observed)
        if self.helpers.store_running:
            # Whatever the cleanPodPolicy: the store holds no logs, and nobody will meet at it again.
            self.actions.append(DeleteRendezvousStore())
        self._drop_spares("the job has finished")
        delete_job, expiry = cleanup.ttl_action(self.job, self.status, self.now)
        if delete_job is not None:
            self.actions.append(delete_job)
        self.wake_at(expiry)

    def _suspend(self) -> None:
        self._stop_all(self.observed, "the job is suspended")
        self._drop_spares("the job is suspended")
        if conditions.is_true(self.status, ConditionType.SUSPENDED):
            return
        message = f"{self._kind_name()} is suspended."
        # Running goes False first: the last condition is what `kubectl get` shows as the job's State.
        if conditions.is_true(self.status, ConditionType.RUNNING):
            self._condition(ConditionType.RUNNING, conditions.REASON_SUSPENDED, message, "False")
        self._condition(ConditionType.SUSPENDED, conditions.REASON_SUSPENDED, message)
        self.events.append(Event("Normal", "Suspended", message))
        # Resuming starts a fresh group and a fresh deadline (Kubeflow resets startTime on resume).
        attempts.end_current(self.status, "suspended", self.now)
        self.status.start_time = None
        self._count_replicas([])

    def _on_failure(self, verdict: restart.FailureVerdict) -> None:
        if verdict.held_until is not None:  # the peer it lost may yet be seen failing: judged then
            self.wake_at(verdict.held_until)
            return
        root = verdict.root_cause
        cause = Cause(root.describe(), restart.kind_of(root), root.failure_onset)
        if not verdict.retryable:
            self._fail(cause.text, event="Failed", cause=cause)
            return
        counted = root.reason not in restart.PLATFORM_REASONS
        decisions = repair.decide(self.job, self.status.attempt, self.current_replicas(), repairs.spares_of(self))
        if repairs.repaired(self, decisions, counted):
            return
        if repairs.awaits_spare(self, cause, counted):
            self._keep_helpers(self.current_replicas())  # the spare it waits for is made, or warms
            return
        cause = repairs.spare_given_up(self, cause)
        if counted:
            self._restart_counted(cause)
        else:
            self._restart(cause, counted=False)

    def _on_hang(self, hang: progress.HangVerdict) -> None:
        said = Event("Warning", "Hung", hang.message)
        self.events.append(said)
        if hang.culprit is not None:
            if self.helpers.regroups and repairs.regrouped(self, self.current_replicas(), hang.culprit) is not None:
                return
            spares = repairs.spares_of(self)
            decisions = repair.decide_hung(self.job, self.status.attempt, self.current_replicas(), spares, hang.culprit)
            if repairs.repaired(self, decisions, counted=True):
                return
            if repairs.awaits_node_loss(self, hang.culprit):
                self.events.remove(said)  # not a hang: the loss of its node, declared in a moment, is the verdict
                return
        self._restart_counted(Cause(hang.message, progress.HUNG, hang.began_at))

    def _restart_counted(self, cause: Cause) -> None:
        """A restart that counts against backoffLimit, or the job's end once the limit is reached. In-place
        repairs are retries too: they share the limit with restarts."""
        if not backoff.may_restart(self.job, self.status.restart_count + self.status.repairs):
            limit = backoff.backoff_limit(self.job)
            self._fail(
                f"it has reached the specified backoff limit ({limit} restarts); last failure: {cause.text}",
                event="BackoffLimitExceeded",
                cause=cause,
            )
            return
        self._restart(cause, counted=True)

    def _restart(self, cause: Cause, counted: bool) -> None:
        attempt = self.status.attempt
        message = f"{self._kind_name()} is restarting (attempt {attempt + 1} ended) because {cause.text}"
        if counted:
            wait = self._back_off()
            if wait > 0:
                streak = self.status.crash_loop_restarts
                message += f"; back-off: the next attempt starts in {wait:.0f}s ({streak} restarts in a row)"
        self._condition(ConditionType.RESTARTING, conditions.REASON_RESTARTING, message)
        self.events.append(Event("Warning", "Restarting", message, cause))
        # The survivors of a failed member are in a broken group: after a hang or a lost node they wait in a
        # collective that will not end, after a crash in its failing teardown, and a script that checkpoints on
        # SIGTERM would wait out its whole grace period there (10 s at 32 ranks): they are stopped at once. Not
        # after a preemption or an eviction, whose ranks agreed to stop and may still be writing that checkpoint.
        blocked = cause.kind not in (PlatformReason.PREEMPTED.value, PlatformReason.EVICTED.value)
        self._end_for_restart(self.current_replicas(), f"group restart after attempt {attempt + 1}", at_once=blocked)
        attempts.end_current(self.status, cause.text, self.now)
        if counted:
            self.status.restart_count += 1
        self._count_replicas([])

    def _back_off(self) -> float:
        """A counted restart lengthens the crash loop's streak: the seconds its next attempt waits (0: none)."""
        started = attempts.started_at(self.status)
        loop = backoff.streak_after(self.status.crash_loop_restarts, started, self.now)
        self.status.crash_loop_restarts = loop
        wait = backoff.delay(self.job, loop)
        if wait > 0:
            due = backoff.next_attempt_at(self.now, wait)
            self.status.next_attempt_time = timestamp(due)
            self.wake_at(due)
        return wait

    def _fail(self, text: str, event: str, cause: Cause | None = None) -> None:
        message = conditions.fail_job(self.status, self.job.namespace, self.job.name, text, self.now)
        self.events.append(Event("Warning", event, message, cause))
        attempts.close_current(self.status, text, self.now)
        self._finished()

    def _succeed(self, current: list[ReplicaObservation]) -> None:
        message = f"{self._kind_name()} successfully completed."
        self._condition(ConditionType.SUCCEEDED, conditions.REASON_SUCCEEDED, message)
        self.events.append(Event("Normal", "Succeeded", message))
        self.status.completion_time = timestamp(self.now)
        reported = progress_summary.summarize(self.status.trainer_status, current)
        self.status.trainer_status = progress_summary.completed(reported)
        attempts.close_current(self.status, "succeeded", self.now)
        self._finished()

    # -- replicas -------------------------------------------------------------------------------------

    def _remove_stale_attempts(self) -> None:
        stale = [o for o in self.observed if o.attempt != self.status.attempt]
        self._stop_all(stale, "it belongs to an earlier attempt")

    def _create_missing(self, current: list[ReplicaObservation]) -> None:
        present = {o.replica for o in current}
        # A new attempt starts only once the whole earlier one is gone: its names (Pods) are free again,
        # and no member of the old group can hold resources the new one needs.
        if any(o.attempt != self.status.attempt for o in self.observed):
            return
        backing_off = backoff.waits_until(self.status.next_attempt_time, self.now) if not current else None
        if backing_off is not None:  # a crash loop's back-off: the next attempt starts then
            self.wake_at(backing_off)
            return
        self.status.next_attempt_time = None
        missing = [r for r in expected_replicas(self.job) if r not in present and not self._replacement_waits(r)]
        group_running = any(o.phase.live and not o.stopping for o in current)
        if self.helpers.regroups and group_running:
            missing = []  # a running elastic group under in-place repair fills its empty places with spares
        at_store = self.helpers.rendezvous_at_store
        self.actions += [CreateReplica(r, self.status.attempt, at_store, self.helpers.in_place) for r in missing]
        if missing and group_running:
            # Joining a group that is already running: a scale-up or a lost member's replacement.
            self.status.membership_changes += len(missing)
            attempts.note_regroup(self.status, self.now)  # the launcher starts every worker again
            for r in missing:
                self.events.append(Event("Normal", "MemberAdded", f"{r} joins the running group"))
        for r in missing:
            self.status.replacement_due.pop(str(r), None)
        if missing or current:
            if self.status.start_time is None:
                self.status.start_time = timestamp(self.now)
                self.wake_at(deadline.deadline(self.job, self.status))
            attempts.open_current(self.status, self.now)

    def _keep_helpers(self, current: list[ReplicaObservation]) -> None:
        """What the group needs beside its replicas: its rendezvous store and warm spares."""
        creating = any(isinstance(a, CreateReplica) for a in self.actions)
        group_up = creating or any(o.phase.live and not o.stopping for o in current)
        if self.helpers.store_needed and not self.helpers.store_running and group_up:
            # Before the replicas that meet at it, after a stuck one's forced delete (it takes the same name).
            forced = sum(isinstance(a, DeleteStuckPod) for a in self.actions)
            self.actions.insert(forced, CreateRendezvousStore())
        # Empty places of an elastic group get theirs at once: the group may wait for them.
        held, until = repair.holds_spares(current, attempts.repaired_at(self.status), self.now)
        self.wake_at(until)
        wanted = (0 if held else self.helpers.spares_wanted) + self.empty_places
        actions, self.status.spares_ready = repair.spare_actions(
            wanted, self.helpers.spares, self.status.attempt, group_up, self.helpers.rendezvous_at_store
        )
        self.actions += actions

    def _drop_spares(self, reason: str) -> None:
        self.actions += [DeleteSpare(s.name, reason) for s in self.helpers.spares if not s.stopping]
        self.status.spares_ready = 0

    def _replacement_waits(self, replica: ReplicaId) -> bool:
        due = elastic.replacement_waits_until(self.status.replacement_due, replica, self.now)
        self.wake_at(due)  # the planner wakes up when it is due
        return due is not None

    def _mark_running(self, current: list[ReplicaObservation]) -> None:
        marked = success.group_condition(self.job, current, conditions.has_started(self.status), self._kind_name())
        if marked is not None:
            self._condition(*marked)

    def _count_replicas(self, current: list[ReplicaObservation], finished: bool = False) -> None:
        before = self.status.replica_statuses if finished else {}
        self.status.replica_statuses = replica_counts(self.job, current, before)
