"""Sharded models (FSDP2, HSDP) and their DCP checkpoints, in real gloo groups of processes: a checkpoint loads
into another number of ranks and training goes on exactly where it would have; a save that never committed is
never loaded; asynchronous saves; an object store (a real S3 server)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.ranks import run_sharded, spawn_ranks


def _run(world: int, *args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    return _run_saying(world, *args, env=env)[:2]


def _run_saying(world: int, *args: str, env: dict[str, str] | None = None) -> tuple[str, str, str]:
    """The final checksum, the checkpoints' steps, and rank 0's output."""
    checksum, steps, results = run_sharded(world, *args, env=env)
    return checksum, steps, results[0].stdout


def test_an_fsdp_checkpoint_of_4_ranks_resumes_on_3_where_the_4_would_have_gone(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    went_on, steps = _run(4, "--ckpt", ckpt, "--steps", "5", "--after", "2")
    assert steps == "[5]"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-000000000005", "step-000000000005.json"]
    resumed, _ = _run(3, "--ckpt", ckpt, "--load", "--after", "2")
    assert resumed == went_on  # the model and Adam's moments came back, resharded from 4 ranks to 3


def test_hsdp_replicas_hold_one_model_and_a_bad_layout_is_one_clear_error(tmp_path: Path) -> None:
    _run(4, "--ckpt", str(tmp_path / "hsdp"), "--replicas", "2")  # SyncCheck compares the two replica groups
    results = spawn_ranks("sharded.py", 4, "--ckpt", str(tmp_path / "bad"), "--replicas", "3")
    assert [r.returncode for r in results] == [4] * 4
    assert "replicas=3: HSDP needs a number of replica groups that divides the world size (4)" in results[0].stdout


def test_hsdp_keeping_gathered_weights_through_the_backward_trains_the_same_model(tmp_path: Path) -> None:
    resharded, _, said = _run_saying(4, "--ckpt", str(tmp_path / "a"), "--replicas", "2")
    assert "FIRST UNIT GATHERED THROUGH BACKWARD False" in said
    kept, _, said = _run_saying(4, "--ckpt", str(tmp_path / "b"), "--replicas", "2", "--keep-gathered")
    assert "FIRST UNIT GATHERED THROUGH BACKWARD True" in said  # one all-gather per step: the forward's weights stay
    assert kept == resharded  # the same arithmetic, to the printed digit


def test_a_model_built_on_meta_and_filled_unit_by_unit_trains_as_the_eagerly_built_one(tmp_path: Path) -> None:
    eager, _, said_eager = _run_saying(2, "--ckpt", str(tmp_path / "eager"))
    from_meta, _, said = _run_saying(2, "--ckpt", str(tmp_path / "meta"), "--from-meta")
    assert from_meta == eager  # the same initial weights, drawn in build()'s order from its seed
    # Built either way, the units' weights are freed after their forward, but the last unit's, which the backward
    # needs first (freed, it would be gathered again at once).
    for output in (said_eager, said):
        assert "FIRST UNIT GATHERED THROUGH BACKWARD False" in output, output
        assert "LAST UNIT GATHERED THROUGH BACKWARD True" in output, output


def test_an_async_save_into_the_buffers_of_the_one_before_holds_its_own_steps_state(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    went_on, steps = _run(4, "--ckpt", ckpt, "--steps", "5", "--after", "2", "--async-save", "--save-at", "3")
    assert steps == "[3, 5]"
    resumed, _ = _run(3, "--ckpt", ckpt, "--load", "--after", "2")
    assert resumed == went_on  # step 5's state, not step 3's left in the reused buffers


def test_a_save_that_never_committed_is_never_loaded_and_is_pruned(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    _run(2, "--ckpt", str(ckpt), "--steps", "3")
    # A save killed half-way: its shards, no DCP metadata, no manifest.
    (ckpt / "step-000000000004").mkdir()
    (ckpt / "step-000000000004" / "__0_0.distcp").write_bytes(b"half")
    results = spawn_ranks("sharded.py", 2, "--ckpt", str(ckpt), "--load", "--after", "1")
    assert [r.returncode for r in results] == [0, 0], results[0].stdout[-3000:]
    assert "LOADED step 3 saved by 2 ranks" in results[0].stdout
    _, steps = _run(2, "--ckpt", str(ckpt), "--steps", "6", "--async-save")
    assert steps == "[3, 6]"
    assert not (ckpt / "step-000000000004").exists()


def test_sharded_checkpoints_on_a_real_s3_server(s3_server: dict[str, str]) -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem(**_client(s3_server)).mkdir("sharded")
    went_on, steps = _run(2, "--ckpt", "s3://sharded/run", "--steps", "4", "--after", "1", env=s3_server)
    assert steps == "[4]"
    resumed, _ = _run(3, "--ckpt", "s3://sharded/run", "--load", "--after", "1", env=s3_server)
    assert resumed == went_on


def _client(env: dict[str, str]) -> dict[str, object]:
    return {
        "key": env["AWS_ACCESS_KEY_ID"],
        "secret": env["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"endpoint_url": env["AWS_ENDPOINT_URL"]},
    }


def test_an_async_save_in_flight_when_the_group_changes_is_left_unfinished_and_the_new_group_saves_on(
    tmp_path: Path,
) -> None:
    ranks = spawn_ranks("save_across_groups.py", 3, str(tmp_path / "ckpt"), timeout=120)
    said = "".join(r.stdout for r in ranks)
    assert [r.returncode for r in ranks] == [0, 0, -9], said
    assert "MANIFESTS [1, 3]" in ranks[0].stdout, said
    assert "the checkpoint of step 2 was still being written when the group changed: left unfinished" in said, said
    manifest = json.loads((tmp_path / "ckpt" / "step-000000000003.json").read_text())
    assert manifest["world_size"] == 2


def test_a_script_ending_after_the_group_changed_under_an_async_save_does_not_wait_for_it_at_exit(
    tmp_path: Path,
) -> None:
    ranks = spawn_ranks("save_across_groups.py", 3, str(tmp_path / "ckpt"), "--end-without-waiting", timeout=120)
    said = "".join(r.stdout for r in ranks)
    assert (tmp_path / "ckpt" / "watcher").read_text() == "ranks 0 and 1 ended", said
    assert [r.returncode for r in ranks] == [0, 0, -9], said
    assert "the checkpoint of step 2 was still being written when the group changed: left unfinished" in said, said
    assert not (tmp_path / "ckpt" / "step-000000000002.json").exists()
