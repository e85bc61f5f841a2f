"""Fixtures for tests against the real Kubernetes control plane (tools/kube_rig.py).

The rig is built (or found in the cache) and started once per test session, and every test gets a fresh
namespace. If the binaries cannot be built, the tests fail with the build's output; they never skip.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

import pytest
from tools import kube_rig


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
