"""The shim takes a killed command as ended once the kernel has begun to end it (shim.py's ``dying``), not once
its memory of a GB or more is freed and it can be reaped: what it records and how it ends are as they were."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from torchjob.backends.local import shim

# A command with a GB resident (every page written), which says so and waits to be killed.
LARGE = "import sys, time; held = b'1' * (1 << 30); print('ready', flush=True); time.sleep(600)"


def test_a_large_process_killed_is_seen_dying_with_its_signal_before_it_can_be_reaped() -> None:
    command = subprocess.Popen([sys.executable, "-c", LARGE], stdout=subprocess.PIPE)
    try:
        assert command.stdout is not None and command.stdout.readline() == b"ready\n"
        assert shim.dying(command.pid) == (0, True)  # alive, and large
    finally:
        command.kill()
    seen = set()
    while not os.waitpid(command.pid, os.WNOHANG)[0]:
        seen.add(shim.dying(command.pid)[0])
    # Seen dying (its GB takes the kernel a while to free), always with the signal that ended it.
    assert seen - {0} == {signal.SIGKILL}, seen


def test_a_large_command_killed_under_the_shim_is_recorded_as_killed(tmp_path: Path) -> None:
    status = tmp_path / "replica.exit.json"
    argv = [sys.executable, shim.__file__, str(status), "5", str(os.getpid()), "--", sys.executable, "-c", LARGE]
    supervisor = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    assert supervisor.stdout is not None and supervisor.stdout.readline() == b"ready\n"
    command = json.loads(Path(f"{status}.pid").read_text())["pid"]
    os.kill(command, signal.SIGKILL)
    assert supervisor.wait(timeout=60) == 128 + signal.SIGKILL
    ended = shim.ExitRecord.read(str(status))
    assert ended is not None and (ended.signal, ended.exit_code) == (signal.SIGKILL, None)
    try:  # gone by now, or still being freed: never running on
        flags = int(Path(f"/proc/{command}/stat").read_bytes().rsplit(b")", 1)[1].split()[6])
    except OSError:
        flags = shim.PF_EXITING
    assert flags & shim.PF_EXITING
