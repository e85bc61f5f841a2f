"""Fixtures for tests on a real Kubernetes node (kuberig with a kubelet node): Pods really run their containers.

One cluster per test session (or the one ``TORCHJOB_TEST_NODE_KUBECONFIG`` names), with the torchjob operator
deployed as in the kube tests and the test images pushed to the cluster's registry. If the cluster cannot start,
the tests fail with the reason; they never skip.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from kuberig import Cluster
from tests.support.clusters import session_cluster
from tests.support.images import push_test_images
from tests.support.operator import OperatorProcess, deploy_operator
from tests.support.servers import free_port


# tryfirst: xdist reads the group marker in its own hook of this name, which must run after this one even when this
# conftest is loaded before xdist's worker plugin (a test path given on the command line loads it early).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/node/" in str(item.path):
            item.add_marker(pytest.mark.node)
            # One xdist worker for every real-node test (--dist loadgroup): the single-node cluster and the
            # three-node one side by side, on two workers, overloaded this 2-core machine into timeouts.
            item.add_marker(pytest.mark.xdist_group("node"))


_OPERATOR_LOG_AT = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test that used the session's operator carries what the operator logged while it ran: the operator
    is shared by every real-node test, so its own log is the only record of why it acted as it did."""
    outcome = yield
    operator = getattr(item, "funcargs", {}).get("node_operator")
    if not isinstance(operator, OperatorProcess) or not operator.log.exists():
        return
    if call.when == "setup":
        item.stash[_OPERATOR_LOG_AT] = operator.log.stat().st_size
        return
    report = outcome.get_result()
    if report.failed:
        with open(operator.log, "rb") as log:
            log.seek(item.stash.get(_OPERATOR_LOG_AT, 0))
            lines = log.read().decode(errors="replace").splitlines()
        report.sections.append(("operator log while the test ran (last 300 lines)", "\n".join(lines[-300:])))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    for started in session_cluster(request, tmp_path_factory, "TORCHJOB_TEST_NODE_KUBECONFIG", kubelets=1):
        push_test_images(started)
        yield started


@pytest.fixture(scope="session")
def node_operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    # Pods reach the host at the host's address on the nodes' network: that is where they send their reports.
    report = f"--report-address={cluster.host_ip}:{free_port()}"
    process = deploy_operator(cluster, tmp_path_factory.mktemp("node-operator"), report)
    yield process
    process.stop()
