"""An elastic member lost: the group carries on smaller, then grows back; torchjob beside torchrun, in one run.

Three ways take turns in every round, each timed from the SIGKILL to the first step of the smaller group:

- **in place**: ``examples/mnist/job-elastic-inplace.yaml`` (3 Workers, at least 2, no idle spare; run for
  ``ELASTIC_EPOCHS`` so the replacement has time to join), worker-1's trainer SIGKILLed in epoch 3: the two others
  carry on at once (rank 0's repair record), and the replacement started for the lost place joins when warm
  (``grow at``: the group agreed to grow, from the kill; ``grow pause``: how long the others stopped for it);
- **torchjob, torchrun agents**: a 2-Worker elastic job (min 1, max 2, c10d) of the recovery payload, its agents
  torchrun's: the member whose trainer is rank 1 lost whole (agent and trainer, as when its node goes);
- **torchrun**: the anchor, the same two torchrun agents started by hand with the env Kubeflow gives them (c10d,
  ``--nnodes 1:2``, maxRestarts 3, torchrun's default rendezvous settings), the store hosted by whichever agent
  wins it. A trial not recovered within ``TIMEOUT`` counts as never.

``python -m bench --only elastic``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import yaml
from tests.support.servers import free_port

from bench import mnist_runs
from bench.measure import BIN, start_launcher, stop_launcher
from bench.records import Run
from torchjob.testing import make_job

PAYLOAD = Path(__file__).resolve().parent / "scripts" / "recovery_train.py"
TIMEOUT = 90.0
ELASTIC_EPOCHS = 24


def wait_for_files(path_glob: str, directory: Path, count: int, timeout: float) -> list[Path] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(directory.glob(path_glob))
        if len(found) >= count:
            return found
        time.sleep(0.01)
    return None


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
        processes.append(start_launcher(argv, env))
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        for _ in range(2):
            argv = [str(BIN / "torchrun"), "--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "3"]
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "bench", str(PAYLOAD)]
            processes.append(start_launcher(argv, env))
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
            stop_launcher(process, signal.SIGTERM, grace=30)


def record(run: Run, trials: int) -> None:
    samples: dict[str, list[float | None]] = {}
    for number in range(trials):
        shrunk = mnist_runs.torchjob("job-elastic-inplace.yaml", signal.SIGKILL, args=["--epochs", str(ELASTIC_EPOCHS)])
        found = {
            "in place first step": shrunk.repair("first_step_at") if shrunk.ok else None,
            "in place grow at": shrunk.regroup("agreed_at"),
            "in place grow pause": shrunk.regroup("first_step_at", since="agreed_at"),
            "in place accuracy": shrunk.accuracy,
        }
        for launcher in ("torchjob", "torchrun"):
            with tempfile.TemporaryDirectory(prefix=f"bench-elastic-{launcher}-") as work:
                found[f"{launcher} agents first step"] = _trial(launcher, Path(work))
        for case, value in found.items():
            samples.setdefault(case, []).append(value)
        print(f"  round {number + 1}: " + ", ".join(f"{case} {value}" for case, value in found.items()), flush=True)
    for case, values in samples.items():
        run.add(case, values, "" if "accuracy" in case else "s")
