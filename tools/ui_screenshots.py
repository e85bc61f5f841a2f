"""Regenerate the README's dashboard screenshots (docs/ui-*.png): `.venv/bin/python -m tools.ui_screenshots`.

Runs the README's MNIST job, SIGKILLs worker-1's trainer once it is in epoch 3 (a group restart from the
checkpoint), runs the in-place job beside it, and photographs the job list and the MNIST job's page.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.sync_api import sync_playwright
from tests.support.dashboard import CHROMIUM, Dashboard

from torchjob.sdk.local_client import LocalClient

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHJOB_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "torchjob.cli.main", *args], env=env, text=True, capture_output=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ui-shots-") as directory:
        home = Path(directory)
        _cli(home, "run", str(ROOT / "examples" / "mnist" / "job-inplace.yaml"), "--detach")
        _cli(home, "run", str(ROOT / "examples" / "mnist" / "job.yaml"), "--detach")
        log = home / "jobs" / "mnist" / "logs" / "0" / "worker-1.log"
        while not (log.exists() and "epoch: 3/" in log.read_text()):
            time.sleep(0.2)
        state = json.loads((home / "jobs" / "mnist" / "local.json").read_text())
        shim = next(p["pid"] for p in state["processes"] if p["replica"] == "worker-1")
        psutil.Process(shim).children()[0].send_signal(signal.SIGKILL)
        served = Dashboard(home)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                client = LocalClient(home)
                while client.state("mnist") not in ("Succeeded", "Failed"):  # the restarted group trains to its end
                    time.sleep(0.5)
                page.goto(served.url + "/")
                page.wait_for_timeout(2500)
                page.screenshot(path=str(DOCS / "ui-jobs.png"), clip={"x": 0, "y": 0, "width": 1280, "height": 200})
                page.goto(served.url + "/jobs/mnist")
                page.wait_for_timeout(4000)
                page.screenshot(path=str(DOCS / "ui-job.png"), full_page=True)
                browser.close()
        finally:
            served.stop()
            _cli(home, "delete", "mnist")
            _cli(home, "delete", "mnist-inplace")


if __name__ == "__main__":
    main()
