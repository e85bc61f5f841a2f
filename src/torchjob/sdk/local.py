"""``LocalClient``: jobs run as processes on this machine, their records in the local state directory.

Works from any shell, after the fact: everything it reads is on disk. A job whose controller died without
recording an end (machine rebooted, ``kill -9``) is found out on read: its leftover processes are stopped
and it is marked Failed with the reason, so no job shows Running forever.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchjob.backends.local.store import JobStore, LocalState
from torchjob.core.times import parse_timestamp
from torchjob.sdk.errors import JobExistsError, JobNotFoundError, SdkError

if TYPE_CHECKING:
    import psutil

    from torchjob.api.types import PyTorchJob
    from torchjob.controller.loop import PassResult
    from torchjob.core.actions import Event

# Model, planner and controller code is imported inside the methods that need it: `torchjob list` and
# `torchjob get` read plain JSON and must start fast (a few tens of milliseconds, not half a second).


@dataclass(frozen=True)
class JobSummary:
    name: str
    state: str
    age_seconds: float
    attempt: int
    restarts: int
    message: str


class LocalClient:
    def __init__(self, home: Path | None = None) -> None:
        self.store = JobStore(home)

    # -- submitting -----------------------------------------------------------------------------------

    def load(self, path: str | Path) -> PyTorchJob:
        """Load and validate a job file, including what it needs to run locally."""
        from torchjob.api.errors import ValidationError
        from torchjob.api.loading import load_job_file
        from torchjob.backends.local import mapping

        job = load_job_file(path)
        problems = mapping.local_problems(job)
        if problems:
            raise ValidationError(problems)
        return job

    def create(self, job: PyTorchJob, job_file_dir: str | Path, replace: bool = False) -> PyTorchJob:
        """Record a new job (not yet started). ``replace`` deletes a finished job of the same name first."""
        from torchjob.core.times import timestamp

        if self.store.exists(job.name):
            if not replace:
                raise JobExistsError(job.name, self._summary(job.name).get("state", ""))
            self.delete(job.name)
        job = job.model_copy(deep=True)
        job.metadata.creation_timestamp = timestamp(datetime.now(timezone.utc))
        self.store.create(job, LocalState(job_file_dir=str(Path(job_file_dir).resolve())))
        return job

    def run(
        self,
        name: str,
        on_event: Callable[[Event], None] | None = None,
        on_pass: Callable[[PassResult], None] | None = None,
    ) -> PyTorchJob | None:
        """Supervise a created job in this process until it ends (raises ``Interrupted`` on a signal)."""
        from torchjob.controller.local import supervise

        return supervise(self.store, name, on_event=on_event, on_pass=on_pass)

    def start_detached(self, name: str) -> int:
        """Start a controller for a created job in the background; returns its pid."""
        log = open(self.store.job_dir(name) / "controller.log", "ab")  # noqa: SIM115 - handed to the child
        with log:
            process = subprocess.Popen(
                [sys.executable, "-m", "torchjob.controller.daemon", name],
                env={**os.environ, "TORCHJOB_HOME": str(self.store.home)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return process.pid

    # -- reading --------------------------------------------------------------------------------------

    def get(self, name: str) -> PyTorchJob:
        """The job with its status, as a typed object."""
        from torchjob.api.types import PyTorchJob

        return PyTorchJob.model_validate(self.get_wire(name))

    def get_wire(self, name: str) -> dict[str, Any]:
        """The job with its status, in Kubeflow's wire format (what ``torchjob get -o json`` prints)."""
        self._settle(name)
        try:
            return self.store.read_job_data(name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None

    def list(self) -> list[JobSummary]:
        summaries = []
        now = datetime.now(timezone.utc)
        for name in self.store.names():
            try:
                summary = self._settle(name)
            except (JobNotFoundError, OSError, ValueError):
                continue  # removed meanwhile (TTL, delete from another shell), or being written
            created = summary.get("created")
            age = (now - parse_timestamp(created)).total_seconds() if created else 0.0
            summaries.append(
                JobSummary(
                    name=name,
                    state=summary.get("state", ""),
                    age_seconds=age,
                    attempt=summary.get("attempt", 0),
                    restarts=summary.get("restarts", 0),
                    message=summary.get("message", ""),
                )
            )
        return summaries

    def state(self, name: str) -> LocalState:
        try:
            return self.store.read_state(name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None

    def log_files(self, name: str, attempt: int | None = None) -> dict[str, Path]:
        """Replica name → log file, for one attempt (default: the current one)."""
        if not self.store.exists(name):
            raise JobNotFoundError(name)
        attempt = int(self._summary(name).get("attempt", 0)) if attempt is None else attempt
        folder = self.store.job_dir(name) / "logs" / str(attempt)
        if not folder.is_dir():
            # The current attempt may not have started yet (being restarted): show the previous one.
            earlier = sorted((int(p.name) for p in folder.parent.glob("*") if p.name.isdigit()), reverse=True)
            folder = folder.parent / str(earlier[0]) if earlier else folder
        return {p.stem: p for p in sorted(folder.glob("*.log"))}

    def logs(self, name: str, replica: str | None = None, attempt: int | None = None) -> str:
        files = self.log_files(name, attempt)
        if replica is not None and replica not in files:
            raise SdkError(f"job {name!r} has no replica {replica!r}; it has {', '.join(files) or 'none yet'}")
        chosen = {replica: files[replica]} if replica else files
        out = []
        for rname, path in chosen.items():
            text = path.read_text(errors="replace")
            out += [line if replica else f"[{rname}] {line}" for line in text.splitlines()]
        return "\n".join(out)

    def follow(self, name: str, replica: str | None = None, poll: float = 0.2) -> Iterator[tuple[str, str]]:
        """Yield (replica, line) as replicas write, across attempts, until the job ends and is idle."""
        follower = LogFollower(self.store.job_dir(name) / "logs", replica)
        while True:
            yield from follower.poll()
            if not self.store.exists(name) or self._is_over(name):
                yield from follower.poll(final=True)
                return
            time.sleep(poll)

    def metrics(self, name: str) -> dict[int, builtins.list[dict[str, Any]]]:
        """Rank → its step records, from the JSONL files torchjob.train writes into the job's output."""
        if not self.store.exists(name):
            raise JobNotFoundError(name)
        found: dict[int, builtins.list[dict[str, Any]]] = {}
        for path in sorted((self.store.output_dir(name) / "metrics").glob("rank-*.jsonl")):
            rank = int(path.stem.removeprefix("rank-"))
            with open(path) as f:
                # A line being written as we read is simply not complete yet.
                found[rank] = [json.loads(line) for line in f if line.endswith("\n")]
        return found

    def wait(self, name: str, timeout: float | None = None, poll: float = 0.2) -> PyTorchJob:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._is_over(name):
                return self.get(name)
            if deadline is not None and time.monotonic() > deadline:
                raise SdkError(f"job {name!r} did not finish within {timeout}s")
            time.sleep(poll)

    # -- scaling --------------------------------------------------------------------------------------

    def scale(self, name: str, workers: int) -> None:
        """Ask a running elastic job for ``workers`` Workers; its controller applies it within a pass."""
        from torchjob.controller.local import WAKE_SIGNAL
        from torchjob.core.policies.elastic import scale_problem

        self._settle(name)
        problem = scale_problem(self.get(name), workers)
        if problem:
            raise SdkError(problem)
        state = self.state(name)
        controller = _live_process(state.controller_pid, state.controller_started_at)
        if controller is None:
            raise SdkError(f"job {name!r} has no running controller to apply the change")
        self.store.request_scale(name, workers)
        controller.send_signal(WAKE_SIGNAL)

    # -- deleting -------------------------------------------------------------------------------------

    def delete(self, name: str, grace: float = 10.0) -> None:
        """Stop a running job's controller (which stops its replicas), then remove its records and logs."""
        if not self.store.exists(name):
            raise JobNotFoundError(name)
        import psutil

        state = self.state(name)
        controller = _live_process(state.controller_pid, state.controller_started_at)
        if controller is not None:
            controller.send_signal(signal.SIGTERM)
            try:
                controller.wait(grace + 5)
            except psutil.TimeoutExpired:
                controller.kill()
        self._kill_leftovers(state)
        self.store.remove(name)

    # -- internals ------------------------------------------------------------------------------------

    def _summary(self, name: str) -> dict[str, Any]:
        try:
            return self.store.read_summary(name)
        except FileNotFoundError:
            raise JobNotFoundError(name) from None

    def _is_over(self, name: str) -> bool:
        """Finished and its controller gone (so every replica has been dealt with)."""
        try:
            summary = self._settle(name)
            state = self.state(name)
        except JobNotFoundError:
            return True  # deleted, or removed by its TTL
        return bool(summary.get("finished")) and (
            _live_process(state.controller_pid, state.controller_started_at) is None
        )

    def _settle(self, name: str) -> dict[str, Any]:
        """Bring a record up to date with reality: an expired job goes (TTL), an orphaned one fails.
        Returns the job's summary as it is afterwards."""
        if not self.store.exists(name):
            raise JobNotFoundError(name)
        summary = self._summary(name)
        if summary.get("finished"):
            expires = summary.get("ttlExpiresAt")
            if expires and datetime.now(timezone.utc) >= parse_timestamp(expires):
                self.delete(name)
                raise JobNotFoundError(name)
            return summary
        state = self.state(name)
        if state.controller_pid is None or _live_process(state.controller_pid, state.controller_started_at):
            return summary  # not started yet, or its controller is alive
        self._fail_orphan(name, state)
        return self._summary(name)

    def _fail_orphan(self, name: str, state: LocalState) -> None:
        from torchjob.core import conditions

        self._kill_leftovers(state)
        job = self.store.read_job(name)
        now = datetime.now(timezone.utc)
        message = (
            f"PyTorchJob {job.namespace}/{job.name} has failed because its controller "
            f"(pid {state.controller_pid}) ended without finishing it"
        )
        conditions.mark_failed(job.status, message, now)
        self.store.write_job(job)

    def _kill_leftovers(self, state: LocalState) -> None:
        """SIGKILL every process still in a replica's process group (the shim may be gone, its child not)."""
        import psutil

        groups = {r.pid: r.started_at for r in state.processes if r.pid and not r.removed}
        if not groups:
            return
        for process in psutil.process_iter(["create_time"]):
            try:
                started = groups.get(os.getpgid(process.pid))
            except (ProcessLookupError, PermissionError):
                continue
            # Group ids are pids, and pids get reused: only what started after the replica is ours.
            if started is not None and process.info["create_time"] >= started - 2.0:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()


class LogFollower:
    """Reads new complete lines from every replica log of every attempt, in the order they appear.

    Cheap enough to poll while training runs: files stay open between polls, and the folder is listed
    again only every ``rescan_seconds`` (new attempts and replicas appear rarely).
    """

    def __init__(self, logs_dir: Path, replica: str | None = None, rescan_seconds: float = 1.0) -> None:
        self.logs_dir = logs_dir
        self.replica = replica
        self.rescan_seconds = rescan_seconds
        self._files: dict[Path, Any] = {}
        self._partial: dict[Path, bytes] = {}
        self._scanned_at = 0.0

    def poll(self, final: bool = False) -> Iterator[tuple[str, str]]:
        now = time.monotonic()
        if final or now - self._scanned_at >= self.rescan_seconds:
            self._scan()
            self._scanned_at = now
        for path, handle in self._files.items():
            data = handle.read()
            if not data and not (final and self._partial.get(path)):
                continue
            data = self._partial.pop(path, b"") + data
            lines = data.split(b"\n")
            rest = lines.pop()
            if rest and not final:
                self._partial[path] = rest
            elif rest:
                lines.append(rest)
            attempt = int(path.parent.name)
            label = path.stem if attempt == 0 else f"{path.stem}#{attempt}"
            for line in lines:
                yield label, line.decode("utf-8", errors="replace")
        if final:
            self.close()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def _scan(self) -> None:
        if not self.logs_dir.is_dir():
            return
        found = sorted(self.logs_dir.glob("*/*.log"), key=lambda p: (int(p.parent.name), p.stem))
        for path in found:
            if path in self._files or (self.replica and path.stem != self.replica):
                continue
            try:
                self._files[path] = open(path, "rb")  # noqa: SIM115 - kept open across polls
            except OSError:
                continue
        # Keep attempt/replica order stable as files are added.
        self._files = dict(sorted(self._files.items(), key=lambda kv: (int(kv[0].parent.name), kv[0].stem)))


def _live_process(pid: int | None, started_at: float | None) -> psutil.Process | None:
    """The process with this pid if it is still the one we started (pids get reused)."""
    if not pid:
        return None
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if started_at is not None and process.create_time() > started_at + 2.0:
            return None
        return process
    except psutil.NoSuchProcess:
        return None
