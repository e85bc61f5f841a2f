"""The three-node cluster the tests of this package share (#26): three real nodes with kube-proxy, and the
torchjob operator deployed inside it as a user deploys it (its image from this checkout, ``deploy/`` through
kustomize, two replicas with leader election). Made once for the package, deleted after its last test.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete
from tests.support.images import push_test_images
from tests.support.incluster import deploy


@pytest.fixture(scope="package")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("three-nodes") / "cluster"
    name = f"three-{secrets.token_hex(3)}"
    cluster = create(ClusterConfig(name, (NodeConfig("kubelet", 3),)), directory)
    try:
        push_test_images(cluster)
        deploy(cluster, directory.parent)
        yield cluster
    finally:
        delete(name, directory)
