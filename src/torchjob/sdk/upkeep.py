"""Keeping a local job's record true to reality after the fact, and removing a job with all it started.

A local job has no API server watching it: whoever reads it next settles it. A finished job past its TTL
is removed; a job whose controller died without recording an end (machine rebooted, ``kill -9``) has its
leftover processes stopped and is marked Failed with that reason, so no job shows Running forever. Only
processes that ``backends.local.processes`` proves are the job's are ever signalled.
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from typing import Any

import psutil

from torchjob.api.extensions import DEFAULT_TERMINATION_GRACE
from torchjob.backends.local import processes
from torchjob.backends.local.store import DamagedRecord, JobStore, LocalState
from torchjob.core import conditions
from torchjob.core.times import parse_timestamp


def controller_lives(store: JobStore, name: str) -> bool:
    return processes.controller_lock_held(store.controller_lock_path(name))


def settle(store: JobStore, name: str) -> dict[str, Any] | None:
    """The job's summary once its record is up to date; None when its TTL had passed and it was removed.
    Raises FileNotFoundError when the job is not there (deleted meanwhile)."""
    summary = store.read_summary(name)
    if summary.get("finished"):
        expires = summary.get("ttlExpiresAt")
        if expires and datetime.now(timezone.utc) >= parse_timestamp(expires):
            remove_job(store, name)
            return None
        return summary
    state = store.read_state(name)
    if state.controller_pid is None or controller_lives(store, name):
        return summary  # not started yet, or its controller is alive
    _fail_orphan(store, name, state)
    return store.read_summary(name)


def remove_job(store: JobStore, name: str, grace: float = DEFAULT_TERMINATION_GRACE) -> list[str]:
    """Stop the job's controller (which stops its replicas) and whatever it left, then remove its records
    and logs. Returns what could not be removed."""
    try:
        state: LocalState | None = store.read_state(name)
    except (DamagedRecord, FileNotFoundError):
        state = None  # nothing proves which processes were the job's: none is touched
    if state is not None:
        controller = processes.controller(state.controller, store.controller_lock_path(name))
        if controller is not None:
            controller.send_signal(signal.SIGTERM)
            try:
                controller.wait(grace + 5)
            except psutil.TimeoutExpired:
                controller.kill()
        processes.kill_marked(state.job_uid)
    return store.remove(name)


def _fail_orphan(store: JobStore, name: str, state: LocalState) -> None:
    processes.kill_marked(state.job_uid)
    job = store.read_job(name)
    cause = f"its controller (pid {state.controller_pid}) ended without finishing it"
    conditions.fail_job(job.status, job.namespace, job.name, cause, datetime.now(timezone.utc))
    store.write_job(job)
