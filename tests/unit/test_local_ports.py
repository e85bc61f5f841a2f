"""A local attempt's ports come from below the range outbound connections draw from, and are free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from torchjob.backends.local import ports


def test_a_port_is_below_the_ephemeral_range_and_free() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        port = ports.free_port()
        assert 10000 <= port < low
        with socket.socket() as s:
            s.bind((ports.LOCALHOST, port))


def test_a_taken_port_is_never_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((ports.LOCALHOST, 0))
        port = taken.getsockname()[1]
        taken.listen()
        # Only the taken port and one other below the range: the other is the answer, every time.
        monkeypatch.setattr(ports, "_LOWEST", port)
        (tmp_path / "range").write_text(f"{port + 1000} 60999\n")
        monkeypatch.setattr(ports, "_PORT_RANGE_FILE", tmp_path / "range")
        monkeypatch.setattr(ports.random.SystemRandom, "choice", lambda self, seq: port)
        assert ports.free_port() != port  # every draw was taken: the kernel's choice


def test_with_no_room_below_the_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "range").write_text("10500 60999\n")
    monkeypatch.setattr(ports, "_PORT_RANGE_FILE", tmp_path / "range")
    port = ports.free_port()
    assert port >= 10500
