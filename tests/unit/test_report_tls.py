"""The report endpoint's TLS: certificates the operator issues from its own CA (when to renew, what they
cover), and the endpoint served over TLS on loopback, called the way a Pod calls it (reporting.py)."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509

from tests.unit.test_report_server import REPORT, Reviewer
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.controller import report_tls
from torchjob.controller.report_server import report_server
from torchjob.reporting import Refused, call_operator

NOW = datetime.datetime(2026, 11, 25, tzinfo=datetime.timezone.utc)
HOSTS = ["127.0.0.1", "torchjob-operator.torchjob-system.svc"]


def test_a_serving_certificate_covers_its_hosts_and_chains_to_the_ca() -> None:
    issued = report_tls.issue(HOSTS, NOW)
    cert = x509.load_pem_x509_certificate(issued.cert.encode())
    ca = x509.load_pem_x509_certificate(issued.ca_cert.encode())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["torchjob-operator.torchjob-system.svc"]
    assert cert.not_valid_after_utc - NOW <= report_tls.SERVING_LIFETIME
    assert not report_tls.renewal_due(issued, HOSTS, NOW)
    assert report_tls.Certificates.from_secret_data(issued.to_secret_data()) == issued


def test_renewal_is_due_for_none_an_old_one_or_other_hosts_and_keeps_the_ca() -> None:
    issued = report_tls.issue(HOSTS, NOW)
    assert report_tls.renewal_due(None, HOSTS, NOW)
    late = NOW + report_tls.SERVING_LIFETIME - report_tls.RENEW_BEFORE + datetime.timedelta(hours=1)
    assert report_tls.renewal_due(issued, HOSTS, late)
    assert not report_tls.renewal_due(issued, HOSTS, late - datetime.timedelta(days=2))
    assert report_tls.renewal_due(issued, [*HOSTS, "10.99.1.1"], NOW)
    renewed = report_tls.issue(HOSTS, late, issued)
    assert renewed.ca_cert == issued.ca_cert and renewed.cert != issued.cert  # running Pods keep trusting it
    assert report_tls.ca_still_good(issued, late)


def test_the_hosts_are_the_urls_and_a_specific_bound_address() -> None:
    assert report_tls.hosts_of("https://op.ns.svc:8443", ("0.0.0.0", 8443)) == ["op.ns.svc"]
    assert report_tls.hosts_of("https://10.99.1.1:9000", ("10.99.1.1", 9000)) == ["10.99.1.1"]
    assert report_tls.hosts_of("https://op.example:1", ("127.0.0.1", 1)) == ["op.example", "127.0.0.1"]


@pytest.fixture
def tls_server() -> Iterator[tuple[ThreadingHTTPServer, str, report_tls.Certificates, ReportBoard]]:
    issued = report_tls.issue(["127.0.0.1"], datetime.datetime.now(datetime.timezone.utc))
    board = ReportBoard()
    server = report_server(board, Reviewer(), ("127.0.0.1", 0), lambda ns, job, news, uid: None)
    report_tls.secure(server, issued)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"https://127.0.0.1:{server.server_address[1]}/reports/team-a/mnist", issued, board
    server.shutdown()


@pytest.fixture
def tls_endpoint(
    tls_server: tuple[ThreadingHTTPServer, str, report_tls.Certificates, ReportBoard],
) -> tuple[str, report_tls.Certificates, ReportBoard]:
    return tls_server[1:]


def test_a_pod_with_the_operators_ca_reports_over_tls(
    tls_endpoint: tuple[str, report_tls.Certificates, ReportBoard], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, issued, board = tls_endpoint
    (tmp_path / "token").write_text("good")
    monkeypatch.setenv("TORCHJOB_REPORT_CA", issued.ca_cert)
    assert call_operator(url, tmp_path / "token", json.loads(REPORT)) == b""
    assert board.latest("uid-1") is not None


def test_a_pod_without_the_ca_or_with_another_one_never_sends_its_token(
    tls_endpoint: tuple[str, report_tls.Certificates, ReportBoard], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, board = tls_endpoint
    (tmp_path / "token").write_text("good")
    monkeypatch.delenv("TORCHJOB_REPORT_CA", raising=False)
    with pytest.raises(ssl.SSLCertVerificationError):
        call_operator(url, tmp_path / "token", json.loads(REPORT))
    monkeypatch.setenv("TORCHJOB_REPORT_CA", report_tls.issue(["127.0.0.1"], NOW).ca_cert)  # a stranger's CA
    with pytest.raises(ssl.SSLCertVerificationError):
        call_operator(url, tmp_path / "token", json.loads(REPORT))
    assert board.latest("uid-1") is None


def test_a_forged_token_over_tls_is_refused(
    tls_endpoint: tuple[str, report_tls.Certificates, ReportBoard], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, issued, board = tls_endpoint
    (tmp_path / "token").write_text("forged")
    monkeypatch.setenv("TORCHJOB_REPORT_CA", issued.ca_cert)
    with pytest.raises(Refused) as refused:
        call_operator(url, tmp_path / "token", json.loads(REPORT))
    assert refused.value.code == 401 and board.latest("uid-1") is None


def _count_handshakes(monkeypatch: pytest.MonkeyPatch) -> list[ssl.SSLSocket]:
    """The server's side of every TLS handshake from now on."""
    handshakes: list[ssl.SSLSocket] = []
    wrapped = ssl.SSLSocket.do_handshake

    def counted(sock: ssl.SSLSocket, block: bool = False) -> None:
        if sock.server_side:
            handshakes.append(sock)
        wrapped(sock, block)

    monkeypatch.setattr(ssl.SSLSocket, "do_handshake", counted)
    return handshakes


