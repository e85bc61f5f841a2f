"""``LocalClient``: jobs run as processes on this machine, their records in the local state directory.

Works from any shell, after the fact: everything it reads is on disk. A job whose controller died without
recording an end (machine rebooted, ``kill -9``) is found out on read: its leftover processes are stopped
and it is marked Failed with the reason, so no job shows Running forever. Only processes that
``backends.local.processes`` proves are the job's are ever signalled; a record alone proves nothing.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchjob import worker_files
from torchjob.api.errors import ValidationError
from torchjob.api.extensions import DEFAULT_TERMINATION_GRACE
from torchjob.api.types import PyTorchJob
from torchjob.backends.local import outputs, processes
from torchjob.backends.local.logs import LogFollower
from torchjob.backends.local.store import DamagedRecord, JobStore, LocalState
from torchjob.core.replicas import unknown_replica_problem
from torchjob.core.times import timestamp
from torchjob.sdk import upkeep
from torchjob.sdk.client import JobClient, scale_problem
from torchjob.sdk.errors import (
    JobExistsError,
    JobNotFoundError,
    JobStillRunningError,
    SdkError,
    store_errors,
)
from torchjob.sdk.summary import UNREADABLE, JobSummary, from_local_record

if TYPE_CHECKING:
    from torchjob.api.loading import JobInput
    from torchjob.controller.loop import PassResult
    from torchjob.core.actions import Event

# Reading a job file and the controller are imported inside the methods that need them (torchjob/cli/__init__.py).


class LocalClient(JobClient):
    def __init__(self, home: Path | None = None) -> None:
        self.store = JobStore(home)

    # -- submitting -----------------------------------------------------------------------------------

    def load(
        self,
        path: str | Path,
        values: str | None = None,
        max_processes: int | None = None,
        runtimes: Sequence[str] = (),
    ) -> JobInput:
        """Load and validate a job file (``-``: standard input; ``values``: its placeholders' values; a
        TrainJob's runtime files), including what it needs to run locally."""
        # Late: a job file's models (30 ms); `list`, `get` and `logs` never read one (torchjob/cli/__init__.py).
        from torchjob.api.loading import load_job
        from torchjob.backends.local import mapping

        loaded = load_job(path, values, runtimes)
        problems = mapping.local_problems(loaded.job, max_processes or mapping.DEFAULT_MAX_PROCESSES)
        if problems:
            raise ValidationError(problems)
        return loaded

    @store_errors
    def create(self, job: PyTorchJob, job_file_dir: str | Path, replace: bool = False) -> PyTorchJob:
        """Record a new job (not yet started). ``replace`` deletes a finished job of the same name first."""
        if self.store.exists(job.name):
            if not replace:
                raise JobExistsError(job.name, self._state_or_unreadable(job.name))
            if self._controller_lives(job.name):
                raise JobStillRunningError(job.name)
            self.delete(job.name)
        job = job.model_copy(deep=True)
        job.metadata.creation_timestamp = timestamp(datetime.now(timezone.utc))
        # As the API server does: every object gets a uid. Locally it also marks the job's processes.
        job.metadata.uid = str(uuid.uuid4())
        state = LocalState(job_file_dir=str(Path(job_file_dir).resolve()), job_uid=job.metadata.uid)
        if not self.store.create(job, state):
            raise JobExistsError(job.name, self._state_or_unreadable(job.name))
        return job

    def run(
        self,
        name: str,
        on_event: Callable[[Event], None] | None = None,
        on_pass: Callable[[PassResult], None] | None = None,
    ) -> PyTorchJob | None:
        """Supervise a created job in this process until it ends (raises ``Interrupted`` on a signal)."""
        from torchjob.controller.local_driver import AlreadySupervised, supervise  # the controller: 45 ms

        try:
            return supervise(self.store, name, on_event=on_event, on_pass=on_pass)
        except AlreadySupervised as err:
            raise SdkError(str(err)) from None

    def start_detached(self, name: str) -> int:
        """Start a controller for a created job in the background; returns its pid."""
        from torchjob.controller.daemon import start_detached

        return start_detached(self.store, name)

    # -- reading --------------------------------------------------------------------------------------

    def get(self, name: str) -> PyTorchJob:
        """The job with its status, as a typed object."""
        return PyTorchJob.model_validate(self.get_wire(name))

    @store_errors
    def get_wire(self, name: str) -> dict[str, Any]:
        """The job with its status, in Kubeflow's wire format (what ``torchjob get -o json`` prints)."""
        self._settle(name)
        try:
            return self.store.read_job_data(name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None

    @store_errors
    def list(self) -> list[JobSummary]:
        summaries = []
        now = datetime.now(timezone.utc)
        for name in self.store.names():
            try:
                summary = self._settle(name)
            except JobNotFoundError:
                continue  # removed meanwhile (TTL, delete from another shell)
            except DamagedRecord as err:
                summaries.append(JobSummary(name, UNREADABLE, 0.0, 0, 0, str(err)))
                continue
            summaries.append(from_local_record(name, summary, now))
        return summaries

    @store_errors
    def state(self, name: str) -> str:
        return str(self._settle(name).get("state", ""))

    @store_errors
    def records(self, name: str) -> LocalState:
        """What the local backend keeps of the job's processes (controller, replicas, ports)."""
        try:
            return self.store.read_state(name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None

    @store_errors
    def log_files(self, name: str, attempt: int | None = None) -> dict[str, Path]:
        """Replica name → log file, for one attempt (numbered as in the status: 0 is the first; default: the
        current one, or the newest that has output while the current one starts)."""
        self._require(name)
        current = int(self._summary(name).get("attempt", 0))
        try:
            return outputs.log_files(self.store.job_dir(name) / "logs", attempt, current)
        except outputs.NoSuchAttempt as err:
            raise SdkError(f"job {name!r} {err}") from None

    @store_errors
    def logs(self, name: str, replica: str | None = None, attempt: int | None = None) -> str:
        files = self.log_files(name, attempt)
        if replica is not None and replica not in files:
            self.check_replica(name, replica)
            return ""  # a replica of the job that has written nothing yet
        chosen = {replica: files[replica]} if replica else files
        out = []
        for rname, path in chosen.items():
            text = path.read_text(errors="replace")
            out += [line if replica else f"[{rname}] {line}" for line in text.splitlines()]
        return "\n".join(out)

    def check_replica(self, name: str, replica: str) -> None:
        """Raise unless ``replica`` (e.g. ``worker-1``) is one the job has or may have."""
        problem = unknown_replica_problem(self.get(name), replica)
        if problem:
            raise SdkError(problem)

    def follow(self, name: str, replica: str | None = None, poll: float = 0.2) -> Iterator[tuple[str, str]]:
        """Yield (replica, line) as replicas write, across attempts, until the job ends and is idle."""
        self._require(name)
        if replica is not None:
            self.check_replica(name, replica)
        follower = LogFollower(self.store.job_dir(name) / "logs", replica)
        while True:
            yield from follower.poll()
            if not self.store.exists(name) or self._is_over(name):
                yield from follower.poll(final=True)
                return
            time.sleep(poll)

    @store_errors
    def metrics(self, name: str) -> dict[int, builtins.list[dict[str, Any]]]:
        """Rank → its step records, from the JSONL files torchjob.train writes into the job's output."""
        self._require(name)
        return outputs.rank_metrics(self.store.output_dir(name))

    def tensorboard_dir(self, name: str) -> Path:
        """The job's TensorBoard log folder (``tensorboard --logdir`` it), where torchjob.train writes."""
        self._require(name)
        return worker_files.tensorboard_dir(self.store.output_dir(name))

    @store_errors
    def wait(self, name: str, timeout: float | None = None, poll: float = 0.2) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._is_over(name):
                return self.get_wire(name)
            if deadline is not None and time.monotonic() > deadline:
                raise SdkError(f"job {name!r} did not finish within {timeout}s")
            time.sleep(poll)

    # -- scaling --------------------------------------------------------------------------------------

    @store_errors
    def scale(self, name: str, workers: int) -> None:
        """Ask a running elastic job for ``workers`` Workers; its controller applies it within a pass."""
        from torchjob.controller.local_driver import WAKE_SIGNAL

        self._settle(name)
        problem = scale_problem(self.get(name), workers)
        if problem:
            raise SdkError(problem)
        controller = processes.controller(self.records(name).controller, self.store.controller_lock_path(name))
        if controller is None:
            raise SdkError(f"job {name!r} has no running controller to apply the change")
        self.store.request_scale(name, workers)
        controller.send_signal(WAKE_SIGNAL)

    # -- deleting -------------------------------------------------------------------------------------

    @store_errors
    def delete(self, name: str, grace: float = DEFAULT_TERMINATION_GRACE) -> None:
        """Stop a running job's controller (which stops its replicas), then remove its records and logs.

        A job whose records are damaged is removed all the same; only processes proven to be its own are
        stopped. Raises when something could not be removed, naming it."""
        self._require(name)
        left = upkeep.remove_job(self.store, name, grace)
        if left:
            more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
            raise SdkError(f"job {name!r} was only partly deleted: cannot remove {left[0]}{more}")

    # -- internals ------------------------------------------------------------------------------------

    def _require(self, name: str) -> None:
        if not self.store.exists(name):
            raise JobNotFoundError(name)

    def _summary(self, name: str) -> dict[str, Any]:
        try:
            return self.store.read_summary(name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None

    def _controller_lives(self, name: str) -> bool:
        return upkeep.controller_lives(self.store, name)

    def _state_or_unreadable(self, name: str) -> str:
        try:
            return str(self._summary(name).get("state", ""))
        except (DamagedRecord, JobNotFoundError):
            return UNREADABLE

    def _is_over(self, name: str) -> bool:
        """Finished and its controller gone (so every replica has been dealt with)."""
        try:
            summary = self._settle(name)
        except JobNotFoundError:
            return True  # deleted, or removed by its TTL
        return bool(summary.get("finished")) and not self._controller_lives(name)

    def _settle(self, name: str) -> dict[str, Any]:
        """The job's summary, once its record is brought up to date with reality (see ``upkeep.settle``)."""
        self._require(name)
        try:
            summary = upkeep.settle(self.store, name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None
        if summary is None:
            raise JobNotFoundError(name)  # its TTL had passed: it is gone now
        return summary
