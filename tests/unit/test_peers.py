"""Leaving a collective whose peer went silent: a recv blocked on a connection no reset will end returns once
the connection is shut down from another thread, and the connections to keep are kept."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from torchjob.train import peers


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    return server, client, accepted


def test_a_recv_waiting_on_a_silent_peer_returns_once_its_connection_is_cut() -> None:
    server, silent_peer, waiting = _pair()
    kept_server, kept_client, kept_accepted = _pair()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(waiting.recv(16)))
    reader.start()
    time.sleep(0.2)
    assert reader.is_alive()  # the peer sends nothing: recv waits, as gloo's does on a dead link
    keep = {kept_server.getsockname()[1]}
    assert peers.cut_group_connections(keep) >= 2  # both ends of the silent pair live in this process
    reader.join(timeout=5)
    assert not reader.is_alive() and got == [b""]
    kept_client.sendall(b"still here")  # the kept connection (torchjob's store) is untouched
    assert kept_accepted.recv(16) == b"still here"
    for s in (server, silent_peer, waiting, kept_server, kept_client, kept_accepted):
        s.close()


def test_the_store_and_report_endpoint_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_STORE", "job-store:29400")
    monkeypatch.setenv("TORCHJOB_REPORT_URL", "https://torchjob-operator.torchjob-system.svc:8443/reports/ns/j")
    assert peers.kept_ports() == {29400, 8443}
    monkeypatch.setenv("TORCHJOB_REPORT_URL", "https://op.example/reports/ns/j")
    assert peers.kept_ports() == {29400, 443}


def test_only_connected_tcp_sockets_are_cut() -> None:
    """A listening socket, and a socket that is not TCP, are left as they are: only a peer's connection ends."""
    listening = socket.create_server(("127.0.0.1", 0))
    local_a, local_b = socket.socketpair()
    server, client, accepted = _pair()
    peers.cut_group_connections(set())
    local_a.sendall(b"unix")
    assert local_b.recv(16) == b"unix"
    late = socket.create_connection(listening.getsockname())  # still accepts
    taken, _ = listening.accept()
    late.sendall(b"tcp")
    assert taken.recv(16) == b"tcp"
    assert accepted.recv(16) == b""  # the connection that existed was cut
    for s in (listening, local_a, local_b, server, client, accepted, late, taken):
        s.close()
