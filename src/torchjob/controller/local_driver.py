"""Supervising a job on the local backend from this process, until it ends or is interrupted.

Ctrl-C, SIGTERM or SIGHUP stop every replica (SIGTERM to each process group, SIGKILL after the grace
period), record the job as Failed with the signal in the message, and re-raise as ``Interrupted``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from types import FrameType
from typing import Protocol

from torchjob.api.types import PyTorchJob
from torchjob.backends.base import Backend
from torchjob.backends.local import processes
from torchjob.backends.local.backend import LocalBackend
from torchjob.backends.local.processes import ControllerLock
from torchjob.backends.local.store import JobStore
from torchjob.controller.clock import Clock, SystemClock
from torchjob.controller.loop import PassResult, reconcile_once
from torchjob.core import conditions
from torchjob.core.actions import Event

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What `torchjob scale` sends a job's controller: look at the job again now, not at the next timeout.
WAKE_SIGNAL = signal.SIGUSR1


class AlreadySupervised(Exception):
    """Another live controller already supervises the job."""

    def __init__(self, name: str) -> None:
        super().__init__(f"job {name!r} is already supervised by another torchjob controller")


class Interrupted(Exception):
    """The controller was told to stop by a signal; the job's replicas have been stopped."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def supervise(
    store: JobStore,
    name: str,
    on_event: Callable[[Event], None] | None = None,
    on_pass: Callable[[PassResult], None] | None = None,
) -> PyTorchJob | None:
    """Run job ``name`` to its end. Returns the finished job, or None when its TTL removed it."""
    lock = ControllerLock(store.controller_lock_path(name))
    if not lock.acquire():
        raise AlreadySupervised(name)
    backend: LocalBackend | None = None
    try:
        job = store.read_job(name)
        backend = LocalBackend(store, job, on_event=on_event)
        me = processes.identify(os.getpid())
        backend.state.controller_pid = os.getpid()
        backend.state.controller_started_at = me.started if me else None
        store.write_state(name, backend.state)
        try:
            with _signals_raise_interrupted(), _woken_by(WAKE_SIGNAL, backend):
                job = run_until_done(job, backend, on_pass=on_pass)
        except Interrupted as interrupted:
            with _signals_ignored():
                backend.stop_everything()
                job = store.read_job(name)
                _record_interruption(job, interrupted.signum)
                store.write_job(job)
            raise
    finally:
        if backend is not None:
            backend.close()
        lock.release()
    if backend.deleted:
        # The TTL can pass while a replica of the finished job (or its store, or a spare) is still exiting,
        # writing its exit record: stop and reap everything first, or the removal races with those writes.
        backend.stop_everything()
        store.remove(name)
        return None
    return job


class SelfDriven(Backend, Protocol):
    """A backend that drives its own loop (the local one; the operator is woken by watches instead)."""

    def refresh(self, job: PyTorchJob) -> PyTorchJob:
        """The job with changes asked for since the last pass (a pending `torchjob scale`)."""
        ...

    def wait(self, until: datetime | None) -> None:
        """Block until something about the replicas may have changed, or until ``until``."""
        ...


def run_until_done(
    job: PyTorchJob,
    backend: SelfDriven,
    clock: Clock | None = None,
    on_pass: Callable[[PassResult], None] | None = None,
) -> PyTorchJob:
    """Reconcile until the job has finished and none of its replicas is still live."""
    clock = clock or SystemClock()
    while True:
        result = reconcile_once(backend.refresh(job), backend, clock)
        job = result.job
        if on_pass is not None:
            on_pass(result)
        if result.done:
            return job
        # A finished job waits only for its replicas to go, not for its TTL (that is enforced on read).
        backend.wait(None if conditions.is_finished(job.status) else result.requeue_at)


def _record_interruption(job: PyTorchJob, signum: int) -> None:
    if conditions.is_finished(job.status):
        return
    cause = f"it was interrupted ({signal.Signals(signum).name}); every replica was stopped"
    conditions.fail_job(job.status, job.namespace, job.name, cause, SystemClock().now())


@contextmanager
def _signals_raise_interrupted() -> Iterator[None]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def _woken_by(signum: int, backend: LocalBackend) -> Iterator[None]:
    """Make ``signum`` wake the backend's wait: the signal module writes a byte to a pipe it selects on."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous_handler = signal.signal(signum, lambda *_: None)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    backend.wake_fd = read_end
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signum, previous_handler)
        backend.wake_fd = None
        os.close(read_end)
        os.close(write_end)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