def _report_steps(url: str, token: Path, board: ReportBoard, *steps: int) -> int | None:
    """Report each step as a Pod does; the step the board holds after."""
    for step in steps:
        assert call_operator(url, token, {**json.loads(REPORT), "step": step}) == b""
    progress = board.latest("uid-1")
    return progress.step if progress is not None else None


def test_a_pods_reports_share_one_kept_connection_and_a_closed_one_is_replaced(
    tls_endpoint: tuple[str, report_tls.Certificates, ReportBoard], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One TLS handshake per process, not per report; the operator closing an idle connection (its timeout, a
    restart) costs the next report nothing but a new connection."""
    url, issued, board = tls_endpoint
    (tmp_path / "token").write_text("good")
    monkeypatch.setenv("TORCHJOB_REPORT_CA", issued.ca_cert)
    handshakes = _count_handshakes(monkeypatch)
    assert _report_steps(url, tmp_path / "token", board, 3, 4, 5) == 5
    assert len(handshakes) == 1
    handshakes[0].shutdown(socket.SHUT_RDWR)  # the operator's side goes
    assert _report_steps(url, tmp_path / "token", board, 6) == 6
    assert len(handshakes) == 2


def test_a_refused_report_closes_its_connection_and_the_next_one_is_heard(
    tls_endpoint: tuple[str, report_tls.Certificates, ReportBoard], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, issued, board = tls_endpoint
    monkeypatch.setenv("TORCHJOB_REPORT_CA", issued.ca_cert)
    (tmp_path / "token").write_text("good")
    with pytest.raises(Refused) as refused:  # its body unread by the server: the connection must not be reused
        call_operator(url.replace("/reports/", "/nowhere/"), tmp_path / "token", json.loads(REPORT))
    assert refused.value.code == 404
    assert call_operator(url, tmp_path / "token", json.loads(REPORT)) == b""
    assert board.latest("uid-1") is not None


def test_over_its_kept_connections_the_endpoint_closes_each_after_its_answer(
    tls_server: tuple[ThreadingHTTPServer, str, report_tls.Certificates, ReportBoard],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept connections hold a file descriptor each: past its share, the endpoint still takes every report, on a
    connection of its own."""
    server, url, issued, board = tls_server
    server.keep_at_most = 0  # type: ignore[attr-defined]
    (tmp_path / "token").write_text("good")
    monkeypatch.setenv("TORCHJOB_REPORT_CA", issued.ca_cert)
    handshakes = _count_handshakes(monkeypatch)
    assert _report_steps(url, tmp_path / "token", board, 3, 4, 5) == 5
    assert len(handshakes) == 3
