"""Replayed neighbours' copies (torchjob.train.replayed_copies) in real gloo groups of 4 processes: a rank that failed
after every rank had received its neighbour's gradients, its peers having stepped, steps on at the re-form, and
every copy still holds its neighbour's live shard to the bit (sent whole again where a step made new optimizer
state)."""

from __future__ import annotations

import re

from tests.support.ranks import spawn_ranks


def _run(*args: str) -> tuple[str, str]:
    results = spawn_ranks("stepped_on.py", 4, *args)
    said = "\n".join(r.stdout[-3000:] for r in results)
    assert [r.returncode for r in results] == [0] * 4, said
    assert all("COPIES MATCH True" in r.stdout for r in results), said
    found = re.search(r"CHECKSUM (.+)", results[0].stdout)
    assert found is not None, said
    return found[1], said


def test_a_rank_that_failed_once_its_peers_could_step_steps_on_and_the_copies_stay_exact() -> None:
    straight, whole = _run("--straight")
    # Sent whole after the first step, and after the 3rd, whose new unit made optimizer state the copies lacked.
    assert [int(n) for n in re.findall(r"SENT WHOLE AFTER STEP (\d+)", whole)] == [1, 3] * 4, whole
    repaired, said = _run()
    assert "RANK 2 FAILED (failed once every rank had received its neighbour's gradients)" in said, said
    assert "rank 2: on to step 4, the step its peers stepped to" in said, said
    assert all(f"RANK {rank} AT 4" in said for rank in range(4)), said
    assert repaired == straight


def test_a_second_optimizer_step_in_one_training_step_is_refused_before_it_changes_anything() -> None:
    # A repair in between would count the two as one step, the lost rank's copy an optimizer step off its peers'.
    results = spawn_ranks("stepped_on.py", 4, "--twice")
    said = "\n".join(r.stdout[-3000:] + r.stderr[-3000:] for r in results)
    assert [r.returncode for r in results] == [0] * 4, said
    refused = "REFUSED: the optimizer stepped twice in one training step: plain FSDP's neighbours' copies are stepped"
    assert all(refused in r.stdout for r in results), said
