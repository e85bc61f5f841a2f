"""Fixtures for tests on a real Kubernetes node (tools/real_node.py): Pods really run their containers.

One node per test session, with the torchjob operator deployed as in the kube tests and the test images
pushed to the node's registry. If the node cannot start, the tests fail with the reason; they never skip.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tools import kube_rig, real_node

from tests.kube.conftest import OperatorProcess, deploy_operator
from tests.node.images import push_test_images


# tryfirst: xdist reads the group marker in its own hook of this name, which must run after this one even when this
# conftest is loaded before xdist's worker plugin (a test path given on the command line loads it early).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/node/" in str(item.path):
            item.add_marker(pytest.mark.node)
            # One node per session: keep every real-node test on the same xdist worker (--dist loadgroup).
            item.add_marker(pytest.mark.xdist_group("node"))


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_node.RealNode]:
    directory = tmp_path_factory.mktemp("real-node")
    try:
        started = real_node.up(directory)
        push_test_images(started)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        real_node.down(directory)
        pytest.fail(f"the real test node is not available: {err}", pytrace=False)
    yield started
    real_node.down(directory)


@pytest.fixture(scope="session")
def node_operator(node: real_node.RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    # Pods reach the host at the node's gateway address: that is where they send their progress reports.
    report = f"--report-address={node.host_ip}:{kube_rig.free_port()}"
    process = deploy_operator(node.rig, tmp_path_factory.mktemp("node-operator"), report)
    yield process
    process.stop()


def wait_for_condition(node: real_node.RealNode, namespace: str, job: str, kinds: set[str], timeout: float) -> Any:
    """Poll the PyTorchJob until one of ``kinds`` is a true condition; return the job. On a timeout, fail with
    its status and the pods' state, which say why."""
    deadline = time.monotonic() + timeout
    while True:
        found = json.loads(node.rig.kubectl("get", "pytorchjob", job, "-n", namespace, "-o", "json").stdout)
        conditions = found.get("status", {}).get("conditions", [])
        if any(c["type"] in kinds and c["status"] == "True" for c in conditions):
            return found
        if time.monotonic() > deadline:
            pods = node.rig.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
            pytest.fail(f"{job} reached none of {sorted(kinds)} in {timeout:.0f}s: {conditions}\n{pods}")
        time.sleep(1)


def wait_for_pod_phase(node: real_node.RealNode, namespace: str, pod: str, phase: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = node.rig.kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
        if found.returncode == 0 and json.loads(found.stdout).get("status", {}).get("phase") == phase:
            return
        if time.monotonic() > deadline:
            events = node.rig.kubectl("get", "events", "-n", namespace, check=False).stdout
            pytest.fail(f"pod {pod} never reached {phase} in {timeout:.0f}s:\n{events[-2000:]}")
        time.sleep(0.5)
