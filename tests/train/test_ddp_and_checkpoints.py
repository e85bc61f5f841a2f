"""The sync check in a real 2-rank gloo group; checkpoints: atomicity, corruption, pruning, async, S3, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support.paths import TRAIN_SCRIPTS
from tests.support.ranks import spawn_ranks
from tests.support.servers import free_port
from torchjob import sections, worker_files
from torchjob.train import Checkpointer, DistContext

SINGLE = DistContext(0, 0, 1, torch.device("cpu"), "gloo", "single")


def test_sync_check_passes_for_a_ddp_model() -> None:
    results = spawn_ranks("sync_check.py", 2)
    assert [r.returncode for r in results] == [0, 0], results[0].stdout
    assert all("in sync" in r.stdout for r in results)


def test_sync_check_catches_a_model_never_wrapped_in_ddp() -> None:
    results = spawn_ranks("sync_check.py", 2, "--no-wrap")
    assert [r.returncode for r in results] == [3, 3]
    message = results[0].stdout
    assert "model parameters differ across ranks after step 1" in message
    assert "each rank is training its own copy of the model" in message
    assert "torchjob.train.wrap()" in message


def test_save_and_load_round_trip_with_rng(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, SINGLE)
    torch.manual_seed(5)
    ckpt.save({"weights": torch.arange(3.0), "epoch": 2}, step=10)
    expected_next = torch.rand(1)
    state = ckpt.load()
    assert state is not None and state["step"] == 10 and state["epoch"] == 2
    assert torch.equal(state["weights"], torch.arange(3.0))
    ckpt.restore_rng(state)
    assert torch.equal(torch.rand(1), expected_next)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000000010.json", "ckpt-000000000010.pt"]


def test_a_save_killed_mid_write_leaves_the_previous_checkpoint_usable(tmp_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, str(TRAIN_SCRIPTS / "slow_save.py"), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".ckpt-000000000002.pt.tmp-*")):
        assert writer.poll() is None, "the writer finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    writer.kill()
    writer.wait()
    state = Checkpointer(tmp_path, SINGLE).load()
    assert state is not None and state["step"] == 1
    assert torch.equal(state["weights"], torch.ones(4))
    # The next save cleans up what the killed one left.
    Checkpointer(tmp_path, SINGLE).save({"weights": torch.ones(1)}, step=3)
    assert not list(tmp_path.glob(".ckpt-*.tmp-*"))


def test_corrupt_and_half_written_checkpoints_are_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = Checkpointer(tmp_path, SINGLE, keep=5)
    for step in (1, 2, 3):
        ckpt.save({"step_value": torch.tensor(step)}, step=step)
    newest = tmp_path / "ckpt-000000000003.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    (tmp_path / "ckpt-000000000004.pt").write_bytes(b"data without a manifest: never committed")
    state = ckpt.load()
    assert state is not None and state["step"] == 2
    assert "checkpoint of step 3 fails its checksum" in capsys.readouterr().out


def test_only_the_last_k_are_kept(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, SINGLE, keep=2, every_steps=5)
    for step in range(1, 26):
        if ckpt.due(step):
            ckpt.save({"s": step}, step=step)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.json")) == ["ckpt-000000000020.json", "ckpt-000000000025.json"]
    assert len(list(tmp_path.glob("ckpt-*.pt"))) == 2


def test_async_save_captures_the_state_at_the_time_of_the_call(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, SINGLE, async_save=True)
    weights = torch.zeros(1000)
    ckpt.save({"weights": weights}, step=1)
    weights += 1  # training goes on while the checkpoint is written
    ckpt.wait()
    state = ckpt.load()
    assert state is not None and torch.equal(state["weights"], torch.zeros(1000))


def test_async_saves_copying_into_the_last_ones_tensors_each_hold_the_state_of_their_own_step(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, SINGLE, keep=3, async_save=True)
    weights, steps = torch.zeros(1000), torch.zeros(3, dtype=torch.int64)
    ckpt.save({"weights": weights, "steps": steps, "layers": [weights[:10].clone()]}, step=1)
    weights += 1
    ckpt.save({"weights": weights, "steps": torch.ones(4), "layers": []}, step=2)  # a tensor of another shape
    weights += 1  # after the call: not in step 2's checkpoint
    ckpt.wait()
    first, second = (torch.load(tmp_path / f"ckpt-00000000000{n}.pt", weights_only=False) for n in (1, 2))
    assert torch.equal(first["weights"], torch.zeros(1000)) and torch.equal(first["steps"], steps)
    assert torch.equal(first["layers"][0], torch.zeros(10))
    assert torch.equal(second["weights"], torch.ones(1000)) and torch.equal(second["steps"], torch.ones(4))
    assert second["layers"] == []


def test_s3_round_trip_on_a_real_s3_server(s3_server: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("checkpoints")
    ckpt = Checkpointer("s3://checkpoints/run-1", SINGLE, keep=2)
    for step in (5, 10, 15):
        ckpt.save({"weights": torch.full((8,), float(step))}, step=step)
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls("checkpoints/run-1")) == [
        "ckpt-000000000010.json",
        "ckpt-000000000010.pt",
        "ckpt-000000000015.json",
        "ckpt-000000000015.pt",
    ]
    state = Checkpointer("s3://checkpoints/run-1", SINGLE).load()
    assert state is not None and state["step"] == 15 and torch.equal(state["weights"], torch.full((8,), 15.0))
    fs.pipe_file("checkpoints/run-1/ckpt-000000000015.pt", b"corrupted")
    state = Checkpointer("s3://checkpoints/run-1", SINGLE).load()
    assert state is not None and state["step"] == 10


def test_sigterm_saves_a_final_checkpoint_on_the_same_step_and_exits_143(tmp_path: Path) -> None:
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(TRAIN_SCRIPTS / "preempt.py"), str(tmp_path)],
            env={
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "RANK": str(r),
                "WORLD_SIZE": "2",
                "OMP_NUM_THREADS": "1",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    assert procs[0].stdout is not None
    for line in procs[0].stdout:
        if "step 5" in line:
            break
    procs[1].send_signal(signal.SIGTERM)  # only one rank is told; both must stop together
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [143, 143]
    state = Checkpointer(tmp_path, SINGLE).load()
    assert state is not None and state["step"] >= 5
    assert f"preempted (SIGTERM to rank 1); checkpoint of step {state['step']} saved" in outputs[0]


def test_saves_and_loads_are_named_phases_in_the_progress_report(tmp_path: Path) -> None:
    """Hang detection gives a checkpoint's save and load an allowance of their own (torchjob.sections)."""
    ckpt = Checkpointer(tmp_path, SINGLE)
    ckpt.save({"weights": torch.ones(1000)}, step=1)
    assert ckpt.load() is not None
    longest = sections.report_fields()[worker_files.REPORT_SECTIONS_LONGEST]
    assert longest["checkpoint-save"] > 0 and longest["checkpoint-load"] > 0
    assert worker_files.REPORT_SECTION not in sections.report_fields()  # neither is running now
