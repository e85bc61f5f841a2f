"""Running the operator until it is told to stop: alone, or as one of several under leader election."""

from __future__ import annotations

import logging
import os
import resource
import secrets
import socket
import time

import httpx
from lightkube import ApiError, Client

from torchjob.controller.leader import LeaseLock
from torchjob.controller.operator import Operator, OperatorSettings
from torchjob.controller.watching import one_line

log = logging.getLogger("torchjob.operator")


def run_operator(client: Client, settings: OperatorSettings) -> None:
    """Run until SIGTERM/SIGINT (the CLI turns both into KeyboardInterrupt).

    With leader election, wait for the Lease first, then act while renewing it. A leader that cannot renew
    in time exits at once: another replica may hold the Lease by then, and two operators must never act on
    the same jobs (Kubernetes restarts the process, which then stands by).
    """
    _open_files_up_to_the_hard_limit()
    operator = Operator(client, settings)
    election = settings.election
    if election is None:
        operator.start()
        try:
            while True:
                # Short sleeps: SIGTERM may be delivered to another thread, and then the handler runs only once
                # the main thread wakes (a long sleep was seen ignoring SIGTERM for its whole length).
                time.sleep(1)
        finally:
            operator.stop()
        return
    lock = LeaseLock(client, election, settings.identity or _identity())
    operator.serve_health()
    try:
        log.info("waiting to lead: lease %s/%s as %s", election.namespace, election.name, lock.identity)
        while not _renewed(lock):
            time.sleep(election.renew_seconds)
        operator.start()
        renewed_at = time.monotonic()
        while True:
            time.sleep(election.renew_seconds)
            if _renewed(lock):
                renewed_at = time.monotonic()
            elif time.monotonic() - renewed_at > election.renew_deadline_seconds:
                log.error("lost the lease %s/%s: stopping at once", election.namespace, election.name)
                logging.shutdown()
                os._exit(1)
    finally:
        if operator.leading:
            operator.stop()
            lock.release()


def _open_files_up_to_the_hard_limit() -> None:
    """Every Pod's processes keep a connection to the report endpoint: a soft limit of 1,024 open files (a
    container's usual) would be reached by a job of 1,000 Pods. The hard limit is this process's to take (as Go
    programs do at start)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as err:
            log.warning("could not raise the open files limit from %d to %d: %s", soft, wanted, err)
            return
    log.info("open files limit: %d", resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _renewed(lock: LeaseLock) -> bool:
    try:
        return lock.try_acquire_or_renew()
    except (ApiError, httpx.HTTPError, OSError) as err:
        log.warning("lease %s: %s", lock.settings.name, one_line(err))
        return False


def _identity() -> str:
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"
