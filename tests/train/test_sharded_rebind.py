"""A sharded model moved onto a re-formed group's process groups (torchjob.train.sharded_rebind), in real gloo groups
of 4 processes: after a step that failed mid-forward, the model let go of its group holds nothing of it (the group
is freed once left, an asynchronous checkpoint's kept staging buffers notwithstanding), and, moved onto the next
group, trains on to exactly the model of a run that never left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.ranks import spawn_ranks


def _checksum(checkpoints: Path, *args: str) -> tuple[str, str]:
    results = spawn_ranks("rebind.py", 4, "--checkpoints", str(checkpoints), *args)
    assert [r.returncode for r in results] == [0] * 4, "\n".join(r.stdout[-3000:] for r in results)
    found = re.search(r"CHECKSUM (.+)", results[0].stdout)
    assert found is not None, results[0].stdout[-3000:]
    return found[1], results[0].stdout


@pytest.mark.parametrize("layout", [(), ("--replicas", "2")], ids=["fsdp", "hsdp"])
def test_a_model_moved_onto_a_new_group_after_a_failed_step_trains_on_as_if_it_never_left(
    layout: tuple[str, ...], tmp_path: Path
) -> None:
    straight, _ = _checksum(tmp_path / "straight", *layout, "--straight")
    moved, said = _checksum(tmp_path / "moved", *layout)
    assert "LET GO True" in said and "OLD GROUP FREED True" in said and "MOVED True" in said, said
    assert moved == straight
