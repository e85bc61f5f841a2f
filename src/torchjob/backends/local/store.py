"""The local state directory: one folder per job holding its object, its replicas' records and their logs.

Layout under ``$TORCHJOB_HOME`` (default ``~/.torchjob``)::

    jobs/<name>/job.json          the PyTorchJob, with its status, in Kubeflow's wire format
    jobs/<name>/summary.json      what `torchjob list` shows, derived from job.json whenever it is written
    jobs/<name>/local.json        controller pid, ports per attempt, one record per replica process
    jobs/<name>/logs/<attempt>/<replica>.log      (and rendezvous-store.log for an elastic c10d job)
    jobs/<name>/output/           TORCHJOB_OUTPUT_DIR of every replica (models, metrics)
    jobs/<name>/scale.json        a `torchjob scale` request the controller has not applied yet
    jobs/<name>/controller.lock   held by the job's controller while it lives (see processes.ControllerLock)

Every write is atomic (temp file, fsync, rename), so a reader in another shell never sees half a file and a
killed controller never leaves one. ``torchjob list`` reads only the small summaries: listing must not
pay for parsing every job (or importing the model code at all). A file that is damaged all the same (a full
disk, a hand edit) raises ``DamagedRecord`` naming it; a name that is not a DNS-1123 name never reaches
the file system (``BadName``), so nothing outside the state directory is read or removed through one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from torchjob.api.extensions import SPARES
from torchjob.api.names import job_name_problem
from torchjob.api.types import PyTorchJob
from torchjob.backends.local.processes import Identity
from torchjob.core import conditions
from torchjob.core.times import timestamp


class BadName(ValueError):
    """A job name that is not a DNS-1123 name (and so could name a path outside the state directory)."""


class DamagedRecord(Exception):
    """A record file of a job exists but cannot be read as what it should hold."""

    def __init__(self, path: Path, why: str) -> None:
        self.path = path
        super().__init__(f"{path}: damaged ({why})")


class UnusableHome(Exception):
    """The state directory cannot be used (a file, not writable, cannot be created)."""


def torchjob_home() -> Path:
    return Path(os.environ.get("TORCHJOB_HOME") or Path.home() / ".torchjob")


@dataclass
class ProcessRecord:
    """One process of one attempt: a replica, or a helper the backend runs for the attempt."""

    replica: str  # e.g. "worker-1", or the helper's name
    attempt: int
    pid: int
    log_path: str
    status_path: str
    started_at: float
    stopping_since: float | None = None
    # When the backend first saw it gone (its exit reaped, or killed and waited for); None while it is the job's.
    gone_at: float | None = None
    # "replica", or "rendezvous-store" for the c10d store the backend hosts for an elastic attempt.
    role: str = "replica"
    # The kernel's start time of ``pid`` (see processes.Identity); without it the pid is never signalled.
    process_started: float | None = None

    def mark_gone(self) -> None:
        """No longer part of the job: the backend saw it end, or stopped it and waited for it."""
        self.gone_at = self.gone_at or time.time()

    @property
    def gone(self) -> bool:
        return self.gone_at is not None

    @classmethod
    def from_dict(cls, data: Any) -> ProcessRecord:
        if not isinstance(data, dict):
            raise TypeError(f"a process record is an object, not {type(data).__name__}")
        fields = dict(data)
        # A state file of an earlier torchjob also says "removed", and may lack the time it was seen gone.
        if fields.pop("removed", False) and fields.get("gone_at") is None:
            fields["gone_at"] = fields.get("stopping_since") or fields.get("started_at") or 0.0
        return cls(**fields)

    @property
    def identity(self) -> Identity | None:
        return Identity(self.pid, self.process_started) if self.pid > 0 and self.process_started else None


@dataclass
class LocalState:
    """What the local backend must remember about a job besides its object."""

    job_file_dir: str
    # The job's marker (processes.MARKER_ENV): what proves a leftover process is this job's.
    job_uid: str | None = None
    controller_pid: int | None = None
    # The kernel's start time of the controller process (with the pid, its processes.Identity).
    controller_started_at: float | None = None
    ports: dict[str, dict[str, int]] = field(default_factory=dict)  # attempt → {"master": p, "rdzv": p}
    processes: list[ProcessRecord] = field(default_factory=list)
    spares_started: int = 0  # names spares uniquely over the job's life: spare-0, spare-1, ...

    @property
    def controller(self) -> Identity | None:
        if not self.controller_pid or not self.controller_started_at:
            return None
        return Identity(self.controller_pid, self.controller_started_at)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalState:
        processes = [ProcessRecord.from_dict(p) for p in data.pop("processes", [])]
        return cls(**data, processes=processes)


class JobStore:
    """Reads and writes job folders in a state directory."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or torchjob_home()
        self.jobs_dir = self.home / "jobs"

    def check_home(self, create: bool = False) -> None:
        """Raise ``UnusableHome`` when the state directory cannot serve (``create``: for writing)."""
        where = f"state directory {self.home} (TORCHJOB_HOME)"
        if self.home.exists() and not self.home.is_dir():
            raise UnusableHome(f"{where} is not a directory")
        if self.jobs_dir.exists() and not self.jobs_dir.is_dir():
            raise UnusableHome(f"{where}: {self.jobs_dir} is not a directory")
        if self.jobs_dir.is_dir() and not os.access(self.jobs_dir, os.R_OK | os.X_OK):
            raise UnusableHome(f"{where} cannot be read")
        if not create:
            return
        try:
            self.jobs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UnusableHome(f"{where} cannot be created: {err.strerror}") from None
        if not os.access(self.jobs_dir, os.W_OK | os.X_OK):
            raise UnusableHome(f"{where} is not writable")

    def job_dir(self, name: str) -> Path:
        problem = job_name_problem(name)
        if problem:
            raise BadName(problem)
        return self.jobs_dir / name

    def exists(self, name: str) -> bool:
        return self.job_dir(name).is_dir()

    def names(self) -> list[str]:
        """Every job folder's name (a folder whose records are damaged included: it can still be deleted)."""
        self.check_home()
        if not self.jobs_dir.is_dir():
            return []
        return sorted(p.name for p in self.jobs_dir.iterdir() if p.is_dir() and job_name_problem(p.name) is None)

    def controller_lock_path(self, name: str) -> Path:
        return self.job_dir(name) / "controller.lock"

    def create(self, job: PyTorchJob, state: LocalState) -> bool:
        """Record a new job. Its folder appears whole (built aside, then renamed), so a reader never sees a
        half-made job; False when a job of that name exists."""
        self.check_home(create=True)
        directory = self.job_dir(job.name)
        staging = Path(tempfile.mkdtemp(dir=self.jobs_dir, prefix=f".new-{job.name}-"))
        try:
            (staging / "logs").mkdir()
            (staging / "output").mkdir()
            _write_atomic(staging / "local.json", json.dumps(asdict(state), indent=2))
            _write_atomic(staging / "job.json", json.dumps(job.to_wire(), indent=2))
            _write_atomic(staging / "summary.json", json.dumps(summarize(job)))
            os.rename(staging, directory)
        except OSError as err:
            shutil.rmtree(staging, ignore_errors=True)
            if directory.exists():
                return False
            raise UnusableHome(f"state directory {self.home}: cannot record the job: {err.strerror}") from None
        return True

    def read_job_data(self, name: str) -> dict[str, Any]:
        return self._read_object(self.job_dir(name) / "job.json")

    def read_job(self, name: str) -> PyTorchJob:
        path = self.job_dir(name) / "job.json"
        try:
            return PyTorchJob.model_validate(self._read_object(path))
        except pydantic.ValidationError as err:
            raise DamagedRecord(path, f"not a PyTorchJob: {err.errors()[0]['msg']}") from None

    def write_job(self, job: PyTorchJob) -> None:
        _write_atomic(self.job_dir(job.name) / "job.json", json.dumps(job.to_wire(), indent=2))
        _write_atomic(self.job_dir(job.name) / "summary.json", json.dumps(summarize(job)))

    def read_summary(self, name: str) -> dict[str, Any]:
        return self._read_object(self.job_dir(name) / "summary.json")

    def read_state(self, name: str) -> LocalState:
        path = self.job_dir(name) / "local.json"
        data = self._read_object(path)
        try:
            return LocalState.from_dict(data)
        except (TypeError, ValueError) as err:
            raise DamagedRecord(path, f"unexpected content: {err}") from None

    def write_state(self, name: str, state: LocalState) -> None:
        _write_atomic(self.job_dir(name) / "local.json", json.dumps(asdict(state), indent=2))

    def request_scale(self, name: str, workers: int) -> None:
        """Ask the job's controller for a new Worker count. Only the controller writes job.json (it holds
        the status), so a request goes beside it, and the controller applies it on its next pass."""
        _write_atomic(self.job_dir(name) / "scale.json", json.dumps({"workers": workers}))

    def scale_request(self, name: str) -> int | None:
        try:
            workers: int = json.loads((self.job_dir(name) / "scale.json").read_text())["workers"]
            return workers
        except (OSError, ValueError, KeyError):
            return None

    def clear_scale_request(self, name: str) -> None:
        (self.job_dir(name) / "scale.json").unlink(missing_ok=True)

    def log_path(self, name: str, attempt: int, replica: str) -> Path:
        return self.job_dir(name) / "logs" / str(attempt) / f"{replica}.log"

    def output_dir(self, name: str) -> Path:
        return self.job_dir(name) / "output"

    def remove(self, name: str) -> list[str]:
        """Remove the job's folder; returns what could not be removed (empty when all went)."""
        left: list[str] = []

        def note(_function: Any, path: str, exc_info: Any) -> None:
            error = exc_info[1]
            if not isinstance(error, FileNotFoundError):
                left.append(f"{path}: {getattr(error, 'strerror', None) or error}")

        shutil.rmtree(self.job_dir(name), onerror=note)
        return left

    @staticmethod
    def _read_object(path: Path) -> dict[str, Any]:
        """A JSON object from ``path``: FileNotFoundError when absent, DamagedRecord when not a JSON object."""
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise DamagedRecord(path, "not UTF-8 text") from None
        except FileNotFoundError:
            raise
        except OSError as err:
            raise DamagedRecord(path, err.strerror or str(err)) from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DamagedRecord(path, "empty" if not text.strip() else "not valid JSON") from None
        if not isinstance(data, dict):
            raise DamagedRecord(path, f"expected a JSON object, got {type(data).__name__}")
        return data


def summarize(job: PyTorchJob) -> dict[str, Any]:
    """The few facts `torchjob list` shows and the checks it makes on read (TTL, orphaned controller)."""
    from torchjob.core.policies.cleanup import ttl_expiry  # 12 ms: only `list` reads expiries (cli/__init__.py)

    last = job.status.conditions[-1] if job.status.conditions else None
    expiry = ttl_expiry(job, job.status)
    return {
        "name": job.name,
        "state": conditions.state(job.status),
        "finished": conditions.is_finished(job.status),
        "created": job.metadata.creation_timestamp,
        "attempt": job.status.attempt,
        "restarts": job.status.restart_count,
        "progress": job.status.trainer_status.progress_percentage if job.status.trainer_status else None,
        "repairs": job.status.repairs,
        "spares": job.annotation(SPARES),
        "sparesReady": job.status.spares_ready,
        "message": last.message if last else "",
        "ttlExpiresAt": timestamp(expiry) if expiry else None,
    }


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
