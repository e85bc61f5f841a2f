"""How a rank checks a peer's shared file before it gathers through it (torchjob.train.shared_memory), in one
process with real anonymous files (``memfd_create``) opened again through ``/proc``: a file that is not the one
the peer said (another token, another size, not an anonymous file of ours: a plain file, a pipe) or cannot be
opened (no such process) is refused, and the group then keeps TCP; ``TORCHJOB_SHARED_MEMORY=0`` withdraws a
rank's offer."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchjob.train import shared_memory

SIZE = 4096 + 2 * 2**20


@pytest.fixture
def own_file() -> Iterator[tuple[int, int, bytes]]:
    token = os.urandom(16)
    fd = shared_memory._reserved(SIZE, token)
    assert fd is not None
    yield os.getpid(), fd, token
    os.close(fd)


def test_a_peers_file_is_mapped_where_its_token_and_size_are_the_ones_it_said(own_file: tuple[int, int, bytes]) -> None:
    maps = shared_memory._mapped([own_file, own_file], SIZE)
    assert maps is not None and [len(each) for each in maps] == [SIZE, SIZE]
    maps[0][4096:4100] = 7  # one file, mapped twice: what one writes the other reads
    assert maps[1][4096:4100].tolist() == [7, 7, 7, 7]
    assert bytes(maps[1][:16].tolist()) == own_file[2]


def test_a_file_that_is_not_the_peers_own_is_refused(own_file: tuple[int, int, bytes]) -> None:
    pid, fd, token = own_file
    assert shared_memory._mapped([(pid, fd, os.urandom(16))], SIZE) is None  # another file at that pid and number
    assert shared_memory._mapped([(pid, fd, token)], SIZE + 4096) is None  # not the size the group agreed
    assert shared_memory._mapped([(_no_such_pid(), fd, token)], SIZE) is None  # another machine's or namespace's


def test_only_a_file_of_ours_is_opened_at_all(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(bytes(SIZE))
    reading, writing = os.pipe()
    with plain.open("rb") as opened:
        for fd in (opened.fileno(), reading):  # a plain file of the right size, a pipe: looked at, never opened
            assert not shared_memory._is_ours(f"/proc/{os.getpid()}/fd/{fd}", SIZE)
            assert shared_memory._mapped([(os.getpid(), fd, bytes(16))], SIZE) is None
    os.close(reading)
    os.close(writing)


def test_the_offer_is_withdrawn_by_the_environment_only_when_told() -> None:
    assert shared_memory.enabled({})
    assert shared_memory.enabled({"TORCHJOB_SHARED_MEMORY": "1"})
    for said in ("0", "false", "No "):
        assert not shared_memory.enabled({"TORCHJOB_SHARED_MEMORY": said})


def _no_such_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def test_a_token_crosses_the_group_as_two_integers_unchanged() -> None:
    for token in (bytes(16), b"\xff" * 16, os.urandom(16)):
        assert shared_memory._joined(*shared_memory._halves(token)) == token
