"""Simulated nodes' addresses: each its own in the cluster's slot (so that one can vanish), written on its Node for
kwok to keep; kwok's one shared address where they cannot be made (not root). Vanishing itself, against a real
API server and the operator's probe: tests/kube/test_simulated_node_loss.py."""

from __future__ import annotations

import pytest

from kuberig.naming import Slot
from kuberig.network import addresses
from kuberig.node import kwok


def test_each_simulated_node_has_an_address_of_its_own_in_the_slot() -> None:
    assert addresses.for_nodes(Slot(7), 3) == ["10.99.7.1", "10.99.7.2", "10.99.7.3"]
    assert addresses.for_nodes(None, 2) == [addresses.SHARED, addresses.SHARED]
    with pytest.raises(ValueError, match="kwok node 254: at most 254 simulated nodes have addresses of their own"):
        addresses.of_node(Slot(7), 254)


def test_the_node_object_carries_its_address_for_kwok_to_keep() -> None:
    node = kwok.node_object("kwok-node-1", "10.99.7.2")
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "10.99.7.2"}
    assert node["metadata"]["annotations"][kwok.FAKE_NODE_ANNOTATION] == "fake"
