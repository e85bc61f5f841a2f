"""``python -m bench.ui [JOBS] [TRIALS]``: the dashboard's job list with many jobs (1,000 by default).

Measured in one run over the same TORCHJOB_HOME of JOBS recorded jobs:
- the anchor, ``torchjob list`` (the CLI reading the same records);
- ``GET /`` of ``torchjob ui``: time to the first byte, and to the whole page;
- in Debian's chromium (Playwright): from navigation to a table with every job's row rendered.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright
from tests.support.dashboard import CHROMIUM, Dashboard

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


def measure(jobs: int = 1000, trials: int = 5) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as directory:
        home = Path(directory)
        _record_jobs(home, jobs)
        cli = [_cli_list(home) for _ in range(trials)]
        served = Dashboard(home)
        try:
            pages = [_page(served.url + "/") for _ in range(trials)]
            rendered = []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page()
                for _ in range(trials):
                    started = time.perf_counter()
                    page.goto(served.url + "/")
                    page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length === {jobs}")
                    rendered.append(time.perf_counter() - started)
                browser.close()
        finally:
            served.stop()
    return {
        "cli_list": statistics.median(cli),
        "first_byte": statistics.median(p[0] for p in pages),
        "whole_page": statistics.median(p[1] for p in pages),
        "rendered": statistics.median(rendered),
    }


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    found = measure(jobs, trials)
    print(f"| {jobs} jobs, median of {trials} | seconds | ratio to `torchjob list` |")
    print("|---|---|---|")
    print(f"| anchor: `torchjob list` (CLI, same records) | {found['cli_list']:.2f} | 1.00 |")
    for key, label in (
        ("first_byte", "`torchjob ui`: GET / → first byte"),
        ("whole_page", "`torchjob ui`: GET / → whole page"),
        ("rendered", "chromium: navigation → table with every row"),
    ):
        print(f"| {label} | {found[key]:.2f} | {found[key] / found['cli_list']:.2f} |")


if __name__ == "__main__":
    main()
