"""A process bound to its parent's life (``torchjob.parent_death``) ends when that parent is SIGKILLed, and is told
when its parent died before it asked (nothing would ever signal it then): real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.local_runs import alive
from tests.support.waits import wait_until

# The child: binds itself to the pid it is given, says whether that is still its parent, then waits to be ended.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    from torchjob import parent_death
    expected = int(sys.argv[1])
    while sys.argv[2] == "after" and os.getppid() == expected:
        time.sleep(0.01)  # until the parent is gone: the request then comes too late
    print(os.getpid(), parent_death.die_with_parent(expected), flush=True)
    time.sleep(60)
    """
)
# The parent: starts the child bound to itself, passes its line on, then waits (to be killed) or leaves at once.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]], stdout=sys.stdout)
    if sys.argv[2] == "before":
        time.sleep(60)
    """
)


def _start(when: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    said = tmp_path / "said"
    with said.open("wb") as out:
        parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, when], stdout=out)
    wait_until(lambda: said.read_text().strip() != "", timeout=60, what="the child's line")
    return parent, said


def test_a_bound_process_is_killed_when_its_parent_is(tmp_path: Path) -> None:
    parent, said = _start("before", tmp_path)
    pid, bound = said.read_text().split()
    try:
        assert bound == "True"  # its parent was the one it expected
        assert alive(int(pid))
        parent.kill()
        parent.wait()
        wait_until(lambda: not alive(int(pid)), timeout=10, what="the bound child to end with its parent")
    finally:
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


def test_a_process_whose_parent_died_before_it_asked_is_told(tmp_path: Path) -> None:
    parent, said = _start("after", tmp_path)
    parent.wait()
    pid, bound = said.read_text().split()
    try:
        assert bound == "False"  # the caller ends itself then (the shim, the warm interpreter, a local rank)
    finally:
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)
