"""The cluster's certificates and kubeconfigs: a CA, serving and client certificates signed by it, the
service-account key, and kubeconfig files for a certificate or a bearer token."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
CONTEXT = "torchjob-test"  # the kubeconfig's cluster and context name (clients and CoreDNS name it)
VALIDITY = datetime.timedelta(days=30)


def _write_key(directory: Path, name: str, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (directory / f"{name}.key").write_bytes(pem)


def _window(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + VALIDITY)


def create_ca(directory: Path, common_name: str = "torchjob-test-ca") -> None:
    """``ca.crt``/``ca.key``: a new self-signed CA in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    ca = (
        _window(builder.serial_number(x509.random_serial_number()))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_key(directory, "ca", key)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))


def issue_certificate(
    directory: Path, name: str, common_name: str, orgs: tuple[str, ...] = (), server_ips: tuple[str, ...] = ()
) -> None:
    """Write ``NAME.crt``/``NAME.key`` signed by the CA in ``directory``: a client certificate, or with
    ``server_ips`` a serving one for those addresses and the API server's names."""
    ca = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    builder = _window(
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
    )
    if server_ips:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in (*SERVER_NAMES, SERVER_NAMES[-1] + ".cluster.local")]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    _write_key(directory, name, key)
    certificate = builder.sign(ca_key, hashes.SHA256())
    (directory / f"{name}.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def control_plane_certificates(directory: Path, address: str) -> None:
    """A CA, the API server's serving cert, client certs per component, and the service-account key."""
    create_ca(directory)
    server_ips = tuple(sorted({"127.0.0.1", "10.0.0.1", address}))
    issue_certificate(directory, "apiserver", "kube-apiserver", server_ips=server_ips)
    issue_certificate(directory, "kwok-server", "kwok-server", server_ips=server_ips)
    issue_certificate(directory, "admin", "kubernetes-admin", ("system:masters",))
    issue_certificate(directory, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
    issue_certificate(directory, "controller-manager", "system:kube-controller-manager")
    issue_certificate(directory, "scheduler", "system:kube-scheduler")
    issue_certificate(directory, "kwok", "kwok-controller", ("system:masters",))
    sa = ec.generate_private_key(ec.SECP256R1())
    _write_key(directory, "sa", sa)
    (directory / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _kubeconfig(user: str, server: str, ca: Path, credentials: dict[str, str]) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": _b64(ca.read_bytes())}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
    }
    return json.dumps(config, indent=2)  # JSON is YAML


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(directory: Path, name: str, server: str) -> Path:
    """``NAME.kubeconfig`` for the client certificate ``NAME.crt``/``NAME.key`` in ``directory``."""
    credentials = {
        "client-certificate-data": _b64((directory / f"{name}.crt").read_bytes()),
        "client-key-data": _b64((directory / f"{name}.key").read_bytes()),
    }
    path = directory / f"{name}.kubeconfig"
    path.write_text(_kubeconfig(name, server, directory / "ca.crt", credentials))
    return path


def write_token_kubeconfig(path: Path, user: str, server: str, ca: Path, token: str) -> Path:
    """A kubeconfig at ``path`` that authenticates as ``user`` with a bearer ``token`` (a service account's)."""
    path.write_text(_kubeconfig(user, server, ca, {"token": token.strip()}))
    return path
