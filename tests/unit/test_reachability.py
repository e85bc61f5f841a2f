"""The operator's own witness of a vanished node: a connection to its kubelet that nothing answers."""

from __future__ import annotations

import socket
from typing import Any

from torchjob.backends.kubernetes.reachability import Address, Reachability, connect, kubelet_address


def node(ip: str, port: int | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": ip}]
    }
    if port is not None:
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    return {"status": status}


def test_a_listening_port_and_a_refusing_one_both_prove_the_host_is_up() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert connect(listening.getsockname(), 1.0)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: the kernel refuses
        assert connect(("127.0.0.1", port), 1.0)


def test_the_kubelet_address_comes_from_the_node_status() -> None:
    assert kubelet_address(node("10.0.0.2", 10250)) == ("10.0.0.2", 10250)
    assert kubelet_address(node("10.0.0.3")) == ("10.0.0.3", 10250)  # the kubelet's default port
    assert kubelet_address({"status": {"addresses": [{"type": "Hostname", "address": "n"}]}}) is None
    assert kubelet_address(None) is None


def test_only_a_node_reached_before_can_be_unreachable_and_a_new_address_is_tried() -> None:
    answering: set[Address] = {("10.0.0.2", 10250), ("10.0.0.3", 10250)}
    nodes = {"a": node("10.0.0.2"), "b": node("10.0.0.3"), "never": node("10.0.0.9"), "bare": {}}
    reach = Reachability(nodes.get, lambda address, _timeout: address in answering)
    reach.learn(["a", "b", "never", "bare"])
    assert reach.unreachable(["a", "b", "never", "bare"]) == set()  # "never" was never reached: proves nothing
    answering.discard(("10.0.0.2", 10250))  # a vanished
    assert reach.unreachable(["a", "b"]) == {"a"}
    nodes["a"] = node("10.0.0.7")  # it came back under another address
    answering.add(("10.0.0.7", 10250))
    assert reach.unreachable(["a"]) == set()
