"""The MNIST example on a real node, through `torchjob submit --follow` (on a terminal: with a progress bar):
it trains to the same accuracy as locally, writes its model to a PersistentVolumeClaim, and survives a SIGKILL
of a training process by a group restart that resumes from the checkpoint on that claim: with new Pods, or, with
``torchjob.io/warm-start: "true"``, in the same Pods, each one's launcher forking the script again."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuberig import Cluster
from tests.support.cluster_waits import wait_for_a_checkpoint, wait_for_condition
from tests.support.mnist_jobs import mnist_on_a_claim
from tests.support.operator import OperatorProcess

ROOT = Path(__file__).resolve().parents[2]


def _submit(cluster: Cluster, job: dict[str, Any], directory: Path, follow: bool) -> subprocess.Popen[str]:
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    namespace = job["metadata"]["namespace"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchjob.cli.main",
            "submit",
            str(path),
            "-n",
            namespace,
            *(["--follow"] if follow else []),
        ],
        env={**cluster.env(), "TORCHJOB_HOME": str(directory / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _submit_on_a_terminal(cluster: Cluster, job: dict[str, Any], directory: Path) -> tuple[Any, list[bytes]]:
    """`torchjob submit --follow` with a pseudo-terminal as its output, read in the background."""
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    env = {**cluster.env(), "TORCHJOB_HOME": str(directory / "home"), "TERM": "xterm", "COLUMNS": "160"}
    argv = [sys.executable, "-m", "torchjob.cli.main", "submit", str(path), "-n", job["metadata"]["namespace"], "-f"]
    parent, child = pty.openpty()
    process = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    seen: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # EIO: the other end closed
                break
            if not chunk:
                break
            seen.append(chunk)
        os.close(parent)

    threading.Thread(target=read, daemon=True).start()
    return process, seen


def test_mnist_example_trains_to_090_and_saves_its_model_on_a_claim(
    cluster: Cluster, node_operator: OperatorProcess, tmp_path: Path
) -> None:
    namespace = cluster.namespace("mnist")
    data = cluster.claim(namespace, "data")
    submitted, seen = _submit_on_a_terminal(cluster, mnist_on_a_claim(namespace), tmp_path)
    progress = _watch_progress(cluster, namespace, submitted)
    assert submitted.wait(timeout=400) == 0, b"".join(seen)[-3000:]
    time.sleep(0.5)  # the reader drains the terminal
    output = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(seen).decode(errors="replace"))  # without styles
    # On a terminal, --follow shows the job's progress bar under the lines (the Pods' reports, via status).
    assert "━" in output and re.search(r"\d+% · step \d+/\d+", output), output[-3000:]
    # `kubectl get pytorchjobs` showed the Pods' progress moving, and 100% at the end.
    on_the_way = sorted({int(v) for v in progress} - {100})
    assert len(on_the_way) >= 2 and all(0 <= v < 100 for v in on_the_way), progress
    assert _progress_column(cluster, namespace) == "100"
    # --follow interleaves every replica's lines, prefixed, as the seed's log format prints them.
    assert "[master-0] Rank 0: test accuracy=" in output, output[-3000:]
    assert "[worker-1]" in output
    master_log = cluster.kubectl("logs", "-f", "-n", namespace, "mnist-master-0").stdout
    assert "Rank 0: epoch 8/8" in master_log
    accuracy = float(master_log.split("test accuracy=")[1].split()[0])
    assert accuracy >= 0.90, master_log[-2000:]
    results = json.loads((data / "metrics.json").read_text())
    assert results["accuracy"] == accuracy
    assert (data / "mnist_cnn.pt").stat().st_size > 0


def _progress_column(cluster: Cluster, namespace: str) -> str:
    """The PROGRESS % column of `kubectl get pytorchjobs` for the job mnist (blank while unknown)."""
    lines = cluster.kubectl("get", "pytorchjobs", "-n", namespace, check=False).stdout.splitlines()
    if len(lines) < 2 or "PROGRESS %" not in lines[0] or "AGE" not in lines[0]:
        return ""
    return lines[1][lines[0].index("PROGRESS %") : lines[0].index("AGE")].strip()


def _watch_progress(cluster: Cluster, namespace: str, submitted: subprocess.Popen[Any]) -> list[str]:
    """Every value the column took while the job ran (collected in the background until the job ends)."""
    seen: list[str] = []

    def watch() -> None:
        while submitted.poll() is None:
            value = _progress_column(cluster, namespace)
            if value:
                seen.append(value)
            time.sleep(1)

    threading.Thread(target=watch, daemon=True).start()
    return seen


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_sigkill_of_a_training_process_restarts_the_group_from_the_claims_checkpoint(
    cluster: Cluster, node_operator: OperatorProcess, tmp_path: Path, start: str
) -> None:
    """Cold: every Pod of the group is created again. Warm (``torchjob.io/warm-start: "true"``): no Pod is; each
    one's launcher forks the script again for the next attempt, torch already imported."""
    namespace = cluster.namespace(f"mnist-kill-{start}")
    data = cluster.claim(namespace, "data")
    # 4 epochs, not the example's 8: what follows the restart is the resumed run to its end (0.94 at 4, 0.95 at 8).
    job = mnist_on_a_claim(namespace, "--checkpoint-every", "10", "--epochs", "4")
    if start == "warm":
        job["metadata"]["annotations"] = {"torchjob.io/warm-start": "true"}
    submitted = _submit(cluster, job, tmp_path, follow=False)
    assert submitted.wait(timeout=60) == 0, submitted.stdout.read() if submitted.stdout else ""
    wait_for_a_checkpoint(data, timeout=300)
    pods_before = _pod_uids(cluster, namespace)
    victims = cluster.container_pids(namespace, "mnist-worker-1")
    if start == "warm":  # the training process, as the OOM killer or a crash ends it: not its Pod's launcher
        launchers = [pid for pid in victims if b"torchjob.launch" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(launchers) == 1, victims
        victims = [pid for pid in victims if pid not in launchers]
    assert victims, "the training container has no processes"
    for pid in victims:  # from the host, as the kernel's OOM killer or a crash would end it
        os.kill(pid, signal.SIGKILL)
    job = wait_for_condition(cluster, namespace, "mnist", {"Succeeded", "Failed"}, timeout=400)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert "Failed" not in conditions, conditions["Failed"]["message"]
    assert job["status"]["restartCount"] == 1
    outcome = job["status"]["attempts"][0]["outcome"]  # the first attempt's root cause
    assert "worker-1" in outcome and ("137" in outcome or "SIGKILL" in outcome), outcome
    restarted_log = cluster.kubectl("logs", "-n", namespace, "mnist-master-0").stdout
    assert "resumed from the checkpoint of step" in restarted_log, restarted_log[-2000:]
    assert float(restarted_log.split("test accuracy=")[1].split()[0]) >= 0.90
    if start == "warm":
        assert _pod_uids(cluster, namespace) == pods_before  # no Pod was created again
        assert "torchjob: attempt 1 starts in this Pod, warm" in restarted_log


def _pod_uids(cluster: Cluster, namespace: str) -> dict[str, str]:
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "training.kubeflow.org/job-name=mnist")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}
