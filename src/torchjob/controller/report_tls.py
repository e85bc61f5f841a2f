"""TLS for the report endpoint, as Kubeflow Trainer's status server does it: the operator makes a CA and a
serving certificate, keeps them in a Secret (so every replica of the operator serves the same one, and a
restarted operator keeps it), renews the serving certificate before it expires, and gives the CA to the Pods
it creates (``TORCHJOB_REPORT_CA``), which verify the endpoint with it and with nothing else.

The CA lives ten years and signs a serving certificate of 90 days, renewed with 30 left: a running Pod's CA
stays good across renewals. Pure functions decide (``renewal_due``, ``issue``); ``ensure`` does the I/O.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import logging
import os
import socketserver
import ssl
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

log = logging.getLogger("torchjob.operator")

CA_LIFETIME = datetime.timedelta(days=3650)
SERVING_LIFETIME = datetime.timedelta(days=90)
RENEW_BEFORE = datetime.timedelta(days=30)
DEFAULT_SECRET = ("torchjob-system", "torchjob-report-tls")


@dataclass(frozen=True)
class Certificates:
    """PEM text of the CA (certificate and key) and of the serving certificate and its key."""

    ca_cert: str
    ca_key: str
    cert: str
    key: str

    def to_secret_data(self) -> dict[str, str]:
        pems = {"ca.crt": self.ca_cert, "ca.key": self.ca_key, "tls.crt": self.cert, "tls.key": self.key}
        return {k: base64.b64encode(v.encode()).decode() for k, v in pems.items()}

    @classmethod
    def from_secret_data(cls, data: dict[str, str] | None) -> Certificates | None:
        found = {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}
        if not all(k in found for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")):
            return None
        return cls(found["ca.crt"], found["ca.key"], found["tls.crt"], found["tls.key"])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _signed(
    subject: str,
    public: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
    )


def issue(hosts: list[str], now: datetime.datetime, ca: Certificates | None = None) -> Certificates:
    """A serving certificate for ``hosts`` (names or addresses), signed by ``ca``'s CA, or by a new CA."""
    if ca is None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "torchjob report CA")])
        builder = _signed("torchjob report CA", ca_key.public_key(), name, ca_key, now, CA_LIFETIME)
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        ca_pem, ca_key_pem = (
            builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode(),
            _pem_key(ca_key),
        )
    else:
        ca_pem, ca_key_pem = ca.ca_cert, ca.ca_key
    ca_cert = x509.load_pem_x509_certificate(ca_pem.encode())
    signer = serialization.load_pem_private_key(ca_key_pem.encode(), None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    serving = (
        _signed(hosts[0], key.public_key(), ca_cert.subject, signer, now, SERVING_LIFETIME)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(signer, hashes.SHA256())
    )
    return Certificates(ca_pem, ca_key_pem, serving.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(key))


def renewal_due(found: Certificates | None, hosts: list[str], now: datetime.datetime) -> bool:
    """Whether the serving certificate must be (re)issued: none, too close to its end, or not for ``hosts``."""
    if found is None:
        return True
    cert = x509.load_pem_x509_certificate(found.cert.encode())
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return True
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    covered = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    covered |= {str(a) for a in names.get_values_for_type(x509.IPAddress)}
    return not set(hosts) <= covered


def ca_still_good(found: Certificates, now: datetime.datetime) -> bool:
    ca = x509.load_pem_x509_certificate(found.ca_cert.encode())
    return ca.not_valid_after_utc - now > SERVING_LIFETIME


def ensure(client: Client, secret: tuple[str, str], hosts: list[str]) -> Certificates:
    """The certificates kept in ``secret`` (namespace, name), issued or renewed first when due. Replicas that
    race to create it agree on whichever was stored first."""
    namespace, name = secret
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        stored = client.get(Secret, name, namespace=namespace)
    except ApiError as err:
        if err.status.code != 404:
            raise
        stored = None
    found = Certificates.from_secret_data(stored.data if stored else None)
    if not renewal_due(found, hosts, now):
        assert found is not None
        return found
    fresh = issue(hosts, now, found if found is not None and ca_still_good(found, now) else None)
    version = stored.metadata.resourceVersion if stored is not None and stored.metadata is not None else None
    labels = {"app.kubernetes.io/managed-by": "torchjob"}
    body = Secret(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels, resourceVersion=version),
        type="Opaque",
        data=fresh.to_secret_data(),
    )
    try:
        if stored is None:
            client.create(body)
        else:
            client.replace(body)  # with the version read: a replica that renewed meanwhile wins (409)
    except ApiError as err:
        if err.status.code != 409:
            raise
        return ensure(client, secret, hosts)  # another replica stored its own first: serve that one
    log.info("report endpoint: certificate for %s issued, valid until %s", ", ".join(hosts), now + SERVING_LIFETIME)
    return fresh


def server_context(found: Certificates, context: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """A server-side TLS context serving ``found`` (load again into ``context`` to renew a running server)."""
    context = context or ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory() as folder:  # ssl reads a chain from files only
        cert, key = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        with open(cert, "w") as f:
            f.write(found.cert)
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(found.key)
        context.load_cert_chain(cert, key)
    return context


def hosts_of(url: str, address: tuple[str, int]) -> list[str]:
    """The names a serving certificate must cover: the URL's host, and the bound address unless a wildcard."""
    hosts = [urlsplit(url).hostname or address[0]]
    with contextlib.suppress(ValueError):
        if not ipaddress.ip_address(address[0]).is_unspecified:
            hosts.append(address[0])
    return list(dict.fromkeys(hosts))


def secure(server: socketserver.TCPServer, found: Certificates) -> ssl.SSLContext:
    """Serve TLS on ``server``'s socket with ``found``. The handshake happens in each request's thread (see
    ``report_server``), so a client that never completes one holds no other caller up."""
    context = server_context(found)
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return context


def keep_renewed(
    client: Client,
    secret: tuple[str, str],
    hosts: list[str],
    served: Certificates,
    context: ssl.SSLContext,
    on_new: Callable[[Certificates], None],
    stopping: threading.Event,
    every: float = 3600.0,
) -> None:
    """Check the Secret every ``every`` seconds (``served``: what the server serves now); load a renewed
    certificate into the running server's context (new handshakes use it) and tell ``on_new`` (new Pods get
    its CA)."""
    while not stopping.wait(every):
        try:
            current = ensure(client, secret, hosts)
        except ApiError as err:
            log.warning("report endpoint: cannot renew its certificate: %s", err.status.message)
            continue
        if current != served:
            server_context(current, context)
            on_new(current)
            served = current
