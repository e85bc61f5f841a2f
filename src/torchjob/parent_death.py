"""A process that dies with its parent: the kernel signals it when the parent ends (Linux's ``PR_SET_PDEATHSIG``).

What torchjob starts beneath another process (a replica's shim under the controller, the warm interpreter under
the controller, a replica's further local ranks under its first) asks for this first, so that nothing it started
outlives the process that could still stop it. The request binds to the parent of the moment: a parent that died
before it took effect is never signalled for, so the caller checks that its parent is still the one it expects.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send this process ``sig`` when its parent dies; whether that parent is still ``parent``
    (False: it died first, and this process should end now). Where there is no ``prctl`` (not Linux), only the
    check is made: the starter's own clean-up still applies there."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    return os.getppid() == parent
