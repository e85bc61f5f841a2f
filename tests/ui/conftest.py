"""The dashboard served by ``torchjob ui`` as a user runs it, driven by a real headless browser: Debian's
chromium through Playwright (tools/browser-build.sh installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.hookimpl(tryfirst=True)  # before xdist's hook reads the marker (see tests/node/conftest.py)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/ui/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group("browser"))  # one browser per run


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run tools/bootstrap --test-servers", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


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
