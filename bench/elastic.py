"""Elastic member loss: from the SIGKILL of one member (its torchrun agent and trainer, as when a node goes)
to the first completed training step of the group the survivor re-forms.

torchjob runs a 2-Worker elastic job (min 1, max 2, c10d) of the recovery payload. The anchor is the same two
torchrun agents started by hand with the env Kubeflow gives them (c10d, ``--nnodes 1:2``, maxRestarts 3,
torchrun's default rendezvous settings), the store hosted by whichever agent wins it. Each trial kills the
member whose trainer is rank 1; a trial that has not recovered within the timeout is counted as such.
``python -m bench.elastic`` runs it alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml
from tests.support.servers import free_port

from bench.launch import BIN
from bench.measure import recovery_trials
from bench.recovery import PAYLOAD, wait_for_files
from torchjob.testing import make_job

TIMEOUT = 90.0


def _kill_member(trainer_pid: int) -> None:
    """SIGKILL a trainer's agent and the trainer: the whole member goes at once."""
    trainer = psutil.Process(trainer_pid)
    agent = trainer.parent()
    for process in (agent, trainer):
        if process is not None:
            process.kill()


def _trial(launcher: str, work: Path) -> float | None:
    out = work / "out"
    out.mkdir()
    env = {**os.environ, "BENCH_OUT": str(out), "TORCHJOB_HOME": str(work / "home"), "OMP_NUM_THREADS": "1"}
    processes: list[subprocess.Popen[bytes]] = []
    if launcher == "torchjob":
        job = (
            make_job("elastic-recovery")
            .workers(2)
            .elastic(minReplicas=1, maxReplicas=2)
            .spec(nprocPerNode="1")
            .command("torchrun", str(PAYLOAD))
            .env(BENCH_OUT=str(out))
            .annotate(**{"torchjob.io/termination-grace-seconds": "2", "torchjob.io/replacement-delay-seconds": "600"})
            .wire()
        )
        (work / "job.yaml").write_text(yaml.safe_dump(job))
        argv = [str(BIN / "torchjob"), "run", str(work / "job.yaml")]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        for _ in range(2):
            argv = [str(BIN / "torchrun"), "--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "3"]
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "bench", str(PAYLOAD)]
            quiet = subprocess.DEVNULL
            processes.append(subprocess.Popen(argv, env=env, start_new_session=True, stdout=quiet, stderr=quiet))
    try:
        if wait_for_files("first-step-0-rank*.txt", out, 2, TIMEOUT) is None:
            raise RuntimeError(f"{launcher}: the group never trained")
        time.sleep(0.5)
        killed_at = time.time()
        _kill_member(int((out / "pid-0-rank1.txt").read_text()))
        found = wait_for_files("first-step-1-rank0.txt", out, 1, TIMEOUT)
        return None if found is None else float(found[0].read_text()) - killed_at
    finally:
        for process in processes:
            _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    tree = [process.pid] + [c.pid for c in _children(process.pid)]
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def measure(trials: int = 3) -> dict[str, tuple[float | None, int]]:
    """Launcher → (median seconds over the trials that recovered, how many did not recover)."""
    return recovery_trials(_trial, ("torchjob", "torchrun"), trials, "bench-elastic")


if __name__ == "__main__":
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for launcher, (seconds, failed) in measure(trials).items():
        shown = "never" if seconds is None else f"{seconds:.2f} s"
        print(f"{launcher}: member lost → first step of the smaller group: {shown} ({failed}/{trials} never did)")
