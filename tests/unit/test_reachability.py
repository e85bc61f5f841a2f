"""The operator's own witness of a vanished node: a connection to its kubelet that nothing answers."""

from __future__ import annotations

import socket
import subprocess
import sys
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


def test_a_node_this_process_cannot_try_is_neither_reached_nor_silent() -> None:
    """No file descriptor left (the report endpoint's connections took them) proves nothing about a node: it
    must never make the node unreachable, a witness of its loss."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = listening.getsockname()
        program = (
            "import resource, socket, sys\n"
            "from torchjob.backends.kubernetes.reachability import connect\n"
            "held = []\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
            "try:\n"
            "    while True: held.append(socket.socket())\n"
            "except OSError: pass\n"
            f"print(connect({address!r}, 1.0))\n"
        )
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "None", done.stderr


def test_a_node_reached_before_is_not_unreachable_when_it_cannot_be_tried_now() -> None:
    answers: list[bool | None] = [True]
    reach = Reachability(lambda name: node("10.0.0.2"), lambda address, timeout: answers[-1])
    reach.learn(["a"])
    answers.append(None)  # e.g. no file descriptor left in this process
    assert reach.unreachable(["a"]) == set()
    answers.append(False)
    assert reach.unreachable(["a"]) == {"a"}
