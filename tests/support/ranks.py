"""N real ranks of a worker-library test script (tests/train/scripts), forked from a warm interpreter as torchjob
starts local replicas, with the Kubeflow env set by hand; none outlives the call."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support import warm_ranks
from tests.support.paths import TRAIN_SCRIPTS
from tests.support.servers import free_port
from tests.support.warm_ranks import WarmRank

# How long the other ranks may go on once one has failed (some tests make a rank fail and read what the others say).
_FAILED_RANK_GRACE = 20.0


def spawn_ranks(
    script: str, world: int, *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> list[subprocess.CompletedProcess[str]]:
    """Run ``world`` ranks of ``tests/train/scripts/<script>`` with the Kubeflow env set by hand; wait for all.

    The ranks are forked from a warm interpreter that imported torch once (tests/support/warm_ranks.py), as
    torchjob starts local replicas: a cold start's imports cost more CPU than most of these scripts run. A rank
    that fails while others still run (they would wait for it in the store or a collective for the group's whole
    timeout) gets the others stopped soon after, and so does the timeout: no rank outlives the call, and a timeout
    fails with every rank's exit code and the end of its output."""
    port = str(free_port())
    argv = [str(TRAIN_SCRIPTS / script), *args]
    with tempfile.TemporaryDirectory(prefix="ranks-") as folder:
        outputs = [os.path.join(folder, f"rank-{rank}.log") for rank in range(world)]
        procs = []
        for rank, output in enumerate(outputs):
            rank_env = {
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "OMP_NUM_THREADS": "1",
                **(env or {}),
            }
            procs.append(warm_ranks.shared().spawn(argv, rank_env, output))
        timed_out = _wait_or_stop(procs, timeout)
        texts = [Path(output).read_text(errors="replace") for output in outputs]
    if timed_out:
        said = "\n".join(f"rank {r} (exit {p.returncode}): ...{texts[r][-1500:]}" for r, p in enumerate(procs))
        raise AssertionError(f"ranks {timed_out} of {script} still ran after {timeout:g}s, and were stopped:\n{said}")
    return [subprocess.CompletedProcess(p.args, p.wait(), texts[r], "") for r, p in enumerate(procs)]


def run_sharded(
    world: int, *args: str, env: dict[str, str] | None = None
) -> tuple[str, str, list[subprocess.CompletedProcess[str]]]:
    """``world`` ranks of ``scripts/sharded.py``, every one ending with code 0: rank 0's final checksum, the
    checkpoints' steps it names, and every rank's result."""
    results = spawn_ranks("sharded.py", world, *args, env=env)
    assert [r.returncode for r in results] == [0] * world, "\n".join(r.stdout[-3000:] for r in results)
    found = re.search(r"CHECKSUM (\S+ \S+) steps (\[.*\])", results[0].stdout)
    assert found is not None, results[0].stdout[-3000:]
    return found[1], found[2], results


def _wait_or_stop(procs: list[WarmRank], timeout: float) -> list[int]:
    """Wait for every rank; kill those still running at the timeout, or ``_FAILED_RANK_GRACE`` after one failed.
    Returns the ranks the timeout stopped (none when a failed rank is what ended the wait)."""
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > _FAILED_RANK_GRACE:
            break
        time.sleep(0.1)
    running = [rank for rank, p in enumerate(procs) if p.poll() is None]
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    return running if failed_at is None else []
