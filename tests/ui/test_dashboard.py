"""The dashboard in a real browser: the job list, a job whose attempts (one failed, one succeeded) are both on
its timeline, per-rank charts with points, and a log that grows while the job runs. Plus what it refuses."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.support.cli import run_cli
from tests.support.dashboard import Dashboard
from tests.support.local_runs import job_file
from tests.support.paths import INTEGRATION_SCRIPTS
from tests.support.waits import wait_until
from torchjob.testing import make_job


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failed-then-succeeded job, finished, and a training job still running (detached)."""
    home = tmp_path_factory.mktemp("ui-home")
    restarted = (
        make_job("restarted")
        .workers(1)
        .command("python", str(INTEGRATION_SCRIPTS / "worker.py"), "--act", "worker-0:0:exit:3")
        .restart_policy("OnFailure")
    )
    done = run_cli("run", str(job_file(home, restarted)), home=home)
    assert done.returncode == 0, done.stderr[-2000:]
    script = str(INTEGRATION_SCRIPTS / "hang_train.py")
    training = make_job("training").master().workers(1).command("python", script, "--steps", "1500", "--log-every", "9")
    started = run_cli("run", str(job_file(home, training)), "--detach", home=home)
    assert started.returncode == 0, started.stderr[-2000:]
    metrics = home / "jobs" / "training" / "output" / "metrics" / "rank-1.jsonl"
    wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5, timeout=180, what="training")
    return home


@pytest.fixture(scope="module")
def dashboard(home: Path) -> Iterator[Dashboard]:
    served = Dashboard(home)
    yield served
    served.stop()
    run_cli("delete", "training", home=home)


def test_the_job_list_shows_every_job_with_its_state(browser: Browser, dashboard: Dashboard) -> None:
    page = browser.new_page()
    page.goto(dashboard.url + "/")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator('tr[data-name="restarted"] .state')).to_have_text("Succeeded")
    expect(page.locator('tr[data-name="training"] .state')).to_have_text("Running")
    expect(page.locator('tr[data-name="restarted"] td').nth(5)).to_have_text("1")  # one restart
    page.locator('tr[data-name="restarted"] a').click()
    expect(page).to_have_url(dashboard.url + "/jobs/restarted")  # a link that can be shared


def test_a_restarted_job_shows_both_attempts_on_its_timeline(browser: Browser, dashboard: Dashboard) -> None:
    page = browser.new_page()
    page.goto(dashboard.url + "/jobs/restarted")
    expect(page.locator("#timeline g.trace.bars")).to_have_count(2)
    names = page.evaluate("document.getElementById('timeline').data.map((t) => [t.name, t.hovertext[0]])")
    assert names[0][0] == "attempt 0" and "worker-0 exited with code 3" in names[0][1], names
    assert names[1] == ["attempt 1", "succeeded"], names
    expect(page.locator("#state")).to_have_text("Succeeded")
    expect(page.locator("#counts")).to_contain_text("1 restart(s)")


def test_the_charts_have_points_and_the_log_grows_while_the_job_runs(browser: Browser, dashboard: Dashboard) -> None:
    page = browser.new_page()
    page.goto(dashboard.url + "/jobs/training")
    points = page.locator("#loss g.trace.scatter g.points path")
    expect(points.first).to_be_visible(timeout=15_000)
    assert page.evaluate("document.getElementById('loss').data.length") == 2  # one curve per rank
    assert points.count() >= 5
    log = page.locator("#log")
    expect(log).to_contain_text("rank 0: step", timeout=15_000)
    before = len(log.inner_text())
    wait_until(lambda: len(log.inner_text()) > before, timeout=30, what="the log to grow")
    page.locator('button.replica[data-replica="worker-0"]').click()
    expect(log).to_contain_text("rank 1: step", timeout=15_000)


def test_no_write_action_without_its_token_and_unknown_jobs_are_404(dashboard: Dashboard, home: Path) -> None:
    request = urllib.request.Request(dashboard.url + "/api/jobs/restarted/delete", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
    assert (home / "jobs" / "restarted").exists()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(dashboard.url + "/api/jobs/nosuch", timeout=5)
    assert missing.value.code == 404 and "not found" in json.loads(missing.value.read())["error"]


def test_with_actions_allowed_the_printed_token_deletes_a_job(home: Path) -> None:
    served = Dashboard(home, "--allow-actions")
    try:
        token = next(line.split("token ")[1].strip() for line in served.lines if "token " in line)
        wrong = urllib.request.Request(
            served.url + "/api/jobs/restarted/delete", method="POST", headers={"Authorization": "Bearer nope"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(wrong, timeout=5)
        assert refused.value.code == 403
        right = urllib.request.Request(
            served.url + "/api/jobs/restarted/delete", method="POST", headers={"Authorization": f"Bearer {token}"}
        )
        bearer = {"Authorization": f"Bearer {token}"}
        scale_url = served.url + "/api/jobs/restarted/scale?workers=3"
        scale = urllib.request.Request(scale_url, method="POST", headers=bearer)
        with pytest.raises(urllib.error.HTTPError) as fixed_size:  # the SDK's own refusal, as one line
            urllib.request.urlopen(scale, timeout=30)
        assert fixed_size.value.code == 400 and "elastic" in json.loads(fixed_size.value.read())["error"]
        with urllib.request.urlopen(right, timeout=30) as answer:
            assert json.loads(answer.read()) == {"deleted": "restarted"}
        deadline = time.monotonic() + 10
        while (home / "jobs" / "restarted").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (home / "jobs" / "restarted").exists()
    finally:
        served.stop()
