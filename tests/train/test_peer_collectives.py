"""FSDP2's all-gathers and reduce-scatters sent between peers on the CPU (torchjob.train.peer_collectives), in a
real gloo group of four processes: the same numbers as gloo's own collectives, a model sharded by torchjob trains
as FSDP2 alone trains it, and a peer's death fails the collective on the others instead of hanging it."""

from __future__ import annotations

from tests.support.ranks import spawn_ranks


def test_peer_collectives_give_gloos_numbers_and_a_sharded_model_trains_as_with_fsdp2_alone() -> None:
    results = spawn_ranks("peer_collectives.py", 4)
    assert [r.returncode for r in results] == [0] * 4, "\n".join(r.stdout[-2000:] for r in results)
    for result in results:
        lines = [line for line in result.stdout.splitlines() if line.startswith(("ALL-GATHER", "REDUCE", "TRAINED"))]
        assert len(lines) == 2 * 4 + 2, result.stdout
        assert all(line.endswith(" True") for line in lines), result.stdout
        for replicas in (1, 2):
            assert f"COMMS replicas={replicas} ['PeerAllGather', 'PeerReduceScatter']" in result.stdout


def test_a_peer_gone_before_a_reduce_scatter_fails_it_on_every_other_rank() -> None:
    results = spawn_ranks("peer_collectives.py", 4, "--die", "3", timeout=120)
    assert results[3].returncode == 3
    for result in results[:3]:
        assert result.returncode == 0, result.stdout[-2000:]
        assert "REDUCE-SCATTER FAILED" in result.stdout, result.stdout[-2000:]
