"""Free TCP ports for the rig's servers, chosen where no outbound connection can take them first.

A port found free by binding port 0 comes from the kernel's ephemeral range, the very range it hands out to
outbound connections: between the moment a port is chosen and the moment the server given it binds it (seconds,
for a control plane that starts one component after another), any process's next connection may take it, and the
server fails with "address already in use". So ports are drawn at random below that range (or above it when it
leaves no room below), where only another explicit bind can take them, and checked free by binding them.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default ephemeral range, when the machine does not say.
_DEFAULT_EPHEMERAL = (32768, 60999)
# The lowest port drawn: well above the ports system services listen on.
_LOWEST = 10000
_TRIES = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outbound connections' local ports."""
    try:
        low, high = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now, outside the ephemeral range where there is room."""
    low, high = ephemeral_range()
    choices = range(_LOWEST, low) if low - _LOWEST >= 1000 else range(high + 1, 65536)
    draw = random.SystemRandom()
    for _ in range(_TRIES if len(choices) >= 1000 else 0):
        port = draw.choice(choices)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # taken: draw again
            return port
    with socket.socket() as s:  # no room outside the ephemeral range: the kernel's choice
        s.bind((host, 0))
        found: int = s.getsockname()[1]
        return found
