"""``torchjob ui`` as a user runs it (a subprocess on a free port), and the browser that drives it: Debian's
chromium (tools/browser-build.sh installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Dashboard:
    """``torchjob ui --port 0`` over one TORCHJOB_HOME, as a subprocess."""

    def __init__(self, home: Path, *args: str) -> None:
        env = {**os.environ, "TORCHJOB_HOME": str(home)}
        argv = [sys.executable, "-m", "torchjob.cli.main", "ui", "--port", "0", *args]
        self.process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        assert self.process.stderr is not None
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            found = re.search(r"dashboard at (http://\S+)", line)
            if found:
                self.url = found.group(1).rstrip("/")
                return
        self.process.kill()
        raise AssertionError(f"torchjob ui did not start: {''.join(self.lines)}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
