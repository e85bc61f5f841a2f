"""The local state directory: one folder per job holding its object, its replicas' records and their logs.

Layout under ``$TORCHJOB_HOME`` (default ``~/.torchjob``)::

    jobs/<name>/job.json          the PyTorchJob, with its status, in Kubeflow's wire format
    jobs/<name>/summary.json      what `torchjob list` shows, derived from job.json whenever it is written
    jobs/<name>/local.json        controller pid, ports per attempt, one record per replica process
    jobs/<name>/logs/<attempt>/<replica>.log      (and rendezvous-store.log for an elastic c10d job)
    jobs/<name>/output/           TORCHJOB_OUTPUT_DIR of every replica (models, metrics)
    jobs/<name>/scale.json        a `torchjob scale` request the controller has not applied yet

Every write is atomic (temp file, fsync, rename), so a reader in another shell never sees half a file and a
killed controller never leaves one. ``torchjob list`` reads only the small summaries: listing must not
pay for parsing every job (or importing the model code at all).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchjob.api.types import PyTorchJob


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
    removed: bool = False
    # "replica", or "rendezvous-store" for the c10d store the backend hosts for an elastic attempt.
    role: str = "replica"


@dataclass
class LocalState:
    """What the local backend must remember about a job besides its object."""

    job_file_dir: str
    controller_pid: int | None = None
    controller_started_at: float | None = None
    ports: dict[str, dict[str, int]] = field(default_factory=dict)  # attempt → {"master": p, "rdzv": p}
    processes: list[ProcessRecord] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalState:
        processes = [ProcessRecord(**p) for p in data.pop("processes", [])]
        return cls(**data, processes=processes)


class JobStore:
    """Reads and writes job folders in a state directory."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or torchjob_home()
        self.jobs_dir = self.home / "jobs"

    def job_dir(self, name: str) -> Path:
        return self.jobs_dir / name

    def exists(self, name: str) -> bool:
        return (self.job_dir(name) / "job.json").exists()

    def names(self) -> list[str]:
        if not self.jobs_dir.is_dir():
            return []
        return sorted(p.name for p in self.jobs_dir.iterdir() if (p / "job.json").exists())

    def create(self, job: PyTorchJob, state: LocalState) -> None:
        directory = self.job_dir(job.name)
        (directory / "logs").mkdir(parents=True, exist_ok=True)
        (directory / "output").mkdir(exist_ok=True)
        self.write_state(job.name, state)
        self.write_job(job)

    def read_job_data(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.job_dir(name) / "job.json").read_text())
        return data

    def read_job(self, name: str) -> PyTorchJob:
        from torchjob.api.types import PyTorchJob

        return PyTorchJob.model_validate(self.read_job_data(name))

    def write_job(self, job: PyTorchJob) -> None:
        _write_atomic(self.job_dir(job.name) / "job.json", json.dumps(job.to_wire(), indent=2))
        _write_atomic(self.job_dir(job.name) / "summary.json", json.dumps(summarize(job)))

    def read_summary(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.job_dir(name) / "summary.json").read_text())
        return data

    def read_state(self, name: str) -> LocalState:
        return LocalState.from_dict(json.loads((self.job_dir(name) / "local.json").read_text()))

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

    def remove(self, name: str) -> None:
        shutil.rmtree(self.job_dir(name), ignore_errors=True)


def summarize(job: PyTorchJob) -> dict[str, Any]:
    """The few facts `torchjob list` shows and the checks it makes on read (TTL, orphaned controller)."""
    from torchjob.core import conditions
    from torchjob.core.policies.cleanup import ttl_expiry
    from torchjob.core.times import timestamp

    last = job.status.conditions[-1] if job.status.conditions else None
    expiry = ttl_expiry(job, job.status)
    return {
        "name": job.name,
        "state": conditions.state(job.status),
        "finished": conditions.is_finished(job.status),
        "created": job.metadata.creation_timestamp,
        "attempt": job.status.attempt,
        "restarts": job.status.restart_count,
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
