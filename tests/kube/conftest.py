"""Fixtures for tests against the real Kubernetes control plane (tools/kube_rig.py).

The rig is built (or found in the cache) and started once per test session, and every test gets a fresh
namespace. If the binaries cannot be built, the tests fail with the build's output; they never skip.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tools import kube_rig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


# tryfirst: xdist reads the group marker in its own hook of this name, which must run after this one even when this
# conftest is loaded before xdist's worker plugin (a test path given on the command line loads it early).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/kube/" in str(item.path):
            item.add_marker(pytest.mark.kube)
            # One rig per session: keep every Kubernetes test on the same xdist worker (--dist loadgroup).
            item.add_marker(pytest.mark.xdist_group("kube"))


@pytest.fixture(scope="session")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kube_rig.Rig]:
    try:
        kube_rig.build()
        started = kube_rig.up(tmp_path_factory.mktemp("kube-rig"), nodes=2)
    except RuntimeError as err:
        pytest.fail(f"the Kubernetes test control plane is not available: {err}", pytrace=False)
    yield started
    kube_rig.down(started.directory)


@pytest.fixture
def namespace(rig: kube_rig.Rig, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    rig.kubectl("create", "namespace", name)
    deadline = time.monotonic() + 60
    # Pods need the namespace's default service account, which the controller-manager creates.
    while rig.kubectl("get", "-n", name, "serviceaccount", "default", check=False).returncode != 0:
        assert time.monotonic() < deadline, "no default service account in the new namespace"
        time.sleep(0.2)
    yield name
    rig.kubectl("delete", "namespace", name, "--wait=false", check=False)


class OperatorProcess:
    """``torchjob operator`` as a real process, running as the least-privilege account deploy/ creates."""

    def __init__(self, rig: kube_rig.Rig, kubeconfig: Path, log: Path, args: tuple[str, ...] = ("--all-namespaces",)):
        self.rig, self.kubeconfig, self.log, self.args = rig, kubeconfig, log, args
        self.health_port = kube_rig.free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torchjob.cli.main",
                    "operator",
                    *self.args,
                    f"--kubeconfig={self.kubeconfig}",
                    f"--health-port={self.health_port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self.ready():
            assert self.process.poll() is None, f"the operator exited: {self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "the operator never became ready"
            time.sleep(0.1)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def counters(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/counters", timeout=2) as answer:
            data: dict[str, Any] = json.loads(answer.read())
            return data

    def prometheus(self) -> str:
        """The operator's /metrics, as Prometheus scrapes it."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())

    def kill(self) -> None:
        """SIGKILL: no chance to tidy up, as when its node dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture(scope="session")
def operator(rig: kube_rig.Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    process = deploy_operator(rig, tmp_path_factory.mktemp("operator"))
    yield process
    process.stop()


def deploy_operator(rig: kube_rig.Rig, directory: Path, *args: str) -> OperatorProcess:
    """The CRD, namespace and RBAC from deploy/ applied as they ship, and the operator running with them."""
    directory.mkdir(parents=True, exist_ok=True)
    for manifest in ("namespace.yaml", "crd.yaml", "rbac.yaml"):
        rig.kubectl("apply", "-f", str(DEPLOY / manifest))
    rig.kubectl("wait", "--for=condition=Established", "crd/pytorchjobs.kubeflow.org", "--timeout=60s")
    token = rig.kubectl("create", "token", "torchjob-operator", "-n", "torchjob-system", "--duration=4h").stdout
    kubeconfig = directory / "operator.kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "rig",
                        "cluster": {"server": rig.server, "certificate-authority": str(rig.directory / "ca.crt")},
                    }
                ],
                "users": [{"name": "torchjob-operator", "user": {"token": token.strip()}}],
                "contexts": [{"name": "operator", "context": {"cluster": "rig", "user": "torchjob-operator"}}],
                "current-context": "operator",
            }
        )
    )
    process = OperatorProcess(rig, kubeconfig, directory / "operator.log", ("--all-namespaces", *args))
    process.start()
    return process
