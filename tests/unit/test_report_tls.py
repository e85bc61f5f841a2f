"""The report endpoint's TLS: certificates the operator issues from its own CA (when to renew, what they
cover), and the endpoint served over TLS on loopback, called the way a Pod calls it (reporting.py)."""

from __future__ import annotations

import datetime
import json
import ssl
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.unit.test_report_server import REPORT, Reviewer
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.controller import report_tls
from torchjob.controller.report_server import report_server
from torchjob.reporting import call_operator

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
def tls_endpoint() -> Iterator[tuple[str, report_tls.Certificates, ReportBoard]]:
    issued = report_tls.issue(["127.0.0.1"], datetime.datetime.now(datetime.timezone.utc))
    board = ReportBoard()
    server = report_server(board, Reviewer(), ("127.0.0.1", 0), lambda ns, job, news: None)
    report_tls.secure(server, issued)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/reports/team-a/mnist", issued, board
    server.shutdown()


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
    with pytest.raises(urllib.error.URLError) as no_ca:
        call_operator(url, tmp_path / "token", json.loads(REPORT))
    assert isinstance(no_ca.value.reason, ssl.SSLCertVerificationError)
    monkeypatch.setenv("TORCHJOB_REPORT_CA", report_tls.issue(["127.0.0.1"], NOW).ca_cert)  # a stranger's CA
    with pytest.raises(urllib.error.URLError) as other_ca:
        call_operator(url, tmp_path / "token", json.loads(REPORT))
    assert isinstance(other_ca.value.reason, ssl.SSLCertVerificationError)
    assert board.latest("uid-1") is None


def test_a_forged_token_over_tls_is_refused(
    tls_endpoint: tuple[str, report_tls.Certificates, ReportBoard], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, issued, board = tls_endpoint
    (tmp_path / "token").write_text("forged")
    monkeypatch.setenv("TORCHJOB_REPORT_CA", issued.ca_cert)
    with pytest.raises(urllib.error.HTTPError) as refused:
        call_operator(url, tmp_path / "token", json.loads(REPORT))
    assert refused.value.code == 401 and board.latest("uid-1") is None
