"""The dashboard as a stranger sees it, through real HTTP: a request that names a host the dashboard does not
answer to gets nothing (DNS rebinding), and a page of another site cannot make it act, even with the token."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.dashboard import Dashboard


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    dashboard = Dashboard(tmp_path_factory.mktemp("guard-home"), "--allow-actions", "--allow-host", "board.internal")
    yield dashboard
    dashboard.stop()


def token(dashboard: Dashboard) -> str:
    return next(line.split("token ")[1].strip() for line in dashboard.lines if "token " in line)


def ask(dashboard: Dashboard, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """One request with exactly these headers (Host included: http.client sends the one given)."""
    address = urlsplit(dashboard.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        answer = connection.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        connection.close()


def port(dashboard: Dashboard) -> int:
    return urlsplit(dashboard.url).port or 0


HOSTILE_HOSTS = [
    "attacker.example",
    "attacker.example:{port}",
    "127.0.0.1.attacker.example:{port}",
    "localhost.attacker.example:{port}",
    "evil.localhost:{port}",
    "127.0.0.2:{port}",
    "0.0.0.0:{port}",
    "",
    "localhost@attacker.example",
    "[::ffff:127.0.0.1]:{port}",
    "board.internal.attacker.example",
]


@pytest.mark.parametrize("host", HOSTILE_HOSTS)
@pytest.mark.parametrize("path", ["/", "/api/jobs", "/api/jobs/any/logs?replica=worker-0"])
def test_a_request_naming_a_host_the_dashboard_does_not_answer_to_gets_nothing(
    served: Dashboard, host: str, path: str
) -> None:
    status, body = ask(served, "GET", path, {"Host": host.format(port=port(served))})
    assert status == 400 and "Invalid host header" in body


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "LOCALHOST:{port}", "board.internal"])
def test_loopback_the_bound_address_and_an_allowed_host_are_answered(served: Dashboard, host: str) -> None:
    status, body = ask(served, "GET", "/api/jobs", {"Host": host.format(port=port(served))})
    assert status == 200 and json.loads(body) == []


HOSTILE_ORIGINS = [
    "http://attacker.example",
    "null",
    "http://localhost.attacker.example",
    "https://127.0.0.1.attacker.example",
    "http://attacker.example:{port}",
    "file://",
    "chrome-extension://abcdefghijklmnop",
    "http://127.0.0.1.nip.io:{port}",
]


@pytest.mark.parametrize("origin", HOSTILE_ORIGINS)
@pytest.mark.parametrize("action", ["/api/jobs/victim/delete", "/api/jobs/victim/scale?workers=1"])
def test_a_page_of_another_site_cannot_act_even_with_the_token(served: Dashboard, origin: str, action: str) -> None:
    headers = {
        "Host": f"127.0.0.1:{port(served)}",
        "Origin": origin.format(port=port(served)),
        "Authorization": f"Bearer {token(served)}",
        "Content-Length": "0",
    }
    status, body = ask(served, "POST", action, headers)
    assert status == 403 and "may not act on this dashboard" in json.loads(body)["error"]


def test_the_dashboards_own_page_and_a_script_reach_the_token_check(served: Dashboard) -> None:
    """Past the guard, the token and the job decide: an unknown job is 404, a missing token 403."""
    own = f"http://127.0.0.1:{port(served)}"
    base = {"Host": f"127.0.0.1:{port(served)}", "Content-Length": "0"}
    bearer = {"Authorization": f"Bearer {token(served)}"}
    assert ask(served, "POST", "/api/jobs/nosuch/delete", {**base, **bearer, "Origin": own})[0] == 404
    assert ask(served, "POST", "/api/jobs/nosuch/delete", {**base, **bearer})[0] == 404  # no Origin: curl
    status, body = ask(served, "POST", "/api/jobs/nosuch/delete", {**base, "Origin": own})
    assert status == 403 and "token" in json.loads(body)["error"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a*b.example", "a wildcard may only lead"),
        ("*example.org", "a wildcard may only lead"),
        ("", "expected a host name or address"),
        ("host/path", "expected a host name or address"),
        (" spaced", "expected a host name or address"),
    ],
)
def test_a_bad_allow_host_is_refused_in_one_line(tmp_path: Path, value: str, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", "ui", "--port", "0", "--allow-host", value],
        capture_output=True,
        text=True,
        timeout=60,
        env={"TORCHJOB_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
