"""The ports a local attempt's master and rendezvous store listen on, chosen where no connection takes them first.

A port found free by binding port 0 comes from the kernel's ephemeral range, which is also where every outbound
connection gets its local port. The master binds its port only after its script has imported torch (seconds
later on a busy machine), and any connection opened meanwhile may take it: the attempt then fails with "address
already in use". So ports are drawn at random below that range, where only an explicit bind can take them, and
checked free by binding them; the kernel's choice remains where the machine leaves no room below.
(The test cluster's ``kuberig.ports`` solves the same problem for its servers; the two packages stay separate.)
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOCALHOST = "127.0.0.1"
_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_DEFAULT_LOW = 32768  # where Linux's ephemeral range starts when the machine does not say
_LOWEST = 10000  # above the ports system services use
_TRIES = 100


def _ephemeral_low() -> int:
    try:
        return int(_PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _LINUX_DEFAULT_LOW


def free_port() -> int:
    """A TCP port nobody listens on now, outside the ephemeral range where there is room. Fresh per attempt,
    so a restart never meets 'address in use' from its predecessor."""
    below = range(_LOWEST, _ephemeral_low())
    draw = random.SystemRandom()
    for _ in range(_TRIES if len(below) >= 1000 else 0):
        port = draw.choice(below)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((LOCALHOST, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        port = int(s.getsockname()[1])
        return port
