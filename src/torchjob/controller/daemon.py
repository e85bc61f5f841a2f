"""Entry point of a detached controller (``torchjob run --detach``): ``python -m torchjob.controller.daemon NAME``.

It supervises one job from the state directory in ``$TORCHJOB_HOME`` and writes what happens to
``controller.log`` in the job's folder (its stdout, set up by whoever started it).
"""

from __future__ import annotations

import os
import subprocess
import sys

from torchjob.backends.local.store import JobStore
from torchjob.controller.local_driver import Interrupted, supervise
from torchjob.core.actions import Event


def start_detached(store: JobStore, name: str) -> int:
    """Start this module for job ``name`` in a session of its own, its output in the job's ``controller.log``;
    returns its pid."""
    log = open(store.job_dir(name) / "controller.log", "ab")  # noqa: SIM115 - handed to the child
    with log:
        process = subprocess.Popen(
            [sys.executable, "-m", "torchjob.controller.daemon", name],
            env={**os.environ, "TORCHJOB_HOME": str(store.home)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process.pid


def main(argv: list[str]) -> int:
    name = argv[0]

    def log_event(event: Event) -> None:
        print(f"{event.type} {event.reason}: {event.message}", flush=True)

    try:
        supervise(JobStore(), name, on_event=log_event)
    except Interrupted as interrupted:
        print(f"stopped by {interrupted}", flush=True)
        return 128 + interrupted.signum
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
