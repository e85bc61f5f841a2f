"""The local backend's I/O side: start, watch and stop replica processes; keep their records on disk.

Each replica runs under ``shim.py`` as the leader of its own process group, with its output in a log file.
Stopping a replica signals the whole group (SIGTERM, then SIGKILL after the grace period, to everything
below the shim as well), so nothing a training script forked survives it. The controller is the shims'
parent: if it dies, the kernel tells each shim, which takes its group down (see shim.py). Every signal goes
through ``processes``, which proves a process is the job's before it is touched.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from typing_extensions import assert_never

from torchjob.api import extensions
from torchjob.api.scaling import with_workers, workers_problem
from torchjob.api.types import PyTorchJob
from torchjob.backends.base import Backend
from torchjob.backends.local import gathering, mapping, membership, processes, warm_client
from torchjob.backends.local.children import Children
from torchjob.backends.local.launching import Launcher
from torchjob.backends.local.store import JobStore, LocalState, ProcessRecord
from torchjob.core.actions import (
    Action,
    CreateRendezvousStore,
    CreateReplica,
    CreateSpare,
    DeleteJob,
    DeleteRendezvousStore,
    DeleteReplica,
    DeleteSpare,
    DeleteStuckPod,
    Event,
    LeaveGroup,
    ReformGroup,
    ReorderStop,
    RepairReplica,
    RestartWarm,
)
from torchjob.core.observed import Observed, Phase, Platform, SpareObservation
from torchjob.core.replicas import ROLE_SPARE, ROLE_STORE, expected_replicas

ROLE_REPLICA = "replica"
ROLE_LEAVING = "leaving"  # a replica that handed its place to a spare and is on its way out
# The longest the controller sleeps without a reason. It is woken at once by any replica's exit (pidfd) and
# by the planner's own deadlines, so this only bounds how stale a missed event can get.
MAX_IDLE_SECONDS = 5.0
# While replicas run, the status follows their training progress this closely (a pass reads a few files).
PROGRESS_SECONDS = 1.0
# While a group under in-place repair runs: its members' word that they wait on a silent peer is a file, not an
# event, and a repair is due within a second of it.
IN_PLACE_SECONDS = 0.1
# A wait that overran its timeout by this much means this controller was stalled with its machine; the replicas
# then get this long to report again before the next pass (a few of their beats).
OVERSLEPT_SECONDS = 2.5
RESUME_GRACE_SECONDS = 5.0


# A job's rdzvHost is a cluster name this machine cannot resolve: torchjob hosts the store instead. A lost
# member's place can go to a warm spare (torchjob.train.in_place); torchjob.train writes its progress reports to
# heartbeat files this backend reads; every replica is a process of this machine.
PLATFORM = Platform(reaches_rdzv_host=False, repairs_in_place=True, reports_progress=True, one_host=True)


class LocalBackend(Backend):
    """Runs the replicas of one job as local processes. One instance per controller process."""

    platform = PLATFORM

    def __init__(
        self,
        store: JobStore,
        job: PyTorchJob,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.store = store
        self.name = job.name
        self.state: LocalState = store.read_state(job.name)
        # Records from before markers existed: the job's uid, or a fresh one, marks its processes from now.
        self.job_uid: str = self.state.job_uid or job.metadata.uid or uuid.uuid4().hex
        self.state.job_uid = self.job_uid
        self.grace = float(job.annotation(extensions.TERMINATION_GRACE) or extensions.DEFAULT_TERMINATION_GRACE)
        self._running = False  # the last observation saw a replica running
        self._in_place = False  # ... and one of a group under in-place repair
        self.on_event = on_event or (lambda event: None)
        # Replicas that are Python scripts start from the job's warm interpreter (warm_client.py), unless it opts out.
        warm_log = store.job_dir(job.name) / "logs" / "warm.log"
        self.children = Children(self.job_uid, self.grace, warm_client.for_job(job, self.job_uid, warm_log))
        self.launcher = Launcher(store, self.name, self.state)
        self.deleted = False
        # Readable when the controller got a signal (set up by controller.supervise): `torchjob scale` wakes it.
        self.wake_fd: int | None = None

    def observe(self, job: PyTorchJob) -> Observed:
        changed = False
        observations = []
        spares: list[SpareObservation] = []
        for record in self.state.processes:
            if record.gone:
                continue
            result = self.children.exit_status(record)
            if record.stopping_since is not None:
                if result is None and time.time() - record.stopping_since >= self.grace:
                    processes.kill_tree(record.identity, self.job_uid)
                if result is not None:
                    # A process we stopped is gone: it is no longer part of the job.
                    record.mark_gone()
                    changed = True
                    continue
            if record.role != ROLE_REPLICA:
                # A store or spare that died on its own is gone; the planner starts another if one is needed.
                if result is not None:
                    record.mark_gone()
                    changed = True
                elif record.role == ROLE_SPARE:
                    spares.append(self._spare(record))
                continue
            observations.append(gathering.observe_record(self.store.output_dir(self.name), record, result))
        if changed:
            self._save_state()
        self._running = any(o.phase is Phase.RUNNING for o in observations)
        self._in_place = any(o.phase is Phase.RUNNING and o.repairable for o in observations)
        published = membership.published(self.store.output_dir(self.name))
        return Observed(
            observations, store_running=self._store() is not None, spares=spares, published_membership=published
        )

    def execute(self, job: PyTorchJob, actions: list[Action]) -> None:
        killed = self._kill_at_once(actions)
        for action in actions:
            match action:
                case CreateReplica():
                    self._start(job, action)
                case DeleteReplica() | RestartWarm():
                    # Locally every start is warm already (the job's zygote): a RestartWarm, never planned here
                    # (no process observed here restarts in place), would be a stop, then the next attempt's start.
                    if (str(action.replica), action.attempt) not in killed:
                        self._stop(str(action.replica), action.attempt, action.at_once)
                case CreateRendezvousStore():
                    self._start_store(job)
                case DeleteRendezvousStore():
                    store = self._store()
                    if store is not None:
                        self._stop(store.replica, store.attempt)
                case CreateSpare():
                    self._start_spare(job, action)
                case DeleteSpare():
                    for record in self._live(ROLE_SPARE, action.name):
                        self._stop(record.replica, record.attempt)
                case RepairReplica():
                    self._repair(action)
                case ReformGroup():
                    membership.publish(self.store.output_dir(self.name), action.membership.to_json())
                case DeleteStuckPod() | ReorderStop() | LeaveGroup():
                    pass  # Pod and node facts: this backend never observes a stuck Pod, a lost order or a lost node
                case DeleteJob():
                    self.deleted = True
                case _:
                    assert_never(action)
        if actions:
            self._save_state()
            self.children.settle()

    def record_status(self, job: PyTorchJob) -> None:
        if not self.deleted:
            self.store.write_job(job)

    def publish(self, job: PyTorchJob, events: list[Event]) -> None:
        for event in events:
            self.on_event(event)

    # -- what only the local driver needs (controller/local_driver.py) -----------------------------------

    def refresh(self, job: PyTorchJob) -> PyTorchJob:
        """The job with a pending `torchjob scale` request applied (only the controller writes job.json)."""
        workers = self.store.scale_request(self.name)
        if workers is None:
            return job
        if workers_problem(job, workers) is None:  # checked when asked; the request file may be stale
            job = with_workers(job, workers)
            self.store.write_job(job)
        self.store.clear_scale_request(self.name)
        return job

    def wait(self, until: datetime | None) -> None:
        timeout = IN_PLACE_SECONDS if self._in_place else PROGRESS_SECONDS if self._running else MAX_IDLE_SECONDS
        if until is not None:
            timeout = min(timeout, max(0.0, (until - datetime.now(timezone.utc)).total_seconds()))
        if any(r.stopping_since is not None and not r.gone for r in self.state.processes):
            timeout = min(timeout, 0.1)
        began = time.time()
        self.children.wait(timeout, self.wake_fd)
        if time.time() - began > timeout + OVERSLEPT_SECONDS and self._running:
            # This controller did not run for a while: the machine stalled (a paused VM, a suspended laptop),
            # and its replicas with it. They are given the time to beat and step again before the next pass
            # judges their silence or their progress, which the stall would otherwise be taken for.
            self.children.wait(RESUME_GRACE_SECONDS, self.wake_fd)

    def stop_everything(self, grace: float | None = None) -> None:
        """Stop every live replica of the job and wait until all are gone (Ctrl-C, SIGTERM, delete)."""
        live = [r for r in self.state.processes if not r.gone and self.children.exit_status(r) is None]
        for record in live:
            record.stopping_since = record.stopping_since or time.time()
        self.children.stop_all(live, self.grace if grace is None else grace)
        for record in live:
            record.mark_gone()
        self._save_state()

    def close(self) -> None:
        self.children.close()  # the warm interpreter: kept for the job's life, after its replicas are stopped

    # -- processes ------------------------------------------------------------------------------------

    def _start(self, job: PyTorchJob, action: CreateReplica) -> None:
        replica, attempt = action.replica, action.attempt
        log_path = self.store.log_path(self.name, attempt, str(replica))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        where = self.launcher.addressing(job, attempt, action.rendezvous_at_store, action.meets_at_store)
        spec = self.launcher.replica_spec(job, replica, attempt, log_path, where, action.meets_at_store)
        self._spawn(str(replica), attempt, log_path, spec.argv, spec.env, spec.cwd, ROLE_REPLICA)

    def _live(self, role: str, name: str | None = None) -> list[ProcessRecord]:
        return [
            r
            for r in self.state.processes
            if r.role == role and not r.gone and r.stopping_since is None and name in (None, r.replica)
        ]

    def _spare(self, record: ProcessRecord) -> SpareObservation:
        output = self.store.output_dir(self.name)
        ready = membership.announced(output, record.replica, record.attempt)
        return SpareObservation(record.replica, record.attempt, ready, stopping=record.stopping_since is not None)

    def _start_spare(self, job: PyTorchJob, action: CreateSpare) -> None:
        """A warm spare for the attempt: a Worker's program and environment, with no place in the group yet."""
        attempt = action.attempt
        name = f"spare-{self.state.spares_started}"
        self.state.spares_started += 1
        model = expected_replicas(job)[-1]  # a Worker when there are any
        log_path = self.store.log_path(self.name, attempt, name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        where = self.launcher.addressing(job, attempt, action.rendezvous_at_store, meets_at_store=True)
        spec = self.launcher.replica_spec(job, model, attempt, log_path, where, at_store=True)
        spare = mapping.spare_spec(job, name, spec)
        self._spawn(name, attempt, log_path, spare.argv, spare.env, spare.cwd, ROLE_SPARE)

    def _repair(self, action: RepairReplica) -> None:
        """The spare becomes the replica (its record, its place in the group); a lost one's remains go."""
        spare = next(iter(self._live(ROLE_SPARE, action.spare)), None)
        if spare is None:
            return  # gone meanwhile: the lost replica stays failed, and the planner restarts the group
        for lost in self._live(ROLE_REPLICA, str(action.replica)):
            if lost.attempt == action.attempt and action.handover:
                # It leaves the group at its next step by itself: under another name, stopped after the grace.
                self.children.rename(lost, f"{lost.replica}.leaving")
                lost.replica, lost.role, lost.stopping_since = f"{lost.replica}.leaving", ROLE_LEAVING, time.time()
            elif lost.attempt == action.attempt:
                if self.children.exit_status(lost) is None:
                    # Hung, not dead: stop it now (SIGKILL reaches a stopped process), so that its peers,
                    # blocked in a collective with it, see it fail and re-form.
                    processes.kill_tree(lost.identity, self.job_uid)
                    self.children.reap(lost, timeout=5.0)
                    self.children.exit_status(lost)  # forgets it: its name is about to be the spare's
                lost.mark_gone()
        self.children.rename(spare, str(action.replica))
        spare.replica, spare.role = str(action.replica), ROLE_REPLICA
        # The replica's notices and reports before now were its predecessor's (a notice of eviction above all).
        spare.started_at = time.time()

    def _store(self) -> ProcessRecord | None:
        """The job's rendezvous store process, while it runs and is not being stopped."""
        return next(
            (r for r in self.state.processes if r.role == ROLE_STORE and not r.gone and r.stopping_since is None),
            None,
        )

    def _start_store(self, job: PyTorchJob) -> None:
        """Start the job's c10d rendezvous store (torchjob.train.store_server); its log is kept with the attempt
        it started in."""
        log_path = self.store.log_path(self.name, job.status.attempt, ROLE_STORE)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv, env = self.launcher.store_command()
        self._spawn(ROLE_STORE, job.status.attempt, log_path, argv, env, self.state.job_file_dir, ROLE_STORE)

    def _spawn(
        self, name: str, attempt: int, log_path: Path, command: list[str], env: dict[str, str], cwd: str, role: str
    ) -> None:
        # The store is torchjob's own, small and started once: it starts cold.
        self.state.processes.append(
            self.children.spawn(name, attempt, log_path, command, env, cwd, role, role != ROLE_STORE)
        )

    def _kill_at_once(self, actions: list[Action]) -> set[tuple[str, int]]:
        """The replicas the actions stop at once (a group restart's survivors), killed together before any
        other action: one by one, the 31 survivors of a 32-rank group took 0.6 s to stop on 2 cores, each kill
        waiting its turn for a core while the ones before it died. The (replica, attempt) pairs it killed."""
        wanted = {
            (str(a.replica), a.attempt) for a in actions if isinstance(a, DeleteReplica | RestartWarm) and a.at_once
        }
        doomed = [
            record
            for record in self.state.processes
            if (record.replica, record.attempt) in wanted
            and not record.gone
            and self.children.exit_status(record) is None
        ]
        processes.kill_trees([record.identity for record in doomed], self.job_uid)
        for record in doomed:
            record.stopping_since = record.stopping_since or time.time()
        return {(record.replica, record.attempt) for record in doomed}

    def _stop(self, replica: str, attempt: int, at_once: bool = False) -> None:
        for record in self.state.processes:
            if record.replica == replica and record.attempt == attempt and not record.gone:
                if self.children.exit_status(record) is not None:
                    record.mark_gone()
                elif at_once:
                    processes.kill_tree(record.identity, self.job_uid)  # SIGKILL reaches a stopped process too
                    record.stopping_since = record.stopping_since or time.time()
                elif record.stopping_since is None:
                    processes.signal_group(record.identity, self.job_uid, signal.SIGTERM)
                    record.stopping_since = time.time()

    def _save_state(self) -> None:
        self.store.write_state(self.name, self.state)
