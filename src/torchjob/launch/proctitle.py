"""A warm-started process shows its own command line (``ps``, ``pgrep -f``, ``/proc/PID/cmdline``).

A forked process keeps its parent's command line: the kernel reads it from the argv strings at the top of the
process's stack (``arg_start``..``arg_end`` in ``/proc/self/stat``). Moving that area needs CAP_SYS_RESOURCE;
writing inside it needs nothing. So the warm interpreter is started with a long blank argument that reserves
room (``RESERVED``), and each process forked from it writes its own argv there, NUL-separated as exec would,
padding the rest with NULs. A longer command line is cut at the reserved size. The environment area is left as
it is: it still carries the job's marker (processes.py), which proves the process is the job's.
"""

from __future__ import annotations

import contextlib
import ctypes

# Room for a forked process's command line, in bytes.
RESERVED = 8192


def reservation() -> str:
    """The argument that reserves the room, passed when the warm interpreter is started."""
    return " " * RESERVED


def set_command_line(argv: list[str]) -> bool:
    """Make this process's command line ``argv``; False where it cannot (then it keeps the one it had)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # Fields 48 and 49 of stat(5), counted from the state field (3) after the command name.
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
        size = end - start
        if size <= 1:
            return False
        text = b"\0".join(arg.encode("utf-8", "surrogateescape") for arg in argv)[: size - 1]
        ctypes.memmove(start, text.ljust(size, b"\0"), size)
        return True
    return False
