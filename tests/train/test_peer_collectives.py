"""FSDP2's all-gathers and reduce-scatters sent between peers on the CPU (torchjob.train.peer_collectives), and its
all-gathers through shared memory (torchjob.train.shared_memory), in a real gloo group of four processes: the same
numbers as gloo's own collectives, a model sharded by torchjob trains as FSDP2 alone trains it (its gathers through
shared memory), a group with a rank that does not offer shared memory gathers over TCP, and a peer's death fails
the collective on the others instead of hanging it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.ranks import spawn_ranks


def test_peer_collectives_give_gloos_numbers_and_a_sharded_model_trains_as_with_fsdp2_alone(tmp_path: Path) -> None:
    results = spawn_ranks("peer_collectives.py", 4, "--folder", str(tmp_path))
    assert [r.returncode for r in results] == [0] * 4, "\n".join(r.stdout[-2000:] for r in results)
    for result in results:
        lines = [line for line in result.stdout.splitlines() if line.startswith(("ALL-GATHER", "REDUCE", "TRAINED"))]
        assert len(lines) == 2 * 4 + 2, result.stdout
        assert all(line.endswith(" True") for line in lines), result.stdout
        for replicas in (1, 2):
            assert f"COMMS replicas={replicas} ['PeerAllGather', 'PeerReduceScatter']" in result.stdout
            assert f"SHARED TRAINING replicas={replicas} through shared memory: [True]" in result.stdout
        assert _shared_gathers(result.stdout) == {"world": "True", "half": "True"}, result.stdout
        # A re-formed group (its names the old one's) with a new member makes files of its own.
        assert "RE-FORMED ALL-GATHER same name True True shared memory used: True" in result.stdout


def test_a_group_with_a_rank_that_does_not_offer_shared_memory_gathers_over_tcp_alike(tmp_path: Path) -> None:
    results = spawn_ranks("peer_collectives.py", 4, "--refuse", "2", "--folder", str(tmp_path))
    assert [r.returncode for r in results] == [0] * 4, "\n".join(r.stdout[-2000:] for r in results)
    for rank, result in enumerate(results):
        # Rank 2's half is ranks 2 and 3: the whole group and that half keep TCP, ranks 0 and 1's half does not.
        assert _shared_gathers(result.stdout) == {"world": "False", "half": str(rank < 2)}, result.stdout


def _shared_gathers(stdout: str) -> dict[str, str]:
    """Each group's five shared-memory gathers, every one equal to gloo's: whether they went through it."""
    found = re.findall(r"^SHARED ALL-GATHER (\w+) (\d) (\w+) shared memory used: (\w+)$", stdout, re.MULTILINE)
    assert len(found) == 2 * 5 and all(equal == "True" for _, _, equal, _ in found), stdout
    used: dict[str, set[str]] = {}
    for name, _, _, through in found:
        used.setdefault(name, set()).add(through)
    assert all(len(each) == 1 for each in used.values()), stdout
    return {name: each.pop() for name, each in used.items()}


def test_a_peer_gone_before_a_reduce_scatter_fails_it_on_every_other_rank() -> None:
    results = spawn_ranks("peer_collectives.py", 4, "--die", "3", timeout=120)
    assert results[3].returncode == 3
    for result in results[:3]:
        assert result.returncode == 0, result.stdout[-2000:]
        assert "REDUCE-SCATTER FAILED" in result.stdout, result.stdout[-2000:]


def test_a_peer_gone_before_a_shared_memory_gather_fails_it_on_every_other_rank() -> None:
    results = spawn_ranks("peer_collectives.py", 4, "--die", "3", "--shared", timeout=120)
    assert results[3].returncode == 3
    for result in results[:3]:
        assert result.returncode == 0, result.stdout[-2000:]
        assert "SHARED ALL-GATHER FAILED" in result.stdout, result.stdout[-2000:]
