"""The operator's report endpoint over real HTTP on loopback, with a stand-in for the API server's review."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from torchjob import worker_files
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.token_review import PodIdentity, ReviewUnavailable
from torchjob.controller.report_server import report_server
from torchjob.core.reported import MemberAnnouncement

POD = PodIdentity("team-a", "mnist-worker-0", "uid-1")


@dataclass
class Reviewer:
    """Knows one token: the one issued to POD; cannot review "busy" now (the API server throttles)."""

    asked: list[str] = field(default_factory=list)

    def review(self, token: str) -> PodIdentity | None:
        self.asked.append(token)
        if token == "busy":
            raise ReviewUnavailable("the API server could not review a report token: throttled")
        return POD if token == "good" else None


@dataclass
class Endpoint:
    url: str
    board: ReportBoard
    woken: list[tuple[str, str, bool]]

    def post(self, path: str, body: bytes, token: str | None = "good") -> int:
        return self.answer(path, body, token)[0]

    def answer(self, path: str, body: bytes, token: str | None = "good") -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as err:
            return err.code, b""


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    board, woken = ReportBoard(), []
    server = report_server(
        board, Reviewer(), ("127.0.0.1", 0), lambda ns, job, news, uid: woken.append((ns, job, news))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Endpoint(f"http://127.0.0.1:{server.server_address[1]}", board, woken)
    server.shutdown()


REPORT = json.dumps({"step": 12, "time": 1.0, "total_steps": 100, "loss": 0.5}).encode()


def test_a_pods_report_is_filed_under_the_pod_the_token_names(endpoint: Endpoint) -> None:
    assert endpoint.post("/reports/team-a/mnist", REPORT) == 204
    progress = endpoint.board.latest("uid-1")
    assert progress is not None and (progress.step, progress.total_steps, progress.loss) == (12, 100, 0.5)
    assert endpoint.woken == [("team-a", "mnist", False)]  # progress: looked at within the interval


@pytest.mark.parametrize(
    ("path", "body", "token", "code"),
    [
        ("/reports/team-a/mnist", REPORT, None, 401),  # no token
        ("/reports/team-a/mnist", REPORT, "forged", 401),  # a token the API server does not vouch for
        ("/reports/team-a/mnist", REPORT, "busy", 503),  # it cannot say now: the next beat asks again
        ("/reports/team-b/mnist", REPORT, "good", 401),  # a Pod of team-a cannot report into team-b
        ("/reports/team-a/mnist", b"not json", "good", 400),
        ("/reports/team-a/mnist", b'{"step": "12"}', "good", 400),
        ("/reports/team-a/mnist", b'{"step": 1, "pad": "' + b"x" * 5000 + b'"}', "good", 413),
        ("/elsewhere", REPORT, "good", 404),
    ],
)
def test_anything_else_is_refused_and_files_nothing(
    endpoint: Endpoint, path: str, body: bytes, token: str | None, code: int
) -> None:
    assert endpoint.post(path, body, token) == code
    assert endpoint.board.latest("uid-1") is None and endpoint.woken == []


def test_in_place_repairs_channel_announcements_in_and_the_membership_out(endpoint: Endpoint) -> None:
    assert not endpoint.board.announced("uid-1", 2)
    announcement = b'{"attempt": 2, "key": "worker-0-0", "every": 0.2}'
    assert endpoint.answer("/announcements/team-a/mnist", announcement) == (200, b"{}\n")  # no membership yet
    assert endpoint.board.announced("uid-1", 2) and not endpoint.board.announced("uid-1", 1)
    assert endpoint.post("/announcements/team-a/mnist", b'{"attempt": "2"}') == 400
    # The same again is a beat, not news; a step that waits on a peer is news, looked at at once.
    assert endpoint.post("/announcements/team-a/mnist", announcement) == 200
    # A member's word that its step waits in generation 3: dated by the operator's own clock.
    assert endpoint.post("/announcements/team-a/mnist", b'{"attempt": 2, "every": 0.2, "waiting": 3}') == 200
    assert [news for *_, news in endpoint.woken] == [True, False, True]
    said = endpoint.board.announcement("uid-1", 2)
    assert said is not None and (said.every, said.waiting_in) == (0.2, 3)
    assert (datetime.now(timezone.utc) - said.heard_at).total_seconds() < 60

    def get(path: str, token: str = "good") -> tuple[int, object]:
        request = urllib.request.Request(endpoint.url + path, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return int(answer.status), json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, None

    assert get("/membership/team-a/mnist") == (200, {})  # no repair yet
    body = {"attempt": 2, "generation": 1, "members": ["master-0", "worker-0"], "joined": ["worker-0"]}
    endpoint.board.publish_membership("team-a", "mnist", body, "job-uid-1")  # type: ignore[arg-type]
    assert get("/membership/team-a/mnist") == (200, body)
    # A member's announcement is answered with it: one request for both.
    assert json.loads(endpoint.answer("/announcements/team-a/mnist", announcement)[1]) == body
    assert get("/membership/team-b/mnist")[0] == 401 and get("/membership/team-a/mnist", token="forged")[0] == 401
    endpoint.board.forget_other_jobs_membership("team-a", "mnist", "job-uid-1")  # the same job: kept
    assert get("/membership/team-a/mnist") == (200, body)
    # The job deleted and created again under its name: the new one's Pods must not read the old group.
    endpoint.board.forget_other_jobs_membership("team-a", "mnist", "job-uid-2")
    assert get("/membership/team-a/mnist") == (200, {})


def test_a_member_on_notice_of_eviction_is_told_once_a_pass_that_began_after_its_notice_ended(
    endpoint: Endpoint,
) -> None:
    """Its hold (torchjob.train.eviction) lasts until then: a newer membership published by that pass, or none."""
    notice = b'{"attempt": 0, "every": 0.15, "notice": true}'
    passed_before = datetime.now(timezone.utc)  # a pass under way when the notice came
    assert endpoint.answer("/announcements/team-a/mnist", notice) == (200, b"{}\n")
    assert endpoint.answer("/announcements/team-a/mnist", notice) == (200, b"{}\n")  # heard again: no news
    assert [news for *_, news in endpoint.woken] == [True, False]  # the job is looked at at once
    endpoint.board.notices.looked_at("team-a", "mnist", passed_before)
    endpoint.board.notices.looked_at("team-a", "other-job", datetime.now(timezone.utc))
    assert json.loads(endpoint.answer("/announcements/team-a/mnist", notice)[1]) == {}  # not yet looked at
    body = {"attempt": 0, "generation": 1, "members": ["master-0", "worker-1"]}
    endpoint.board.publish_membership("team-a", "mnist", body, "job-uid-1")  # type: ignore[arg-type]
    endpoint.board.notices.looked_at("team-a", "mnist", datetime.now(timezone.utc))  # the pass that published it
    answered = json.loads(endpoint.answer("/announcements/team-a/mnist", notice)[1])
    assert answered == {**body, "noticeConsidered": True}
    assert not endpoint.board.notices.considered("uid-2")


def test_a_report_of_the_same_step_proves_the_pod_alive_but_not_progress() -> None:
    board, first = ReportBoard(), datetime(2026, 11, 24, tzinfo=timezone.utc)
    board.put(POD, {"step": 12}, now=first)
    board.put(POD, {"step": 12}, now=first + timedelta(seconds=9))
    progress = board.latest("uid-1")
    assert progress is not None and (progress.at, progress.alive_at) == (first, first + timedelta(seconds=9))
    board.put(POD, {"step": 13}, now=first + timedelta(seconds=10))
    progress = board.latest("uid-1")
    assert progress is not None and progress.at == progress.alive_at == first + timedelta(seconds=10)


def test_a_pod_is_exiting_once_every_process_it_reported_from_said_so() -> None:
    """Its last words end a process's reports; a Pod of two processes whose first said them still has the other's
    silence to be judged by (it may be the frozen one), until that one says them too."""
    board, at = ReportBoard(), datetime(2026, 12, 6, tzinfo=timezone.utc)
    board.put(POD, {"step": 60, "process": "a"}, now=at)
    board.put(POD, {"step": 60, "process": "b"}, now=at)
    board.put(POD, {"step": 60, "process": "a", "exiting": True}, now=at + timedelta(seconds=1))
    assert (progress := board.latest(POD.uid)) is not None and not progress.exiting
    board.put(POD, {"step": 60, "process": "b", "exiting": True}, now=at + timedelta(seconds=2))
    assert (progress := board.latest(POD.uid)) is not None and progress.exiting
    # A report that names no process (an older torchjob) says it for the Pod.
    other = PodIdentity("team-a", "mnist-worker-1", "uid-2")
    board.put(other, {"step": 60, "exiting": True}, now=at)
    assert (progress := board.latest(other.uid)) is not None and progress.exiting


def test_an_announcement_after_a_silence_is_news() -> None:
    board, start = ReportBoard(), datetime(2026, 11, 25, tzinfo=timezone.utc)
    assert board.announce(POD, MemberAnnouncement(0, start, every=0.15, waiting_in=2))  # heard first
    assert not board.announce(POD, MemberAnnouncement(0, start + timedelta(seconds=0.15), every=0.15, waiting_in=2))
    assert not board.announce(POD, MemberAnnouncement(0, start + timedelta(seconds=1.85), every=0.15, waiting_in=2))
    # Silent past its allowance (twice the 1.7 s it was once late): a verdict may have waited for it, look again.
    assert board.announce(POD, MemberAnnouncement(0, start + timedelta(seconds=5.3), every=0.15, waiting_in=2))
    said = board.announcement("uid-1", 0)  # the board keeps how late the member has been heard
    assert said is not None and said.longest_gap == 3.45


def test_announcements_of_pods_long_gone_are_forgotten_as_new_pods_come() -> None:
    board, start = ReportBoard(), datetime(2026, 11, 25, tzinfo=timezone.utc)
    board.announce(POD, MemberAnnouncement(attempt=0, heard_at=start))
    later = start + timedelta(hours=2)
    for number in range(300):
        board.announce(PodIdentity("team-a", f"pod-{number}", f"uid-new-{number}"), MemberAnnouncement(0, later))
    assert board.announcement("uid-1", 0) is None  # silent for two hours: gone
    assert board.announcement("uid-new-0", 0) is not None and board.announcement("uid-new-299", 0) is not None


def test_reports_of_pods_long_gone_are_forgotten_as_new_pods_come_and_the_rest_are_kept() -> None:
    board, start = ReportBoard(), datetime(2026, 11, 25, tzinfo=timezone.utc)
    board.put(POD, {"step": 1}, now=start)
    later = start + timedelta(hours=2)
    for number in range(255):
        board.put(PodIdentity("team-a", f"pod-{number}", f"uid-new-{number}"), {"step": 1}, now=later)
    assert board.latest("uid-1") is None  # silent for two hours: gone when the 256th Pod came
    for step in range(2, 600):  # a board of 256 Pods, reported to again and again: each report is kept
        board.put(PodIdentity("team-a", "pod-7", "uid-new-7"), {"step": step}, now=later)
    progress = board.latest("uid-new-7")
    assert progress is not None and progress.step == 599 and board.latest("uid-new-0") is not None


LEAVING = """
import json, sys, time
from pathlib import Path
from torchjob.reporting import Reporter
reporter = Reporter(sys.argv[1], Path(sys.argv[2]))
while True:
    if reporter.send({"step": 3, "time": time.time()}):
        print("took", flush=True)
    time.sleep(0.05)
"""


def test_the_processes_of_a_broken_group_are_ordered_out_and_their_launchers_next_ones_are_not(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("good")
    command = [sys.executable, "-c", LEAVING, f"{endpoint.url}/reports/team-a/mnist", str(token)]
    survivor = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert survivor.stdout is not None and survivor.stdout.readline() == "took\n"  # heard: its process is known
        why = "worker-2 was lost with its node, and no reset reaches this group's collectives"
        assert endpoint.board.order_leave("uid-1", why) == 1
        _, err = survivor.communicate(timeout=30)
    finally:
        survivor.kill()
    assert survivor.returncode == worker_files.LEAVE_EXIT_CODE, err
    assert f"torchjob: {why}: this process leaves its group" in err
    # The process its launcher starts next names itself anew: it is not ordered out.
    restarted = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert restarted.stdout is not None
        assert [restarted.stdout.readline() for _ in range(3)] == ["took\n"] * 3
        assert restarted.poll() is None
    finally:
        restarted.kill()
        restarted.wait()
    # Only a report that names an ordered process is answered with the order.
    assert endpoint.answer("/reports/team-a/mnist", REPORT) == (204, b"")
