"""Fixtures for tests against a real Kubernetes control plane with kwok's simulated nodes (kuberig).

The cluster is created once per test session (or the one ``TORCHJOB_TEST_KUBECONFIG`` names is used: a kuberig
cluster's ``admin.kubeconfig``, since the tests end simulated Pods through kuberig), and every test gets a fresh
namespace. If the cluster cannot be built or started, the tests fail with the reason; they never skip. A session
with failures exports the cluster's logs.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import pytest

from kuberig import Cluster
from tests.support.clusters import session_cluster
from tests.support.operator import OperatorProcess, deploy_operator

__all__ = ["OperatorProcess"]


# tryfirst: xdist reads the group marker in its own hook of this name, which must run after this one even when this
# conftest is loaded before xdist's worker plugin (a test path given on the command line loads it early).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/kube/" in str(item.path):
            item.add_marker(pytest.mark.kube)
            # One cluster per session: keep every Kubernetes test on the same xdist worker (--dist loadgroup).
            item.add_marker(pytest.mark.xdist_group("kube"))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from session_cluster(request, tmp_path_factory, "TORCHJOB_TEST_KUBECONFIG", kubelets=0)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = cluster.namespace(f"{base}-{secrets.token_hex(3)}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    process = deploy_operator(cluster, tmp_path_factory.mktemp("operator"))
    yield process
    process.stop()
