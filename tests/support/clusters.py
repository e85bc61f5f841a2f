"""The test session's clusters (kuberig), the way jobset's e2e suite finds its cluster: the one an environment
variable names (a kuberig cluster's ``admin.kubeconfig``), else one created for the session and deleted after it.
A session with failures exports the cluster's logs first (``$TORCHJOB_TEST_LOGS``, else beside the cluster)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete, toolchain
from kuberig.state import exists


def _given(variable: str) -> Cluster | None:
    kubeconfig = os.environ.get(variable)
    if not kubeconfig:
        return None
    directory = Path(kubeconfig).resolve().parent
    if not exists(directory):
        pytest.fail(f"{variable}={kubeconfig}: not the admin.kubeconfig of a kuberig cluster", pytrace=False)
    return Cluster(directory)


def session_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, variable: str, kubelets: int
) -> Iterator[Cluster]:
    given = _given(variable)
    if given is not None:
        yield given
        return
    nodes = (NodeConfig("kubelet", kubelets),) if kubelets else (NodeConfig("kwok", 2),)
    name = f"test-{'node' if kubelets else 'kwok'}-{secrets.token_hex(3)}"
    directory = tmp_path_factory.mktemp(name)
    try:
        toolchain.build(*(toolchain.BUILDS[:2] if kubelets else toolchain.BUILDS[:1]))
        cluster = create(ClusterConfig(name, nodes), directory)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        pytest.fail(f"the test cluster is not available: {err}", pytrace=False)
    yield cluster
    if request.session.testsfailed:
        logs = Path(os.environ.get("TORCHJOB_TEST_LOGS") or directory.parent) / f"{name}-logs"
        print(f"\ncluster {name}: logs exported to {cluster.export_logs(logs)}", file=sys.stderr)
    delete(name, directory)
