"""The dashboard's job list with 1,000 jobs (``python -m bench --only dashboard``).

Measured in one run over the same TORCHJOB_HOME of 1,000 recorded jobs:
- the anchor, ``torchjob list`` (the CLI reading the same records);
- ``GET /`` of ``torchjob ui``: time to the first byte, and to the whole page;
- in Debian's chromium (Playwright): from navigation to a table with every job's row rendered.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright
from tests.support.dashboard import CHROMIUM, Dashboard

from bench.records import Run
from torchjob.sdk.local_client import LocalClient
from torchjob.testing import make_job


def _record_jobs(home: Path, count: int) -> None:
    client = LocalClient(home)
    for i in range(count):
        job = make_job(f"job-{i:04d}").master().workers(2).command("python", "-c", "pass").build()
        client.create(job, home)


def _cli_list(home: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", "list"],
        env={"TORCHJOB_HOME": str(home), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def _page(url: str) -> tuple[float, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        answer.read(1)
        first = time.perf_counter() - started
        answer.read()
    return first, time.perf_counter() - started


def record(run: Run, trials: int, jobs: int = 1000) -> None:
    """Each trial: the CLI's list (the anchor), the page fetched, and the page rendered in chromium, in turn."""
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as directory:
        home = Path(directory)
        _record_jobs(home, jobs)
        served = Dashboard(home)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page()
                for _ in range(trials):
                    run.keep("cli list", _cli_list(home))
                    first, whole = _page(served.url + "/")
                    run.keep("first byte", first)
                    run.keep("whole page", whole)
                    started = time.perf_counter()
                    page.goto(served.url + "/")
                    page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length === {jobs}")
                    run.keep("rendered", time.perf_counter() - started)
                browser.close()
        finally:
            served.stop()
