"""Ports for the rig's servers come from outside the range outbound connections draw from."""

from __future__ import annotations

import socket

from kuberig.ports import ephemeral_range, free_port


def test_a_free_port_is_outside_the_ephemeral_range_and_can_be_bound() -> None:
    low, high = ephemeral_range()
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free indeed
