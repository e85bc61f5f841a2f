"""The operator's report endpoint over real HTTP on loopback, with a stand-in for the API server's review."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from torchjob.backends.kubernetes.report_board import PodIdentity, ReportBoard
from torchjob.controller.report_server import report_server

POD = PodIdentity("team-a", "mnist-worker-0", "uid-1")


@dataclass
class Reviewer:
    """Knows one token: the one issued to POD."""

    asked: list[str] = field(default_factory=list)

    def review(self, token: str) -> PodIdentity | None:
        self.asked.append(token)
        return POD if token == "good" else None


@dataclass
class Endpoint:
    url: str
    board: ReportBoard
    woken: list[tuple[str, str]]

    def post(self, path: str, body: bytes, token: str | None = "good") -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as err:
            return err.code


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    board, woken = ReportBoard(), []
    server = report_server(board, Reviewer(), ("127.0.0.1", 0), lambda ns, job: woken.append((ns, job)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Endpoint(f"http://127.0.0.1:{server.server_address[1]}", board, woken)
    server.shutdown()


REPORT = json.dumps({"step": 12, "time": 1.0, "total_steps": 100, "loss": 0.5}).encode()


def test_a_pods_report_is_filed_under_the_pod_the_token_names(endpoint: Endpoint) -> None:
    assert endpoint.post("/reports/team-a/mnist", REPORT) == 204
    progress = endpoint.board.latest("uid-1")
    assert progress is not None and (progress.step, progress.total_steps, progress.loss) == (12, 100, 0.5)
    assert endpoint.woken == [("team-a", "mnist")]


@pytest.mark.parametrize(
    ("path", "body", "token", "code"),
    [
        ("/reports/team-a/mnist", REPORT, None, 401),  # no token
        ("/reports/team-a/mnist", REPORT, "forged", 401),  # a token the API server does not vouch for
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
    assert endpoint.post("/announcements/team-a/mnist", b'{"attempt": 2, "key": "worker-0-0"}') == 204
    assert endpoint.board.announced("uid-1", 2) and not endpoint.board.announced("uid-1", 1)
    assert endpoint.post("/announcements/team-a/mnist", b'{"attempt": "2"}') == 400
    # A member's beat, and its word that its step waits in generation 3: dated by the operator's own clock.
    assert endpoint.post("/announcements/team-a/mnist", b'{"attempt": 2, "every": 1.0, "waiting": 3}') == 204
    said = endpoint.board.announcement("uid-1", 2)
    assert said is not None and (said.every, said.waiting_in) == (1.0, 3)
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
    assert get("/membership/team-b/mnist")[0] == 401 and get("/membership/team-a/mnist", token="forged")[0] == 401
    endpoint.board.forget_other_jobs_membership("team-a", "mnist", "job-uid-1")  # the same job: kept
    assert get("/membership/team-a/mnist") == (200, body)
    # The job deleted and created again under its name: the new one's Pods must not read the old group.
    endpoint.board.forget_other_jobs_membership("team-a", "mnist", "job-uid-2")
    assert get("/membership/team-a/mnist") == (200, {})


def test_a_report_of_the_same_step_proves_the_pod_alive_but_not_progress() -> None:
    board, first = ReportBoard(), datetime(2026, 11, 24, tzinfo=timezone.utc)
    board.put(POD, {"step": 12}, now=first)
    board.put(POD, {"step": 12}, now=first + timedelta(seconds=9))
    progress = board.latest("uid-1")
    assert progress is not None and (progress.at, progress.alive_at) == (first, first + timedelta(seconds=9))
    board.put(POD, {"step": 13}, now=first + timedelta(seconds=10))
    progress = board.latest("uid-1")
    assert progress is not None and progress.at == progress.alive_at == first + timedelta(seconds=10)
