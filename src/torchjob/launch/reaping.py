"""Collecting a warm interpreter's finished children, without blocking: the local zygote's shims, a Pod launcher's
trainer and the orphans that, as a container's first process, it inherits."""

from __future__ import annotations

import os


def reap_finished() -> dict[int, int]:
    """Every child that has ended since the last call, by pid: its exit code, or 128+N when signal N ended it."""
    ended: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        code = os.waitstatus_to_exitcode(status)
        ended[pid] = 128 - code if code < 0 else code
